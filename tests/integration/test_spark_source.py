"""The Kafka source of the Spark stage: the Python streaming source, and the native path when present."""

from __future__ import annotations

import json
import time

import pytest

from processor.kafka.client_config import make_producer
from processor.kafka.produce import produce_all
from processor.spark.kafka_source import (
    KAFKA_SCHEMA,
    KafkaOffsetOutOfRange,
    KafkaRange,
    KafkaStreamReader,
    rate_limit,
    read_range,
)
from processor.testing.spark_synth import change_event, kafka_record

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def produce_numbered(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    records = [(f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), p) for p, n in per_partition.items() for i in range(n)]
    produce_all(make_producer(bootstrap), topic, records)


def reader(bootstrap: str, topic: str, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **options})


def flat(offsets: dict) -> dict[int, int]:
    (parts,) = offsets.values()
    return {int(p): o for p, o in parts.items()}


def test_latest_offset_caps_each_batch_at_max_offsets_per_trigger_then_reaches_the_end(broker, changes_topic):
    produce_numbered(broker.bootstrap, changes_topic, {0: 120, 1: 60, 2: 20})
    r = reader(broker.bootstrap, changes_topic, maxOffsetsPerTrigger="50")
    try:
        start = r.initialOffset()
        assert flat(start) == {0: 0, 1: 0, 2: 0}
        seen = []
        for _ in range(10):
            end = r.latestOffset()
            if end == start:
                break
            advance = {p: flat(end)[p] - flat(start)[p] for p in flat(end)}
            assert sum(advance.values()) <= 50 and all(a >= 0 for a in advance.values())
            seen.append(sum(advance.values()))
            r.partitions(start, end)  # Spark plans the batch: the cursor moves to `end`
            start = end
        assert flat(start) == {0: 120, 1: 60, 2: 20}  # the true end, despite Tansu's ListOffsets
        assert seen == [50, 50, 50, 50]
    finally:
        r.stop()


def test_rate_limit_shares_the_limit_by_backlog_exactly():
    start = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
    end = {("t", 0): 100, ("t", 1): 20, ("t", 2): 5}
    capped = rate_limit(start, end, 33)
    assert sum(capped[tp] - start[tp] for tp in end) == 33
    assert capped[("t", 2)] == 5 and capped[("t", 0)] > capped[("t", 1)] - 10
    assert rate_limit(start, end, 1000) == end


def test_restart_resumes_the_cursor_from_the_checkpointed_offset(broker, changes_topic):
    produce_numbered(broker.bootstrap, changes_topic, {0: 30, 1: 30, 2: 30})
    r = reader(broker.bootstrap, changes_topic, maxOffsetsPerTrigger="10")
    try:
        checkpointed = {changes_topic: {"0": 25, "1": 30, "2": 28}}
        r.partitions(checkpointed, checkpointed)  # what Spark's setLatestSeenOffset does on restart
        nxt = flat(r.latestOffset())
        assert all(nxt[int(p)] >= o for p, o in checkpointed[changes_topic].items())
        assert sum(nxt.values()) - (25 + 30 + 28) == 7  # the remaining backlog, under the cap
    finally:
        r.stop()


class _StubClient:
    """Offsets of a log whose start was moved by retention (Tansu cannot delete records)."""

    def partitions(self, topics):
        return [(topics[0], 0), (topics[0], 1)]

    def log_starts(self, tps):
        return {tp: 40 for tp in tps}

    def log_ends(self, tps):
        return {tp: 100 for tp in tps}

    def close(self):
        pass


def test_earliest_starts_at_the_log_start_not_at_zero():
    r = reader("unused:9092", "t")
    r._client = _StubClient()
    assert flat(r.initialOffset()) == {0: 40, 1: 40}


def test_starting_offsets_outside_the_log_raise_offset_out_of_range_clearly():
    r = reader("unused:9092", "t", startingOffsets=json.dumps({"t": {"0": 10, "1": 50}}))
    r._client = _StubClient()
    with pytest.raises(
        KafkaOffsetOutOfRange, match=r"OffsetOutOfRange: startingOffsets t-0@10 is outside the log \[40, 100\)"
    ):
        r.initialOffset()
    lenient = reader("unused:9092", "t", startingOffsets=json.dumps({"t": {"0": 10, "1": 50}}), failOnDataLoss="false")
    lenient._client = _StubClient()
    assert flat(lenient.initialOffset()) == {0: 40, 1: 50}


