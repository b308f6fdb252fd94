"""The outputs' native producer (processor/kafka/_rdkafka_producer.pyx) against Apache Kafka: what
arrives, where it lands, and every way a record or the producer can fail, as confluent-kafka's
Producer would report it."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from processor.kafka import output_producer as op
from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import PRODUCER_DEFAULTS
from processor.kafka.produce import RecordTooLarge, produce
from processor.kafka.read import read_to_end

pytestmark = pytest.mark.skipif(op.NativeProducer is None, reason=f"native producer not built: {op.UNAVAILABLE}")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _native(bootstrap: str, **overrides):
    conf = {"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS, "acks": "all", "delivery.report.only.error": True}
    return op.NativeProducer({**conf, **overrides})


def _records(bootstrap: str, topic: str) -> list:
    return list(read_to_end(bootstrap, topic, group=_name("g"), reassemble=False))


def test_records_arrive_as_produced_and_on_the_partition_confluent_kafka_picks(broker):
    native_topic, reference_topic = _name("native"), _name("reference")
    ensure_topics(broker.bootstrap, {native_topic: 5, reference_topic: 5})
    producer = _native(broker.bootstrap)
    keys = [f"xid-{i}".encode() for i in range(300)]
    for i, key in enumerate(keys):
        producer.produce(native_topic, b"value-%d" % i, key)
    producer.produce(native_topic, None, b"deleted")  # a tombstone
    producer.produce(native_topic, b"with headers", b"h", headers=[("reason", b"oversized"), ("empty", None)])
    producer.produce(native_topic, "text", "text-key", partition=3)  # str is encoded, as confluent-kafka does
    assert producer.flush(30) == 0
    assert len(producer) == 0

    reference = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER_DEFAULTS})
    for key in keys:
        reference.produce(reference_topic, b"", key)
    assert reference.flush(30) == 0

    got = {m.key(): m for m in _records(broker.bootstrap, native_topic)}
    assert len(got) == len(keys) + 3
    assert [got[k].value() for k in keys] == [b"value-%d" % i for i in range(len(keys))]
    assert got[b"deleted"].value() is None
    assert got[b"h"].headers() == [("reason", b"oversized"), ("empty", None)]
    assert (got[b"text-key"].value(), got[b"text-key"].partition()) == (b"text", 3)
    by_reference = {m.key(): m.partition() for m in _records(broker.bootstrap, reference_topic)}
    assert {k: got[k].partition() for k in keys} == by_reference  # murmur2_random, the same librdkafka
    # One key's records keep their order (idempotent producer, one partition per key).
    for i in range(5):
        producer.produce(native_topic, b"%d" % i, b"ordered")
    assert producer.flush(30) == 0
    ordered = [m.value() for m in _records(broker.bootstrap, native_topic) if m.key() == b"ordered"]
    assert ordered == [b"0", b"1", b"2", b"3", b"4"]


def test_a_record_the_broker_refuses_reaches_its_callback_with_its_key_and_value(broker):
    topic = _name("small")
    ensure_topics(broker.bootstrap, {topic: 2}, config={"max.message.bytes": "10000"})
    producer = _native(broker.bootstrap, **{"compression.type": "none"})
    reports: list = []

    def report(err, msg):
        reports.append((err, msg))

    for i in range(20):
        producer.produce(topic, b"small-%d" % i, b"k%d" % i, -1, report)
    assert producer.flush(30) == 0  # apart: the broker refuses a whole batch with the big record in it
    producer.produce(topic, b"x" * 50_000, b"too-big", -1, report)
    assert len(producer) > 0  # counted until acknowledged or reported
    assert producer.flush(30) == 0
    assert len(reports) == 1  # only-error: the twenty delivered records cost no report
    err, msg = reports[0]
    assert isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert (msg.topic(), msg.key(), msg.value()) == (topic, b"too-big", b"x" * 50_000)
    assert msg.error() is err
    assert len(_records(broker.bootstrap, topic)) == 20


def test_without_only_error_every_record_is_reported_once_with_its_offset(broker):
    topic = _name("all")
    ensure_topics(broker.bootstrap, {topic: 1})
    producer = _native(broker.bootstrap, **{"delivery.report.only.error": False})
    reports: list = []
    for i in range(50):
        producer.produce(topic, b"%d" % i, b"k", on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    producer.produce(topic, b"unreported", b"k")  # no callback: nothing to report to
    assert producer.flush(30) == 0
    assert reports == [(None, offset) for offset in range(50)]


def test_epochs_settle_in_order_as_the_broker_acknowledges_them(broker):
    """Settlement by epochs: an epoch settles once its records, and all earlier ones, are delivered,
    while later ones are still in flight (linger holds them); a record the broker refuses holds its
    epoch until its report ran, and what the report produced (a chunk, a dead letter) is counted in it."""
    topic, small = _name("epochs"), _name("epochs-small")
    ensure_topics(broker.bootstrap, {topic: 3})
    ensure_topics(broker.bootstrap, {small: 1}, config={"max.message.bytes": "10000"})
    producer = _native(broker.bootstrap, **{"compression.type": "none"})
    for i in range(100):
        producer.produce(topic, b"first-%d" % i, b"k%d" % i)
    first = producer.next_epoch()
    deadline = time.monotonic() + 30
    while producer.settled_epoch() < first and time.monotonic() < deadline:
        producer.poll(0.01)
    assert producer.settled_epoch() == first and len(producer) == 0
    held = _native(broker.bootstrap, **{"linger.ms": 3000})  # its next records wait in the client
    held.produce(topic, b"early", b"e")
    early = held.next_epoch()
    while held.settled_epoch() < early and time.monotonic() < deadline:
        held.poll(0.01)  # linger: the first record is sent once the batch is old enough
    held.produce(topic, b"late", b"l")
    late = held.next_epoch()
    held.poll(0.2)
    assert held.settled_epoch() == early and len(held) == 1  # the later epoch is in flight

    produced_in_report: list = []

    def report(err, msg):  # as the sink's oversized policies do: produce inside the failure report
        produced_in_report.append(err.code())
        producer.produce(topic, b"instead", b"big")

    producer.produce(small, b"x" * 50_000, b"big", -1, report)
    refused = producer.next_epoch()
    while not produced_in_report and time.monotonic() < deadline:
        producer.poll(0.01)
    assert produced_in_report == [KafkaError.MSG_SIZE_TOO_LARGE]
    # The report ran, but the record it produced is in flight, and counts in the refused one's epoch.
    assert producer.settled_epoch() == refused - 1 and len(producer) == 1
    while producer.settled_epoch() < refused and time.monotonic() < deadline:
        producer.poll(0.01)
    assert producer.settled_epoch() == refused and len(producer) == 0
    assert held.flush(30) == 0 and held.settled_epoch() == late
    got = {m.key(): m.value() for m in _records(broker.bootstrap, topic) if m.key() in (b"big", b"e", b"l")}
    assert got == {b"big": b"instead", b"e": b"early", b"l": b"late"}


def test_send_now_sends_what_linger_holds_and_returns_without_waiting_for_the_broker(broker):
    """send_now() is the settling flush without its wait (delivery.AtLeastOnce below a backlog sends
    each batch's ENDs with it): what is queued goes at once, not after linger.ms; the acknowledgements
    come in with a later poll, and a failure still reaches its callback there."""
    topic = _name("send-now")
    ensure_topics(broker.bootstrap, {topic: 2})
    held = _native(broker.bootstrap, **{"linger.ms": 3000})
    for i in range(3):
        held.produce(topic, b"held-%d" % i, b"h%d" % i)
    epoch = held.next_epoch()
    held.poll(0.5)
    assert held.settled_epoch() < epoch and len(held) == 3  # linger holds them in the client
    sent = _native(broker.bootstrap, **{"linger.ms": 3000, "compression.type": "none"})  # the big record stays big
    for i in range(3):
        sent.produce(topic, b"sent-%d" % i, b"s%d" % i)
    epoch = sent.next_epoch()
    began = time.monotonic()
    sent.send_now()
    assert time.monotonic() - began < 0.05  # no wait for the broker
    deadline = time.monotonic() + 30
    while sent.settled_epoch() < epoch and time.monotonic() < deadline:
        sent.poll(0.01)
    assert sent.settled_epoch() == epoch and len(sent) == 0
    assert time.monotonic() - began < 2.0  # well before the 3 s linger
    assert held.settled_epoch() < epoch and len(held) == 3  # still lingering meanwhile

    # Again after the first send_now (its thread is running now), and a refused record's report.
    small = _name("send-now-small")
    ensure_topics(broker.bootstrap, {small: 1}, config={"max.message.bytes": "10000"})
    reports: list = []
    sent.produce(small, b"x" * 50_000, b"big", -1, lambda err, msg: reports.append(err.code()))
    sent.produce(topic, b"after", b"a")
    epoch = sent.next_epoch()
    sent.send_now()
    while sent.settled_epoch() < epoch and time.monotonic() < deadline:
        sent.poll(0.01)
    assert reports == [KafkaError.MSG_SIZE_TOO_LARGE] and sent.settled_epoch() == epoch and len(sent) == 0
    assert held.flush(30) == 0
    got = sorted(m.value() for m in _records(broker.bootstrap, topic))
    assert got == sorted([b"held-%d" % i for i in range(3)] + [b"sent-%d" % i for i in range(3)] + [b"after"])


def test_a_held_record_goes_once_every_record_before_it_is_acknowledged_and_counts_in_a_later_epoch(broker):
    """hold() is how a transaction's END follows its changes (delivery.AtLeastOnce, Emitter): nothing of
    it reaches librdkafka while a record produced before it waits (here in linger), the thread serving
    the last acknowledgement hands it over (send_now's, without the caller waiting), held records keep
    their order, and the epoch it is counted in settles only once it is delivered."""
    changes, ends = _name("hold-changes"), _name("hold-ends")
    ensure_topics(broker.bootstrap, {changes: 3, ends: 1})
    producer = _native(broker.bootstrap, **{"linger.ms": 2000})
    for i in range(30):
        producer.produce(changes, b"change-%d" % i, b"k%d" % i)
    producer.hold(ends, b"END-1", b"xid-1")
    producer.hold(ends, b"END-2", b"xid-2")  # no change since the last hold: the same epoch to wait for
    producer.produce(changes, b"change-30", b"k30")
    producer.hold(ends, b"END-3", b"xid-3")
    assert producer.epoch == 3  # the changes in 1, END-1 and END-2 in 2 with change-30, END-3 in 3
    producer.poll(0.3)
    assert len(producer) == 34 and producer.settled_epoch() == 0  # all still lingering or held
    assert _records(broker.bootstrap, ends) == []
    producer.next_epoch()
    producer.send_now()  # the changes go now; the ENDs go from the sender's thread as they are acked
    deadline = time.monotonic() + 30
    while producer.settled_epoch() < 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # no poll: the sending thread serves the acknowledgements and hands over the ENDs
    assert producer.settled_epoch() == 3
    producer.poll(0)
    assert len(producer) == 0
    got = _records(broker.bootstrap, ends)
    assert [(m.key(), m.value()) for m in got] == [(b"xid-%d" % i, b"END-%d" % i) for i in (1, 2, 3)]
    assert len(_records(broker.bootstrap, changes)) == 31
    # Once every earlier record is acknowledged, a hold goes at once.
    producer.hold(ends, b"END-4", b"xid-4")
    assert producer.flush(30) == 0
    assert [m.value() for m in _records(broker.bootstrap, ends)][-1] == b"END-4"


def test_a_failure_report_stops_held_records_until_they_are_reclaimed(broker):
    """A record refused by the broker: what its report did (a chunk, a dead letter, a failure) decides
    what the END after it says, so the held END never goes; reclaim_held() takes it back (counted off its
    epoch), and later holds go again."""
    topic, small, ends = _name("hold-ok"), _name("hold-small"), _name("hold-ends")
    ensure_topics(broker.bootstrap, {topic: 1, ends: 1})
    ensure_topics(broker.bootstrap, {small: 1}, config={"max.message.bytes": "10000"})
    producer = _native(broker.bootstrap, **{"compression.type": "none"})
    reports: list = []

    def report(err, msg):  # recovers as the oversized policies do: produces instead, in the same epoch
        reports.append(err.code())
        producer.produce(topic, b"instead", b"big")

    producer.produce(small, b"x" * 50_000, b"big", -1, report)
    producer.hold(ends, b"END-after-failure", b"xid-1")
    held_epoch = producer.epoch
    assert producer.reclaim_held() == 0  # nothing failed yet
    deadline = time.monotonic() + 30
    while producer.settled_epoch() < held_epoch - 1 and time.monotonic() < deadline:
        producer.poll(0.01)
    assert reports == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert producer.flush(1) == 1  # only the held END is left, and it does not go
    assert producer.reclaim_held() == 1 and len(producer) == 0
    producer.next_epoch()
    assert producer.settled_epoch() == held_epoch  # the reclaimed END no longer holds its epoch
    producer.hold(ends, b"END-later", b"xid-2")
    assert producer.flush(30) == 0
    assert [m.value() for m in _records(broker.bootstrap, ends)] == [b"END-later"]
    assert [m.value() for m in _records(broker.bootstrap, topic)] == [b"instead"]


def test_a_full_queue_raises_buffer_error_and_produce_waits_for_room(broker):
    topic = _name("full")
    ensure_topics(broker.bootstrap, {topic: 1})
    producer = _native(broker.bootstrap, **{"queue.buffering.max.messages": 5, "linger.ms": 2000})
    for i in range(5):
        producer.produce(topic, b"%d" % i)
    with pytest.raises(BufferError):
        producer.produce(topic, b"one too many")
    assert len(producer) == 5
    produce(producer, topic, b"waited")  # processor.kafka.produce serves reports until there is room
    assert producer.flush(30) == 0
    assert len(_records(broker.bootstrap, topic)) == 6


def test_a_record_over_the_client_limit_is_refused_at_produce_time(broker):
    topic = _name("limit")
    ensure_topics(broker.bootstrap, {topic: 1})
    producer = _native(broker.bootstrap, **{"message.max.bytes": 5000})
    with pytest.raises(KafkaException) as refused:
        producer.produce(topic, b"x" * 10_000, b"k")
    assert refused.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert len(producer) == 0
    with pytest.raises(RecordTooLarge, match=topic):
        produce(producer, topic, b"x" * 10_000, b"k")


def test_a_callback_that_raises_propagates_and_the_reports_after_it_run_at_the_next_call(broker):
    topic = _name("raise")
    ensure_topics(broker.bootstrap, {topic: 1}, config={"max.message.bytes": "10000"})
    producer = _native(broker.bootstrap, **{"compression.type": "none", "linger.ms": 50})
    seen: list = []

    def report(err, msg):
        seen.append(msg.key())
        if msg.key() == b"first":
            raise RuntimeError("the callback failed")

    producer.produce(topic, b"x" * 50_000, b"first", -1, report)
    producer.produce(topic, b"x" * 50_000, b"second", -1, report)
    with pytest.raises(RuntimeError, match="the callback failed"):
        producer.flush(30)
    assert seen == [b"first"]
    assert len(producer) == 1  # the second report, not yet run
    assert producer.flush(30) == 0
    assert seen == [b"first", b"second"]


def test_an_unreachable_cluster_reaches_error_cb_and_fails_the_metadata_probe():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    errors: list = []
    producer = _native(f"127.0.0.1:{port}", error_cb=errors.append)
    with pytest.raises(KafkaException):
        producer.list_topics("any", timeout=1)
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported for a cluster that does not answer"
    assert all(isinstance(e, KafkaError) and not e.fatal() for e in errors)
    assert {e.code() for e in errors} <= {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}


def test_the_metadata_probe_names_the_topic_and_its_partitions(broker):
    topic = _name("meta")
    ensure_topics(broker.bootstrap, {topic: 3})
    assert _native(broker.bootstrap).list_topics(topic, timeout=10) == {topic: 3}


def test_what_the_native_producer_cannot_serve_goes_to_confluent_kafka(broker):
    base = {"bootstrap.servers": broker.bootstrap, **PRODUCER_DEFAULTS}
    with pytest.raises(KafkaException, match="No such configuration property"):
        op.NativeProducer({**base, "no.such.property": "1"})
    with pytest.raises(TypeError, match="stats_cb"):
        op.NativeProducer({**base, "stats_cb": print})

    native, why = op.output_producer({**base, "error_cb": print})
    assert (type(native), why) == (op.NativeProducer, "native")
    producer, why = op.output_producer({**base, "transactional.id": _name("tx")})
    assert (type(producer), why) == (op.NativeProducer, "native")
    producer, why = op.output_producer({**base, "stats_cb": print})
    assert type(producer) is Producer and "stats_cb" in why
    with pytest.raises(RuntimeError, match="stats_cb"):
        op.output_producer({**base, "stats_cb": print}, "native")
    producer, why = op.output_producer(base, "confluent")
    assert type(producer) is Producer and why == "confluent: configured"
    with pytest.raises(ValueError, match="output_producer"):
        op.output_producer(base, "fastest")


def _transactional(bootstrap: str, transactional_id: str):
    producer = _native(bootstrap, **{"transactional.id": transactional_id})
    producer.init_transactions(30)
    return producer


def test_a_committed_transaction_is_read_with_its_offsets_and_an_aborted_one_is_not(broker):
    topic, source, group = _name("txn-out"), _name("txn-in"), _name("txn-group")
    ensure_topics(broker.bootstrap, {topic: 2, source: 1})
    producer = _transactional(broker.bootstrap, _name("tx"))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, b"aborted-%d" % i, b"a")
        producer.abort_transaction(30)
        producer.poll(0)  # the abort's purged records are reported and forgotten
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, b"committed-%d" % i, b"c")
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 42)], consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        assert len(producer) == 0
        read = [m.value() for m in _records(broker.bootstrap, topic)]  # read_committed
        assert read == [b"committed-%d" % i for i in range(10)]
        committed = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert [tp.offset for tp in committed] == [42]
    finally:
        consumer.close()


def test_a_fenced_producer_fails_with_a_fatal_error_as_confluent_kafka_raises_it(broker):
    topic, transactional_id = _name("fenced"), _name("tx")
    ensure_topics(broker.bootstrap, {topic: 1})
    first = _transactional(broker.bootstrap, transactional_id)
    first.begin_transaction()
    first.produce(topic, b"from the first", b"k")
    assert first.flush(30) == 0
    _transactional(broker.bootstrap, transactional_id)  # a newer epoch for the same id fences the first
    with pytest.raises(KafkaException) as failed:
        first.commit_transaction(30)
    error = failed.value.args[0]
    assert error.fatal() and error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    with pytest.raises(KafkaException):
        first.begin_transaction()
    with pytest.raises(KafkaException, match=r"metadata"):
        _transactional(broker.bootstrap, _name("tx")).send_offsets_to_transaction(
            [TopicPartition(topic, 0, 1)], b"not group metadata", 10
        )


def test_produce_run_queues_a_slice_of_records_as_produce_would_each_and_stops_where_the_queue_is_full(broker):
    topic, reference_topic = _name("run"), _name("run-reference")
    ensure_topics(broker.bootstrap, {topic: 4, reference_topic: 4})
    records = [(f"xid-{i % 7}", b"value-%d" % i, "change") for i in range(50)]
    producer = _native(broker.bootstrap)
    assert producer.produce_run(topic, records, 10, 40) == 40
    assert producer.produce_run(topic, records, 40, 40) == 40  # an empty slice queues nothing
    assert len(producer) == 30
    with pytest.raises(IndexError, match="outside"):
        producer.produce_run(topic, records, 45, 51)
    with pytest.raises(TypeError):
        producer.produce_run(topic, [("xid", None, "change")], 0, 1)
    assert producer.flush(30) == 0
    for key, value, _ in records[10:40]:
        producer.produce(reference_topic, value, key.encode())
    assert producer.flush(30) == 0

    got, reference = _records(broker.bootstrap, topic), _records(broker.bootstrap, reference_topic)
    assert [m.value() for m in got if m.key() == b"xid-3"] == [v for k, v, _ in records[10:40] if k == "xid-3"]
    assert sorted((m.key(), m.value(), m.partition()) for m in got) == sorted(
        (m.key(), m.value(), m.partition()) for m in reference
    )

    full = _native(broker.bootstrap, **{"queue.buffering.max.messages": 5, "linger.ms": 2000})
    assert full.produce_run(topic, records, 0, 20) == 5  # the sixth found the queue full: not queued
    assert len(full) == 5
    assert full.flush(30) == 0
