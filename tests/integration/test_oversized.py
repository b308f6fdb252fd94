"""Records over the broker's size limit never crash-loop the pipeline (oversized: dlq | fail).

Output: a change whose LOB fragments assemble to more than the limit (every input record fits, the
merged change does not). Input: a source event larger than the raw topic accepts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from processor.core import events as ev
from processor.kafka.admin import ensure_topics
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.embedded import EmbeddedKafka
from processor.kafka.produce import RecordTooLarge
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.read import read_to_end

PIECE = 400_000  # three pieces fit the raw topic one by one; the merged change (1.2 MB) does not


@pytest.fixture(scope="module")
def kafka():
    broker = EmbeddedKafka().start(timeout_s=180)  # generous: the suite shares two cores with JVMs
    try:
        yield broker
    finally:
        broker.stop()


def _topics() -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    return {name: f"txbuffer.{name}-{tag}" for name in ("raw", "changes", "transactions", "dlq", "outcomes")} | {
        "group": f"txbuffer-{tag}"
    }


def _big_and_small_transactions(writer: RawTopicWriter) -> None:
    row = {"table": "s.docs", "key": {"ID": 1}}
    writer.write(ev.raw_event("big", ev.BEGIN, 0, 10))
    writer.write(ev.raw_event("big", ev.INSERT, 1, 11, after={"ID": 1, "DOC": ""}, **row))
    for seq in (2, 3, 4):
        writer.write(ev.raw_event("big", ev.LOB_WRITE, seq, 11 + seq, lob_column="DOC", lob_data="x" * PIECE, **row))
    writer.write(ev.raw_event("big", ev.COMMIT, 5, 20))
    small = {"table": "s.docs", "key": {"ID": 2}}
    writer.write(ev.raw_event("small", ev.BEGIN, 0, 21))
    writer.write(ev.raw_event("small", ev.INSERT, 1, 22, after={"ID": 2, "DOC": "ok"}, **small))
    writer.write(ev.raw_event("small", ev.COMMIT, 2, 23))
    writer.heartbeat(30)
    writer.flush()


def _run(kafka: EmbeddedKafka, topics: dict[str, str], state_dir, *extra: str) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "processor.cli",
        "--log-format",
        "json",
        "run",
        "--bootstrap",
        kafka.bootstrap,
        "--state-dir",
        str(state_dir),
        "--available-now",
        "--group",
        topics["group"],
    ]
    args += [a for name in ("raw", "changes", "transactions", "dlq", "outcomes")
             for a in (f"--{name}-topic", topics[name])]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXBUFFER_")}
    return subprocess.run([*args, *extra], env=env, capture_output=True, text=True, timeout=240)


def test_an_oversized_output_change_is_dead_lettered_and_its_end_says_so(kafka, tmp_path):
    topics = _topics()
    _big_and_small_transactions(RawTopicWriter(kafka.bootstrap, topics["raw"], partitions=1))

    first = _run(kafka, topics, tmp_path / "state")
    assert first.returncode == 0, first.stderr[-3000:]
    again = _run(kafka, topics, tmp_path / "state")  # a restart has nothing left to retry
    assert again.returncode == 0, again.stderr[-3000:]

    changes = [ev.decode_change(m.value()) for m in read_to_end(kafka.bootstrap, topics["changes"])]
    assert [(c["source"]["xid"], c["key"]) for c in changes] == [("small", {"ID": 2})]
    dead = list(read_to_end(kafka.bootstrap, topics["dlq"]))
    assert len(dead) == 1
    headers = read_dlq_headers(dead[0].headers())
    assert headers["reason"].startswith(f"record too large for {topics['changes']}")
    assert (headers["source"], headers["xid"]) == (topics["changes"], "big")
    assert headers["event_id"].endswith(":big:1") and int(headers["size"]) > 3 * PIECE
    assert dead[0].value() is None  # too large for the DLQ as well: the headers say where and why
    ends = {
        t["id"]: t
        for t in (ev.decode_transaction(m.value()) for m in read_to_end(kafka.bootstrap, topics["transactions"]))
        if t["status"] == "END"
    }
    assert set(ends) == {"big", "small"}
    assert "1 change(s) dead-lettered: record too large" in ends["big"]["reason"]
    assert ends["small"]["reason"] is None


def test_oversized_fail_policy_stops_with_the_reason(kafka, tmp_path):
    topics = _topics()
    _big_and_small_transactions(RawTopicWriter(kafka.bootstrap, topics["raw"], partitions=1))
    proc = _run(kafka, topics, tmp_path / "state", "--oversized", "fail")
    assert proc.returncode != 0
    assert "record too large" in proc.stderr
    assert list(read_to_end(kafka.bootstrap, topics["dlq"])) == []


def test_a_source_event_over_the_raw_topic_limit_goes_to_the_dlq_and_the_rest_is_written(kafka):
    topics = _topics()
    # A topic limit below the producer's own: the writer caps its producer to it, so the broker
    # never refuses a whole batch for one record.
    ensure_topics(kafka.bootstrap, {topics["raw"]: 1}, config={"max.message.bytes": "100000"})
    writer = RawTopicWriter(kafka.bootstrap, topics["raw"], dlq_topic=topics["dlq"], source="generate")
    writer.write(ev.raw_event("t1", ev.BEGIN, 0, 1))
    writer.write(ev.raw_event("t1", ev.INSERT, 1, 2, table="s.docs", after={"DOC": "y" * 200_000}))
    writer.write(ev.raw_event("t1", ev.COMMIT, 2, 3))
    writer.flush()
    assert (writer.written, writer.oversized) == (2, 1)
    ops = [ev.decode_raw(m.value())["op"] for m in read_to_end(kafka.bootstrap, topics["raw"])]
    assert ops == [ev.BEGIN, ev.COMMIT]
    (dead,) = read_to_end(kafka.bootstrap, topics["dlq"])
    headers = read_dlq_headers(dead.headers())
    assert (headers["source"], headers["xid"]) == ("generate", "t1")
    assert "record too large" in headers["reason"]


def test_without_a_dlq_an_oversized_source_event_raises_a_typed_error(kafka):
    topics = _topics()
    writer = RawTopicWriter(kafka.bootstrap, topics["raw"], partitions=1)
    with pytest.raises(RecordTooLarge, match="record too large"):
        writer.write(ev.raw_event("t1", ev.INSERT, 1, 2, table="s.t", after={"DOC": "z" * 2_000_000}))