def test_reading_offsets_removed_by_retention_raises_offset_out_of_range(broker, changes_topic):
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    produce_numbered(broker.bootstrap, changes_topic, {0: 50})
    # Apache Kafka implements DeleteRecords; a just-created partition may still be settling its leader,
    # so transient errors are retried for a while, then fail the test (never a skip).
    deadline = time.monotonic() + 60
    while True:
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.delete_records([TopicPartition(changes_topic, 0, 20)], request_timeout=15).values():
                f.result(30)
            break
        except (KafkaException, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    with pytest.raises(KafkaOffsetOutOfRange, match=r"offsets \[0, 20\) are gone"):
        list(read_range(broker.bootstrap, KafkaRange(changes_topic, 0, 0, 50)))
    assert sum(b.num_rows for b in read_range(broker.bootstrap, KafkaRange(changes_topic, 0, 0, 50), False)) == 30


def test_read_range_returns_exactly_the_range_with_key_value_timestamp_and_headers(broker, changes_topic):
    producer = make_producer(broker.bootstrap)
    for i in range(40):
        producer.produce(
            changes_topic,
            key=b"k%d" % i,
            value=b"v%d" % i,
            partition=1,
            headers=[("trace", b"t%d" % i), ("origin", b"test")],
            timestamp=1_700_000_000_000 + i,
        )
    producer.flush(30)
    batches = list(read_range(broker.bootstrap, KafkaRange(changes_topic, 1, 5, 35), chunk=8))
    rows = [row for b in batches for row in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(5, 35))
    assert rows[0]["key"] == b"k5" and rows[0]["value"] == b"v5" and rows[0]["partition"] == 1
    assert rows[0]["headers"] == [{"key": "trace", "value": b"t5"}, {"key": "origin", "value": b"test"}]
    assert int(rows[0]["timestamp"].timestamp() * 1000) == 1_700_000_000_005
    assert rows[0]["timestampType"] == 0  # CreateTime, as format("kafka") reports it
    assert len(batches) == 4  # chunked, never one unbounded batch


def test_spark_reads_the_python_source_with_the_kafka_columns(spark, broker, changes_topic):
    from processor.spark.kafka_source import SOURCE_NAME, register

    events = [change_event("s.t", {"id": i}, "c", 10 + i, 1, after={"id": i}) for i in range(30)]
    produce_all(
        make_producer(broker.bootstrap), changes_topic, [(*kafka_record(e), i % 3) for i, e in enumerate(events)]
    )
    register(spark)
    got = []
    df = (
        spark.readStream.format(SOURCE_NAME)
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", changes_topic)
        .load()
    )
    assert df.schema == KAFKA_SCHEMA
    assert df.columns[:6] == ["key", "value", "topic", "partition", "offset", "timestamp"]
    q = df.writeStream.trigger(availableNow=True).foreachBatch(lambda b, _: got.extend(b.collect())).start()
    q.awaitTermination(120)
    assert q.exception() is None
    assert sorted(r["value"] for r in got) == sorted(kafka_record(e)[1] for e in events)
    assert {r["partition"] for r in got} == {0, 1, 2} and {r["topic"] for r in got} == {changes_topic}


@pytest.mark.timeout(1500)
def test_native_and_python_kafka_paths_land_the_same_delta_tables(spark, broker, changes_topic, tmp_path):
    from processor.spark.job import has_native_kafka, run_job
    from processor.spark.readback import read_changelog, read_state

    assert has_native_kafka(spark), "spark-sql-kafka and spark-avro must be on the session (deploy/maven/spark)"
    events = [
        change_event(
            "s.t",
            {"id": i % 7},
            "d" if i % 11 == 10 else "u",
            10 + i,
            1 + i % 3,
            after=None
            if i % 11 == 10
            else {"id": i % 7, "n": i, "x": i / 3, "s": f"v{i}", "b": i % 2 == 0, "y": bytes([i]), "z": None},
        )
        for i in range(40)
    ]
    producer = make_producer(broker.bootstrap)
    produce_all(producer, changes_topic, [(*kafka_record(e), i % 3) for i, e in enumerate(events)])
    producer.produce(changes_topic, key=b"tombstone", value=None, partition=0)  # compaction tombstone: no change
    producer.flush(30)
    columns = ["event_id", "table", "op", "key", "after", "commit_scn", "seq", "kafka_partition", "kafka_offset"]
    landed = {}
    for native in (True, False):
        out = tmp_path / ("native" if native else "python")
        summary = run_job(
            broker.bootstrap,
            changes_topic,
            str(tmp_path / f"ck-{native}"),
            out.as_uri(),
            spark=spark,
            native=native,
            max_offsets_per_trigger=25,
        )
        assert summary["native"] is native
        # Maps are unordered: spark-avro decodes an Avro map through a hash map, fastavro keeps wire order.
        log = sorted(
            (
                {k: dict(v) if k in ("key", "after") and v is not None else v for k, v in r.items()}
                for r in read_changelog(out, columns).to_pylist()
            ),
            key=lambda r: r["event_id"],
        )
        landed[native] = (read_state(out), log)
    assert landed[True] == landed[False]
    state, log = landed[True]
    assert len(log) == len(events) and len(state["s.t"]) == 7
    assert state["s.t"]['{"id":2}']["y"] == bytes([37])
