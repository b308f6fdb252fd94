"""`txbuffer replay oracle|ibmi FILE` against a real broker: events keyed by XID on the raw topic,
heartbeats on every partition, bad rows on the DLQ with their reason, and the replayed events give
the expected tables through the reference model."""

import argparse
import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from processor.cli import replay as replay_cmd
from processor.core import events
from processor.kafka.client_config import CONSUMER_DEFAULTS
from processor.testing.reference import ReferenceModel

from ..sourcekit import table_state

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parent.parent / "data"


def read_topic(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30.0) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}", **CONSUMER_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, deadline = [], time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg)
        # anything beyond the expected count is a bug too
        extra_deadline = time.monotonic() + 1.0
        while time.monotonic() < extra_deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg)
    finally:
        consumer.close()
    return out


def replay(bootstrap: str, source: str, path: Path, partitions: int = 3) -> tuple[str, str]:
    parser = argparse.ArgumentParser()
    replay_cmd.register(parser.add_subparsers())
    raw, dlq = f"raw-{uuid.uuid4().hex[:8]}", f"dlq-{uuid.uuid4().hex[:8]}"
    args = parser.parse_args(
        [
            "replay",
            source,
            str(path),
            "--bootstrap",
            bootstrap,
            "--topic",
            raw,
            "--partitions",
            str(partitions),
            "--dlq-topic",
            dlq,
        ]
    )
    assert args.func(args) == 0
    return raw, dlq


def _dec(v):
    if isinstance(v, dict) and set(v) == {"$hex"}:
        return bytes.fromhex(v["$hex"])
    if isinstance(v, dict):
        return {k: _dec(x) for k, x in v.items()}
    return v


@pytest.mark.parametrize(
    "source, sample, expected_file",
    [
        ("oracle", "oracle_logminer.csv", "oracle_logminer.expected.json"),
        ("oracle", "oracle_logminer_export.csv", "oracle_logminer_export.expected.json"),  # format auto-detected
        ("ibmi", "ibmi_journal.jsonl", "ibmi_journal.expected.json"),
    ],
)
def test_replay_writes_events_heartbeats_and_dead_letters(broker, source, sample, expected_file):
    expected = json.loads((DATA / expected_file).read_text())
    partitions = 3
    raw, dlq = replay(broker.bootstrap, source, DATA / sample, partitions)

    msgs = read_topic(broker.bootstrap, raw, partitions, len(expected["events"]) + partitions)
    decoded = [(m.partition(), m.offset(), m.key(), events.decode_raw(m.value())) for m in msgs]
    heartbeats = [(p, e) for p, _, _, e in decoded if e["op"] == "HEARTBEAT"]
    changes = [(p, o, k, e) for p, o, k, e in decoded if e["op"] != "HEARTBEAT"]
    assert sorted(p for p, _ in heartbeats) == list(range(partitions))
    assert len(changes) == len(expected["events"])
    # key = XID; one XID lives on one partition, in seq order
    partition_of: dict[str, int] = {}
    for p, _, key, e in sorted(changes, key=lambda c: (c[0], c[1])):
        assert key == e["xid"].encode()
        assert partition_of.setdefault(e["xid"], p) == p
    for xid in partition_of:
        seqs = [e["seq"] for _, _, _, e in sorted(changes, key=lambda c: (c[0], c[1])) if e["xid"] == xid]
        assert seqs == sorted(seqs)
    # heartbeats come after every COMMIT and carry the highest commit position
    commit_scn = max(e["scn"] for *_, e in changes if e["op"] == "COMMIT")
    assert {e["scn"] for _, e in heartbeats} == {commit_scn}

    model = ReferenceModel()
    for p, o, _, e in sorted(decoded, key=lambda d: (d[0], d[1])):
        model.feed(p, o, e)
    assert model.dlq == []
    state = table_state(model)
    for table, rows in expected["tables"].items():
        want = {json.dumps({"ID": r["ID"]}, sort_keys=True): _dec(r) for r in rows}
        assert state.get(table, {}) == want

    dead = read_topic(broker.bootstrap, dlq, 1, len(expected["dlq"]))
    assert [dict(m.headers())["reason"].decode() for m in dead] == [d["reason"] for d in expected["dlq"]]
    assert all(dict(m.headers())["source"] == source.encode() for m in dead)
    assert all(m.value() for m in dead)  # the original row travels with its reason
