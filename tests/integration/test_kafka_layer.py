"""The Kafka helper layer against Apache Kafka: topic admin, the ListOffsets probe, the bounded
reader on transactional topics, produce-with-retry and the DLQ writer."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException

from processor.kafka.admin import KafkaUnavailable, check_connection, ensure_topics, partition_count
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.dlq import DeadLetterWriter, read_dlq_headers
from processor.kafka.end_offsets import end_offsets, start_offsets
from processor.kafka.poll import poll_batch
from processor.kafka.produce import RecordTooLarge, produce, produce_all
from processor.kafka.read import read_to_end


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topics_take_the_broker_default_replication_unless_a_factor_is_given(broker):
    client = KafkaClientConfig(broker.bootstrap)
    topic = _name("rf")
    ensure_topics(client, {topic: 3})  # replication_factor -1: default.replication.factor (1 here)
    meta = client.admin().list_topics(topic, timeout=10).topics[topic]
    assert [len(p.replicas) for p in meta.partitions.values()] == [1, 1, 1]
    with pytest.raises(KafkaException, match=r"INVALID_REPLICATION_FACTOR|replication factor"):
        ensure_topics(client, {_name("rf3"): 1}, replication_factor=3)  # one broker cannot hold 3


def test_end_offsets_right_after_create_and_after_writes(broker):
    topics = {_name("a"): 4, _name("b"): 1}
    for _ in range(5):  # fresh partitions answer NOT_LEADER until their leader is known
        ensure_topics(broker.bootstrap, topics)
        for name, n in topics.items():
            assert end_offsets(broker.bootstrap, name) == dict.fromkeys(range(n), 0)
        topics = {_name("a"): 4, _name("b"): 1}
    name = _name("c")
    ensure_topics(broker.bootstrap, {name: 2})
    produce_all(KafkaClientConfig(broker.bootstrap).producer(), name, [(b"k", b"v", p % 2) for p in range(7)])
    assert end_offsets(broker.bootstrap, name) == {0: 4, 1: 3}
    assert start_offsets(broker.bootstrap, name) == {0: 0, 1: 0}
    assert partition_count(broker.bootstrap, name) == 2


def test_the_reader_stops_at_a_commit_marker_and_skips_aborted_records(broker):
    client = KafkaClientConfig(broker.bootstrap)
    topic = _name("txn")
    ensure_topics(client, {topic: 1})
    producer = client.producer(**{"transactional.id": _name("tx")})
    producer.init_transactions(30)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        producer.begin_transaction()
        produce(producer, topic, value)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    assert end_offsets(client, topic) == {0: 4}  # two records, two markers
    started = time.monotonic()
    assert [m.value() for m in read_to_end(client, topic, timeout_s=30)] == [b"committed"]
    assert time.monotonic() - started < 15  # finished at the marker, not at the time-out


def test_the_reader_assigns_the_log_start_itself_and_reads_from_it(broker, monkeypatch):
    """Assigned at OFFSET_BEGINNING, a new consumer's partition waited 500 ms for librdkafka to retry
    the log-start look-up (the leader connection was not up yet): the reader looks the start offsets
    up itself and assigns them. A partition whose start moved (DeleteRecords) is read from there."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    client = KafkaClientConfig(broker.bootstrap)
    topic = _name("start")
    ensure_topics(client, {topic: 2})
    produce_all(client.producer(), topic, [(b"k", f"v{i}".encode(), i % 2) for i in range(8)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures need it alive
    deleted = admin.delete_records([TopicPartition(topic, 0, 2)])
    assert [f.result(30).low_watermark for f in deleted.values()] == [2]
    assigned: list[tuple[int, int]] = []
    make = KafkaClientConfig.consumer

    def consumer(self, group, **conf):
        real = make(self, group, **conf)

        class Recording:
            def assign(self, partitions):
                assigned.extend((tp.partition, tp.offset) for tp in partitions)
                real.assign(partitions)

            def __getattr__(self, name):
                return getattr(real, name)

        return Recording()

    monkeypatch.setattr(KafkaClientConfig, "consumer", consumer)
    values = sorted(m.value() for m in read_to_end(client, topic, timeout_s=30))
    assert sorted(assigned) == [(0, 2), (1, 0)]  # absolute offsets, not OFFSET_BEGINNING (-2)
    assert values == sorted(f"v{i}".encode() for i in range(8) if i % 2 or i >= 4)


def test_oversized_records_raise_a_typed_error_and_dead_letters_keep_their_headers(broker):
    client = KafkaClientConfig(broker.bootstrap)
    topic, dlq = _name("big"), _name("dlq")
    ensure_topics(client, {topic: 1, dlq: 1})
    producer = client.producer()
    with pytest.raises(RecordTooLarge) as caught:
        produce(producer, topic, b"x" * 1_500_000, b"k")
    assert caught.value.size == 1_500_001 and caught.value.topic == topic
    writer = DeadLetterWriter(producer, dlq)
    writer.write(b"k", b"x" * 1_500_000, str(caught.value), topic, xid="t9")
    writer.write(b"k2", b"small", "bad row", "oracle", file="f.csv", line=12)
    writer.flush()
    got = [(m.key(), m.value(), read_dlq_headers(m.headers())) for m in read_to_end(client, dlq)]
    assert got == [
        (b"k", None, {"reason": str(caught.value), "source": topic, "xid": "t9", "size": "1500000"}),
        (b"k2", b"small", {"reason": "bad row", "source": "oracle", "file": "f.csv", "line": "12"}),
    ]


def test_an_unreachable_broker_is_a_clear_error_within_the_time_out():
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable, match=r"no answer from Kafka at 127\.0\.0\.1:9 within 3"):
        check_connection(KafkaClientConfig("127.0.0.1:9"), timeout_s=3)
    assert time.monotonic() - started < 8


def test_poll_batch_returns_what_is_fetched_without_waiting_to_fill_the_batch(broker):
    client = KafkaClientConfig(broker.bootstrap)
    name = _name("poll")
    ensure_topics(client, {name: 1})
    consumer = client.consumer(_name("g"), **{"auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    try:
        produce_all(client.producer(), name, [(b"k", b"first", 0)])
        deadline = time.monotonic() + 30
        got: list = []
        while not got and time.monotonic() < deadline:  # the group join, then the first record
            got = poll_batch(consumer, 5000, 0.5)
        assert [m.value() for m in got] == [b"first"]
        produce_all(client.producer(), name, [(b"k", b"%d" % i, 0) for i in range(10)])
        time.sleep(1.0)  # fetched by the consumer's background thread by now
        started = time.monotonic()
        batch = poll_batch(consumer, 5000, 5.0)
        waited = time.monotonic() - started
        # consume(5000, 5.0) would wait the whole 5 s for a batch of 5000.
        assert [m.value() for m in batch] == [b"%d" % i for i in range(10)]
        assert waited < 1.0, waited
        started = time.monotonic()
        assert poll_batch(consumer, 5000, 0.3) == []  # nothing there: waits wait_s, then returns empty
        assert time.monotonic() - started >= 0.25
    finally:
        consumer.close()
