"""Records over the broker's size limit never crash-loop the pipeline (oversized: dlq | fail | chunk).

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
from processor.core import incomplete
from processor.kafka.admin import ensure_topics
from processor.kafka.chunking import chunk_of
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.embedded import EmbeddedKafka
from processor.kafka.produce import RecordTooLarge
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.read import read_to_end
from processor.testing.reference import ReferenceModel

PIECE = 400_000  # three pieces fit the raw topic one by one; the merged change (1.2 MB) does not
SMALL_LIMIT = 100_000  # max.message.bytes of the changes topic in the small-limit tests
SMALL_PIECE = 60_000  # five of them: a 300 KB change, three or more chunks at that limit


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


def _big_and_small_transactions(writer: RawTopicWriter, piece: int = PIECE, pieces: int = 3) -> None:
    row = {"table": "s.docs", "key": {"ID": 1}}
    writer.write(ev.raw_event("big", ev.BEGIN, 0, 10))
    writer.write(ev.raw_event("big", ev.INSERT, 1, 11, after={"ID": 1, "DOC": ""}, **row))
    for seq in range(2, 2 + pieces):
        # Distinct letters: a reassembly that reorders or repeats chunks cannot match.
        data = chr(ord("a") + seq) * piece
        writer.write(ev.raw_event("big", ev.LOB_WRITE, seq, 11 + seq, lob_column="DOC", lob_data=data, **row))
    writer.write(ev.raw_event("big", ev.COMMIT, 2 + pieces, 20 + pieces))
    small = {"table": "s.docs", "key": {"ID": 2}}
    writer.write(ev.raw_event("small", ev.BEGIN, 0, 30 + pieces))
    writer.write(ev.raw_event("small", ev.INSERT, 1, 31 + pieces, after={"ID": 2, "DOC": "ok"}, **small))
    writer.write(ev.raw_event("small", ev.COMMIT, 2, 32 + pieces))
    writer.heartbeat(40 + pieces)
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
    assert (writer.written, writer.oversized) == (3, 1)
    raw = [ev.decode_raw(m.value()) for m in read_to_end(kafka.bootstrap, topics["raw"])]
    assert [(e["op"], e["seq"], e["savepoint"]) for e in raw] == [
        (ev.BEGIN, 0, None),
        (ev.SAVEPOINT, 1, incomplete.MARK),  # the incomplete marker, in the lost event's place
        (ev.COMMIT, 2, None),
    ]
    assert raw[1]["attrs"][incomplete.ATTR_OP] == ev.INSERT and int(raw[1]["attrs"][incomplete.ATTR_SIZE]) > 200_000
    (dead,) = read_to_end(kafka.bootstrap, topics["dlq"])
    headers = read_dlq_headers(dead.headers())
    assert (headers["source"], headers["xid"]) == ("generate", "t1")
    assert "record too large" in headers["reason"]


@pytest.mark.parametrize("producer", ["native", "confluent"])
def test_a_run_of_encoded_events_is_written_in_order_and_its_oversized_event_goes_to_the_dlq(kafka, producer):
    """write_encoded_run (the paced bench source's lap): the native producer queues the run in one call
    and stops at the record it refuses; confluent-kafka's has no such call and writes event by event."""
    if producer == "native":
        from processor.kafka import output_producer

        if output_producer.NativeProducer is None:
            pytest.skip(f"native producer not built: {output_producer.UNAVAILABLE}")
    topics = _topics()
    ensure_topics(kafka.bootstrap, {topics["raw"]: 1}, config={"max.message.bytes": "100000"})
    writer = RawTopicWriter(
        kafka.bootstrap, topics["raw"], dlq_topic=topics["dlq"], source="generate", producer=producer
    )
    events = [
        ev.raw_event("t1", ev.BEGIN, 0, 1),
        ev.raw_event("t1", ev.INSERT, 1, 2, table="s.docs", after={"DOC": "small"}),
        ev.raw_event("t1", ev.INSERT, 2, 3, table="s.docs", after={"DOC": "y" * 200_000}),
        ev.raw_event("t1", ev.INSERT, 3, 4, table="s.docs", after={"DOC": "after"}),
        ev.raw_event("t1", ev.COMMIT, 4, 5),
    ]
    records = [(e["xid"], ev.encode_raw(e), "event") for e in events]
    writer.write_encoded_run(records, 1, 5)
    writer.write_encoded_run(records, 0, 1)  # a run may start anywhere
    writer.flush()
    assert (writer.written, writer.oversized) == (5, 1)
    raw = [ev.decode_raw(m.value()) for m in read_to_end(kafka.bootstrap, topics["raw"])]
    assert [(e["op"], e["seq"]) for e in raw] == [
        (ev.INSERT, 1),
        (ev.SAVEPOINT, 2),  # the incomplete marker, in the oversized event's place
        (ev.INSERT, 3),
        (ev.COMMIT, 4),
        (ev.BEGIN, 0),
    ]
    (dead,) = read_to_end(kafka.bootstrap, topics["dlq"])
    assert read_dlq_headers(dead.headers())["xid"] == "t1"


def test_without_a_dlq_an_oversized_source_event_raises_a_typed_error(kafka):
    topics = _topics()
    writer = RawTopicWriter(kafka.bootstrap, topics["raw"], partitions=1)
    with pytest.raises(RecordTooLarge, match="record too large"):
        writer.write(ev.raw_event("t1", ev.INSERT, 1, 2, table="s.t", after={"DOC": "z" * 2_000_000}))


def test_a_raw_event_the_broker_refuses_after_it_was_queued_fails_the_flush(kafka):
    """The writer's producer reports failures only (kafka/rawtopic.py): a refusal by the broker, past
    the producer's own size check, still reaches flush() as an error, and the next events are written."""
    topics = _topics()
    ensure_topics(kafka.bootstrap, {topics["raw"]: 1}, config={"max.message.bytes": str(SMALL_LIMIT)})
    # The producer is told a larger limit than the topic's, so only the broker can refuse the record
    # (uncompressed: lz4 would shrink the repeated letter below the topic's limit).
    conf = {"message.max.bytes": 1_000_000, "compression.type": "none"}
    writer = RawTopicWriter(kafka.bootstrap, topics["raw"], partitions=1, **conf)
    writer.write(ev.raw_event("t1", ev.INSERT, 1, 2, table="s.t", after={"DOC": "z" * (2 * SMALL_LIMIT)}))
    with pytest.raises(RuntimeError, match="1 raw events failed"):
        writer.flush(30)
    writer.failed.clear()
    writer.write(ev.raw_event("t2", ev.COMMIT, 1, 3))
    writer.flush(30)
    assert [ev.decode_raw(r.value())["xid"] for r in read_to_end(kafka.bootstrap, topics["raw"])] == ["t2"]


# -- a changes topic with a small max.message.bytes, both policies -------------------------------


def _small_limit_topics(kafka: EmbeddedKafka) -> dict[str, str]:
    """Topics whose changes topic takes records up to SMALL_LIMIT, over three partitions."""
    topics = _topics()
    ensure_topics(kafka.bootstrap, {topics["changes"]: 3}, config={"max.message.bytes": str(SMALL_LIMIT)})
    _big_and_small_transactions(RawTopicWriter(kafka.bootstrap, topics["raw"], partitions=1), SMALL_PIECE, 5)
    return topics


def _reference(kafka: EmbeddedKafka, topics: dict[str, str]) -> ReferenceModel:
    raw = read_to_end(kafka.bootstrap, topics["raw"])
    return ReferenceModel().feed_all((m.partition(), m.offset(), m.value()) for m in raw)


def _ends(kafka: EmbeddedKafka, topics: dict[str, str]) -> dict[str, dict]:
    records = (ev.decode_transaction(m.value()) for m in read_to_end(kafka.bootstrap, topics["transactions"]))
    return {t["id"]: t for t in records if t["status"] == "END"}


@pytest.mark.parametrize("guarantee", ["at_least_once_dedup", "exactly_once"])
def test_a_chunked_output_change_reassembles_to_the_reference_change(kafka, tmp_path, guarantee):
    topics = _small_limit_topics(kafka)
    for _ in range(2):  # the second run (a restart) finds nothing left to write
        proc = _run(
            kafka, topics, tmp_path / "state", "--oversized", "chunk", "--guarantee", guarantee,
            "--transactional-id", topics["group"],
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]

    committed = _reference(kafka, topics).all_committed()
    expected = [change for txn in committed for change in txn.changes]
    assert [c["source"]["xid"] for c in expected] == ["big", "small"]
    assert len(expected[0]["after"]["DOC"]) == 5 * SMALL_PIECE

    records = list(read_to_end(kafka.bootstrap, topics["changes"], reassemble=False))
    chunks = [m for m in records if chunk_of(m.headers()) is not None]
    positions = [chunk_of(m.headers()) for m in chunks]
    n = len(chunks)
    assert n >= 3
    assert positions == [(i, n, expected[0]["event_id"]) for i in range(n)]  # in offset order, once
    assert {(m.key(), m.partition()) for m in chunks} == {(records[0].key(), records[0].partition())}
    assert all(len(m.value()) < SMALL_LIMIT for m in chunks)

    changes = [ev.decode_change(m.value()) for m in read_to_end(kafka.bootstrap, topics["changes"])]
    assert changes == expected  # field by field, each change once, the chunked one whole
    ends = _ends(kafka, topics)
    assert {xid: (e["event_count"], e["reason"]) for xid, e in ends.items()} == {"big": (1, None), "small": (1, None)}
    assert list(read_to_end(kafka.bootstrap, topics["dlq"])) == []


def test_with_a_small_limit_the_dlq_policy_dead_letters_the_change_and_keeps_the_rest(kafka, tmp_path):
    topics = _small_limit_topics(kafka)
    proc = _run(kafka, topics, tmp_path / "state", "--oversized", "dlq")
    assert proc.returncode == 0, proc.stderr[-3000:]

    committed = _reference(kafka, topics).all_committed()
    big, small = (change for txn in committed for change in txn.changes)
    changes = [ev.decode_change(m.value()) for m in read_to_end(kafka.bootstrap, topics["changes"])]
    assert changes == [small]
    (dead,) = read_to_end(kafka.bootstrap, topics["dlq"])
    headers = read_dlq_headers(dead.headers())
    assert (headers["xid"], headers["event_id"]) == ("big", big["event_id"])
    assert int(headers["size"]) > 5 * SMALL_PIECE  # the producer is capped at the smallest output limit
    ends = _ends(kafka, topics)
    assert ends["big"]["event_count"] == 1 and "1 change(s) dead-lettered" in ends["big"]["reason"]
    assert ends["small"]["reason"] is None


@pytest.mark.parametrize("policy", ["chunk", "fail"])
def test_an_oversized_source_event_follows_the_policy(kafka, policy):
    """Raw events are not chunked: `chunk` dead-letters them like `dlq`, `fail` raises."""
    topics = _topics()
    ensure_topics(kafka.bootstrap, {topics["raw"]: 1}, config={"max.message.bytes": "100000"})
    writer = RawTopicWriter(
        kafka.bootstrap, topics["raw"], dlq_topic=topics["dlq"], source="generate", oversized=policy
    )
    writer.write(ev.raw_event("t1", ev.BEGIN, 0, 1))
    big = ev.raw_event("t1", ev.INSERT, 1, 2, table="s.docs", after={"DOC": "y" * 200_000})
    if policy == "fail":
        with pytest.raises(RecordTooLarge, match="record too large"):
            writer.write(big)
        return
    writer.write(big)
    writer.write(ev.raw_event("t1", ev.COMMIT, 2, 3))
    writer.flush()
    raw = [ev.decode_raw(m.value()) for m in read_to_end(kafka.bootstrap, topics["raw"])]
    assert [(e["op"], e["savepoint"]) for e in raw] == [
        (ev.BEGIN, None),
        (ev.SAVEPOINT, incomplete.MARK),
        (ev.COMMIT, None),
    ]
    (dead,) = read_to_end(kafka.bootstrap, topics["dlq"])
    headers = read_dlq_headers(dead.headers())
    assert headers["reason"].endswith("raw events are not chunked") and int(headers["size"]) > 200_000
    assert ev.decode_raw(dead.value()) == big  # the event itself, untouched


# -- a source event over the raw topic's limit, through the processor ----------------------------


def _lossy_source(kafka: EmbeddedKafka, topics: dict[str, str], policy: str) -> RawTopicWriter:
    """t1 loses its second INSERT (too large for the raw topic), t2 is whole, t3 loses one and rolls
    back (nothing lost), t4's COMMIT is written again without its attrs (nothing lost)."""
    ensure_topics(kafka.bootstrap, {topics["raw"]: 1}, config={"max.message.bytes": "100000"})
    writer = RawTopicWriter(
        kafka.bootstrap, topics["raw"], dlq_topic=topics["dlq"], source="generate", oversized=policy
    )
    row = {"table": "s.docs"}
    big = {"DOC": "y" * 200_000}
    for e in [
        ev.raw_event("t1", ev.BEGIN, 0, 1),
        ev.raw_event("t1", ev.INSERT, 1, 2, key={"ID": 1}, after={"ID": 1}, **row),
        ev.raw_event("t2", ev.BEGIN, 0, 3),
        ev.raw_event("t1", ev.INSERT, 2, 4, key={"ID": 2}, after={"ID": 2, **big}, **row),
        ev.raw_event("t2", ev.INSERT, 1, 5, key={"ID": 3}, after={"ID": 3}, **row),
        ev.raw_event("t1", ev.INSERT, 3, 6, key={"ID": 4}, after={"ID": 4}, **row),
        ev.raw_event("t1", ev.COMMIT, 4, 7),
        ev.raw_event("t2", ev.COMMIT, 2, 8),
        ev.raw_event("t3", ev.BEGIN, 0, 9),
        ev.raw_event("t3", ev.INSERT, 1, 10, key={"ID": 5}, after={"ID": 5, **big}, **row),
        ev.raw_event("t3", ev.ROLLBACK, 2, 11),
        ev.raw_event("t4", ev.BEGIN, 0, 12),
        ev.raw_event("t4", ev.INSERT, 1, 13, key={"ID": 6}, after={"ID": 6}, **row),
        ev.raw_event("t4", ev.COMMIT, 2, 14, attrs={"note": "z" * 200_000}),
    ]:
        if e["xid"] == "t3":  # as the PostgreSQL capture writes: encoded bytes, no dict
            writer.write_encoded(e["xid"], ev.encode_raw(e))
        else:
            writer.write(e)
    writer.heartbeat(20)
    writer.flush()
    return writer


@pytest.mark.parametrize(
    ("policy", "guarantee"),
    [("dlq", "at_least_once_dedup"), ("chunk", "at_least_once_dedup"), ("dlq", "exactly_once")],
)
def test_a_transaction_that_lost_an_event_at_the_source_is_dead_lettered_whole(kafka, tmp_path, policy, guarantee):
    topics = _topics()
    writer = _lossy_source(kafka, topics, policy)
    assert writer.oversized == 3
    for _ in range(2):  # a restart finds nothing left to do
        proc = _run(
            kafka, topics, tmp_path / "state", "--oversized", policy, "--guarantee", guarantee,
            "--transactional-id", topics["group"],
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]

    changes = [ev.decode_change(m.value()) for m in read_to_end(kafka.bootstrap, topics["changes"])]
    assert [(c["source"]["xid"], c["key"]) for c in changes] == [("t2", {"ID": 3}), ("t4", {"ID": 6})]
    ends = _ends(kafka, topics)
    assert set(ends) == {"t2", "t4"}  # t1 never looks committed to a consumer
    transactions = [ev.decode_transaction(m.value()) for m in read_to_end(kafka.bootstrap, topics["transactions"])]
    assert "t1" not in {t["id"] for t in transactions}  # not even its BEGIN

    dead = [(read_dlq_headers(m.headers()), m) for m in read_to_end(kafka.bootstrap, topics["dlq"])]
    at_source = [(h["xid"], int(h["size"])) for h, _ in dead if h["source"] == "generate"]
    assert [xid for xid, _ in at_source] == ["t1", "t3", "t4"] and all(size > 200_000 for _, size in at_source)
    by_processor = [(h, m) for h, m in dead if h["source"] == topics["raw"]]
    assert len(by_processor) == 1, [h for h, _ in dead]
    headers, record = by_processor[0]
    assert headers["xid"] == "t1" and record.value() is None
    assert headers["reason"].startswith("incomplete: event seq 2 (INSERT s.docs, scn 4, ")
    assert "oversized at source: record too large" in headers["reason"]
    assert ("raw events are not chunked" in headers["reason"]) == (policy == "chunk")
    raw = list(read_to_end(kafka.bootstrap, topics["raw"]))
    commits = [ev.decode_raw(m.value()) for m in raw if ev.decode_raw(m.value())["op"] == ev.COMMIT]
    assert commits[-1]["xid"] == "t4" and int(commits[-1]["attrs"][incomplete.ATTR_STRIPPED]) > 200_000
    commit_of_t1 = next(m.offset() for m in raw if m.key() == b"t1" and ev.decode_raw(m.value())["op"] == ev.COMMIT)
    assert (headers["partition"], headers["offset"]) == ("0", str(commit_of_t1))
    outcomes = {
        o["xid"]: o["outcome"]
        for o in map(ev.decode_outcome, (m.value() for m in read_to_end(kafka.bootstrap, topics["outcomes"])))
    }
    assert outcomes == {"t1": "abandoned", "t3": "rolled_back"}
