"""verify() against a real broker: a clean output passes, and each kind of damage is reported.
Also: the generator's partition_of agrees with the producer, and `txbuffer generate` writes a workload
whose raw topic, fed to the reference model, gives exactly the expected files."""

from __future__ import annotations

import argparse
import uuid

import pytest
from confluent_kafka import Producer

from processor.cli import generate as generate_cmd
from processor.core import events
from processor.core.partitioning import fan_out, partition_of
from processor.kafka.admin import ensure_topics
from processor.testing import expected
from processor.testing.generator import generate
from processor.testing.reference import ReferenceModel
from processor.testing.verify import read_topic, verify

pytestmark = pytest.mark.integration
T = "app.t"


def ev(xid, op, seq, scn, **fields):
    return events.raw_event(xid, op, seq, scn, **fields)


def row(xid, op, seq, scn, k, v):
    return ev(xid, op, seq, scn, table=T, key={"id": k}, after={"id": k, "v": v, "b": b"\x00\x01"})


@pytest.fixture
def committed():
    """Three committed transactions (t3 empty) and one rolled back, through the reference model."""
    model = ReferenceModel().feed_all(
        enumerate_offsets(
            [
                row("t1", "INSERT", 1, 10, 1, "a"),
                row("t1", "INSERT", 2, 11, 2, "b"),
                row("t1", "INSERT", 3, 12, 3, "c"),
                row("rb", "INSERT", 1, 13, 9, "never"),
                ev("t1", "COMMIT", 4, 100),
                row("t2", "UPDATE", 1, 101, 1, "a2"),
                row("t2", "INSERT", 2, 102, 4, "d"),
                ev("t2", "COMMIT", 3, 200),
                ev("rb", "ROLLBACK", 2, 201),
                ev("t3", "COMMIT", 1, 300),
            ]
        )
    )
    return model.committed[0]


def enumerate_offsets(evs):
    return [(0, offset, e) for offset, e in enumerate(evs)]


@pytest.fixture
def topics(broker):
    suffix = uuid.uuid4().hex[:8]
    names = (f"changes-{suffix}", f"transactions-{suffix}")
    ensure_topics(broker.bootstrap, {names[0]: 3, names[1]: 1})
    return names


def write_expected(directory, txns) -> None:
    writer = expected.ExpectedWriter(directory)
    for txn in txns:
        writer.write_committed(txn)
    writer.close({})


def produce(bootstrap, topic, records) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def change_record(change: dict) -> tuple[bytes, bytes]:
    return events.change_key(change["source"]["table"], change["key"]), events.encode_change(change)


def transaction_records(txns, skip_end=(), wrong_count=()) -> list[tuple[bytes, bytes]]:
    out = []
    for txn in txns:
        out.append((txn.xid.encode(), events.encode_transaction(txn.begin_record())))
        if txn.xid in skip_end:
            continue
        end = txn.end_record()
        if txn.xid in wrong_count:
            end["event_count"] += 1
        out.append((txn.xid.encode(), events.encode_transaction(end)))
    return out


def test_clean_output_passes(broker, topics, committed, tmp_path):
    write_expected(tmp_path, committed)
    changes = [c for txn in committed for c in txn.changes]
    produce(broker.bootstrap, topics[0], [change_record(c) for c in changes])
    produce(broker.bootstrap, topics[1], transaction_records(committed))
    report = verify(broker.bootstrap, tmp_path, changes_topic=topics[0], transactions_topic=topics[1])
    assert report.ok, report.summary()
    assert (report.expected, report.emitted, report.duplicates_before_dedup) == (5, 5, 0)
    assert (report.expected_transactions, report.begins, report.ends) == (3, 3, 3)
    assert "verify: OK" in report.summary()


def test_damage_of_every_kind_is_reported(broker, topics, committed, tmp_path):
    write_expected(tmp_path, committed)
    t1, t2, _ = committed
    a1, b1, c1 = t1.changes
    u1, d2 = t2.changes
    mismatched = {**c1, "after": {"id": 3, "v": "WRONG", "b": b"\x00\x01"}}
    rolled_back = {**a1, "event_id": "1:201:rb:1", "source": {**a1["source"], "xid": "rb", "commit_scn": 201}}
    damaged = [
        u1,
        a1,  # t2's update of row 1 before t1's insert of it: an order violation
        b1,
        b1,  # a duplicate
        mismatched,  # same event_id, other content
        rolled_back,  # emitted though rolled back
        # d2 is lost
    ]
    produce(broker.bootstrap, topics[0], [change_record(c) for c in damaged] + [(b"tomb", None)])
    produce(broker.bootstrap, topics[1], transaction_records(committed, skip_end={"t3"}, wrong_count={"t2"}))

    report = verify(broker.bootstrap, tmp_path, changes_topic=topics[0], transactions_topic=topics[1])
    assert not report.ok
    assert report.emitted == 6 and report.tombstones == 1
    assert report.duplicates_before_dedup == 1
    assert report.lost == 1 and report.samples["lost"] == [d2["event_id"]]
    assert report.unexpected == 1 and report.samples["unexpected"] == ["1:201:rb:1"]
    assert report.mismatches == 1 and report.samples["mismatches"] == [c1["event_id"]]
    assert report.order_violations == 1 and a1["event_id"] in report.samples["order_violations"][0]
    assert report.missing_ends == 1 and report.samples["missing_ends"] == ["t3@300"]
    assert report.end_count_mismatches == 1
    assert "FAILED" in report.summary()


def test_partition_of_matches_the_producer(broker):
    from processor.kafka.rawtopic import RawTopicWriter

    topic = f"raw-{uuid.uuid4().hex[:8]}"
    writer = RawTopicWriter(broker.bootstrap, topic, partitions=5)
    xids = [f"tx-{i}" for i in range(200)] + ["0001.002.00003456", "7"]
    for xid in xids:
        writer.write(ev(xid, "BEGIN", 0, 1))
    writer.flush()
    placed = {events.decode_raw(value)["xid"]: p for p, _, _, value in read_topic(broker.bootstrap, topic)}
    assert placed == {xid: partition_of(xid, 5) for xid in xids}


def test_generate_command_writes_a_workload_the_reference_model_agrees_with(broker, tmp_path):
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    parser = argparse.ArgumentParser()
    generate_cmd.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "generate",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--partitions",
            "3",
            "--events",
            "3000",
            "--open-txns",
            "30",
            "--seed",
            "2",
            "--heartbeat-every",
            "250",
            "--expected-dir",
            str(tmp_path),
        ]
    )
    assert args.func(args) == 0

    records = sorted(read_topic(broker.bootstrap, topic), key=lambda r: (r[0], r[1]))
    model = ReferenceModel().feed_all((p, offset, value) for p, offset, _, value in records)
    assert model.dlq == []
    got = [c["event_id"] for txn in model.all_committed() for c in txn.changes]
    assert got == [line["event_id"] for line in expected.read_changes(tmp_path)]
    summary = expected.read_summary(tmp_path)
    assert len(records) == summary["events"] + 3 * summary["heartbeats"]
    # the broker holds exactly what fan_out predicts, partition by partition
    routed = fan_out(generate(3000, open_txns=30, seed=2, heartbeat_every=250), 3)
    predicted = sorted((p, o, events.encode_raw(e)) for p, o, e in routed)
    assert [(p, o, v) for p, o, _, v in records] == predicted


def test_partition_ordering_only_orders_transactions_of_one_input_partition(broker, topics, committed, tmp_path):
    write_expected(tmp_path, committed)
    t1, t2, _t3 = committed
    t2.partition = 1  # t2 came from another raw partition: its END says so
    (a1, b1, c1), (u1, d2) = t1.changes, t2.changes
    produce(broker.bootstrap, topics[0], [change_record(c) for c in (u1, d2, a1, b1, c1)])
    produce(broker.bootstrap, topics[1], transaction_records(committed))

    per_partition = verify(broker.bootstrap, tmp_path, changes_topic=topics[0], transactions_topic=topics[1])
    assert per_partition.ok and per_partition.order_violations == 0, per_partition.summary()
    strict = verify(
        broker.bootstrap, tmp_path, changes_topic=topics[0], transactions_topic=topics[1], ordering="global"
    )
    assert strict.order_violations == 1 and not strict.ok
