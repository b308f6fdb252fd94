"""The raw topic's native fetch (processor/kafka/_rdkafka_fetch.pyx) against Apache Kafka: every
record once and in order, through rebalances, seeks, pauses and consumer errors, with the consumer
itself left to confluent-kafka."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from processor.kafka import raw_fetch as rf
from processor.kafka.admin import ensure_topics

pytestmark = pytest.mark.skipif(rf.RawFetch is None, reason=f"native raw fetch not built: {rf.UNAVAILABLE}")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int], start: int = 0) -> dict:
    """{(partition, index): (key, value)} as produced: every fifth record a tombstone, every seventh keyless."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = {}
    for p, n in per_partition.items():
        for i in range(start, start + n):
            key = None if i % 7 == 3 else b"k%d-%d" % (p, i)
            value = None if i % 5 == 4 else b"v%d-%d" % (p, i) * (1 + i % 9)
            producer.produce(topic, value, key, partition=p)
            sent[(p, i)] = (key, value)
    assert producer.flush(30) == 0
    return sent


def _member(bootstrap: str, topic: str, group: str, max_records: int = 500, **conf):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
            **conf,
        }
    )
    fetch = rf.RawFetch(consumer, topic, max_records)
    assigned: set[int] = set()

    def on_assign(c, parts):
        fetch.route([tp.partition for tp in parts])
        c.incremental_assign(parts)
        assigned.update(tp.partition for tp in parts)

    def on_revoke(c, parts):
        c.incremental_unassign(parts)
        fetch.unroute([tp.partition for tp in parts])
        assigned.difference_update(tp.partition for tp in parts)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    return consumer, fetch, assigned


def _take(fetch, got: dict, want: int, timeout_s: float = 60, max_records: int = 500, wait_s: float = 0.2) -> list:
    """Poll until `want` records are in got ({partition: [record]}); the consumer errors seen."""
    errors, deadline = [], time.monotonic() + timeout_s
    while sum(len(v) for v in got.values()) < want:
        assert time.monotonic() < deadline, f"{sum(len(v) for v in got.values())} of {want} records"
        runs, errs, taken = fetch.poll(max_records, wait_s)
        assert taken == sum(len(r) for r in runs.values())
        for p, run in runs.items():
            assert all(type(r).__name__ == "RawRecord" and r.partition() == p and r.error() is None for r in run)
            got.setdefault(p, []).extend(run)
        errors += errs
    return errors


def test_every_record_arrives_once_in_offset_order_with_its_key_and_value(broker):
    topic = _name("raw")
    ensure_topics(broker.bootstrap, {topic: 3})
    sent = _produce(broker.bootstrap, topic, {0: 2000, 1: 1500, 2: 7})
    consumer, fetch, _ = _member(broker.bootstrap, topic, _name("g"))
    got: dict[int, list] = {}
    assert _take(fetch, got, len(sent)) == []
    assert {p: [r.offset() for r in run] for p, run in got.items()} == {
        0: list(range(2000)),
        1: list(range(1500)),
        2: list(range(7)),
    }
    assert {(p, r.offset()): (r.key(), r.value()) for p, run in got.items() for r in run} == sent
    runs, errors, taken = fetch.poll(500, 0.3)  # nothing more, and the wait is bounded
    assert (runs, errors, taken) == ({}, [], 0)
    # The consumer's own view is kept: its position follows what the fetch handed over.
    positions = consumer.position([TopicPartition(topic, p) for p in range(3)])
    assert sorted((tp.partition, tp.offset) for tp in positions) == [(0, 2000), (1, 1500), (2, 7)]
    fetch.close()
    consumer.close()


def test_a_member_joining_takes_partitions_over_and_nothing_is_lost(broker):
    """Two members, cooperative-sticky: the first holds all, the second joins while the first waits
    in poll. Committed offsets hand the moved partitions over; every record is seen, each member's
    records of a partition in offset order."""
    topic, group = _name("raw"), _name("g")
    ensure_topics(broker.bootstrap, {topic: 4})
    sent = _produce(broker.bootstrap, topic, dict.fromkeys(range(4), 500))
    first, first_fetch, first_parts = _member(broker.bootstrap, topic, group)
    seen: dict[str, dict[int, list]] = {"first": {}, "second": {}}
    _take(first_fetch, seen["first"], 1000, wait_s=0.05, max_records=100)
    assert first_parts == {0, 1, 2, 3}
    first.commit(
        offsets=[TopicPartition(topic, p, run[-1].offset() + 1) for p, run in seen["first"].items()],
        asynchronous=False,
    )
    second, second_fetch, second_parts = _member(broker.bootstrap, topic, group)
    stop = threading.Event()

    def second_polls():
        while not stop.is_set():
            runs, _, _ = second_fetch.poll(100, 0.05)
            for p, run in runs.items():
                seen["second"].setdefault(p, []).extend(run)

    thread = threading.Thread(target=second_polls, daemon=True)
    thread.start()
    started = time.monotonic()
    while not second_parts and time.monotonic() - started < 30:
        runs, _, _ = first_fetch.poll(100, 1.0)
        for p, run in runs.items():
            seen["first"].setdefault(p, []).extend(run)
            first.commit(offsets=[TopicPartition(topic, p, run[-1].offset() + 1)], asynchronous=False)
    assert second_parts and first_parts and not first_parts & second_parts
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs, _, _ = first_fetch.poll(100, 0.05)
        for p, run in runs.items():
            seen["first"].setdefault(p, []).extend(run)
        union = {(p, r.offset()) for who in seen.values() for p, run in who.items() for r in run}
        if len(union) == len(sent):
            break
    stop.set()
    thread.join(10)
    union = {(p, r.offset()) for who in seen.values() for p, run in who.items() for r in run}
    assert union == set(sent)
    for who in seen.values():
        for run in who.values():
            offsets = [r.offset() for r in run]
            assert offsets == sorted(offsets)
    for fetch, consumer in ((first_fetch, first), (second_fetch, second)):
        fetch.close()
        consumer.close()


def test_seek_rewinds_and_a_paused_partition_hands_over_nothing(broker):
    topic = _name("raw")
    ensure_topics(broker.bootstrap, {topic: 2})
    _produce(broker.bootstrap, topic, {0: 300, 1: 300})
    consumer, fetch, _ = _member(broker.bootstrap, topic, _name("g"))
    got: dict[int, list] = {}
    _take(fetch, got, 600)
    consumer.seek(TopicPartition(topic, 0, 100))
    consumer.pause([TopicPartition(topic, 1)])
    _produce(broker.bootstrap, topic, {1: 50}, start=300)
    again: dict[int, list] = {}
    _take(fetch, again, 200)
    time.sleep(1)
    runs, _, _ = fetch.poll(500, 0.5)
    for p, run in runs.items():
        again.setdefault(p, []).extend(run)
    assert list(again) == [0]
    assert [r.offset() for r in again[0]] == list(range(100, 300))
    consumer.resume([TopicPartition(topic, 1)])
    _take(fetch, again, 250)
    assert [r.offset() for r in again[1]] == list(range(300, 350))
    fetch.close()
    consumer.close()


def test_a_consumer_error_of_a_partition_comes_back_as_a_kafka_error(broker):
    topic = _name("raw")
    ensure_topics(broker.bootstrap, {topic: 1})
    _produce(broker.bootstrap, topic, {0: 10})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("g"), "auto.offset.reset": "error"})
    fetch = rf.RawFetch(consumer, topic, 100)
    fetch.route([0])
    consumer.assign([TopicPartition(topic, 0, 1000)])  # past the end, and no reset allowed
    deadline, errors = time.monotonic() + 30, []
    while not errors and time.monotonic() < deadline:
        runs, errors, taken = fetch.poll(100, 0.2)
        assert (runs, taken) == ({}, 0)
    assert errors and isinstance(errors[0], KafkaError)
    assert errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors[0]
    fetch.close()
    consumer.close()


def test_close_with_records_still_queued_lets_the_consumer_close(broker):
    topic = _name("raw")
    ensure_topics(broker.bootstrap, {topic: 2})
    _produce(broker.bootstrap, topic, {0: 3000, 1: 3000})
    consumer, fetch, _ = _member(broker.bootstrap, topic, _name("g"), max_records=10)
    got: dict[int, list] = {}
    _take(fetch, got, 10, max_records=10)
    time.sleep(1)  # let the fetcher queue more than was taken
    fetch.close()
    with pytest.raises(RuntimeError, match="closed"):
        fetch.poll(10, 0)
    fetch.unroute([0, 1])  # what a revoke during consumer.close() does: nothing, once closed
    closed = threading.Event()
    threading.Thread(target=lambda: (consumer.close(), closed.set()), daemon=True).start()
    assert closed.wait(30), "consumer.close() hung after RawFetch.close()"
    fetch.close()  # twice is harmless


def test_a_fetch_outliving_its_consumer_refuses_to_poll(broker):
    topic = _name("raw")
    ensure_topics(broker.bootstrap, {topic: 1})
    consumer, fetch, _ = _member(broker.bootstrap, topic, _name("g"))
    fetch.close()
    consumer.close()
    other = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("g")})
    fetch = rf.RawFetch(other, topic, 10)
    other.close()  # the wrong order: the fetch must not touch the freed client
    with pytest.raises(RuntimeError, match="consumer was closed"):
        fetch.poll(10, 0)
    fetch.close()


def test_the_choice_of_fetch(broker):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("g")})
    fetch, why = rf.raw_fetch(consumer, "t", 10, "confluent")
    assert (type(fetch), why) == (rf.ConsumerFetch, "confluent: configured")
    fetch, why = rf.raw_fetch(consumer, "t", 10, "native")
    assert (type(fetch).__name__, why) == ("RawFetch", "native")
    fetch.close()
    with pytest.raises(ValueError, match="raw_fetch"):
        rf.raw_fetch(consumer, "t", 10, "fastest")
    with pytest.raises(TypeError, match=r"confluent_kafka\.Consumer"):
        rf.RawFetch(Producer({"bootstrap.servers": broker.bootstrap}), "t", 10)
    with pytest.raises(ValueError, match="max_records"):
        rf.RawFetch(consumer, "t", 0)
    consumer.close()


def test_an_event_for_the_consumer_ends_a_wait_for_records(broker):
    """A commit result (or a rebalance) reaching the consumer's queue while poll waits on the records'
    queue ends that wait, so its callback runs now rather than after wait_s."""
    topic, committed = _name("raw"), threading.Event()
    ensure_topics(broker.bootstrap, {topic: 1})
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": _name("g"), "on_commit": lambda err, parts: committed.set()}
    )
    fetch = rf.RawFetch(consumer, topic, 10)
    fetch.route([0])
    consumer.assign([TopicPartition(topic, 0, 0)])
    fetch.poll(10, 0.5)
    timer = threading.Timer(
        1.0, consumer.commit, kwargs={"offsets": [TopicPartition(topic, 0, 0)], "asynchronous": True}
    )
    timer.start()
    started = time.monotonic()
    fetch.poll(10, 20.0)
    waited = time.monotonic() - started
    assert 0.9 < waited < 10, f"poll waited {waited:.1f}s"
    deadline = time.monotonic() + 10
    while not committed.is_set() and time.monotonic() < deadline:
        fetch.poll(10, 0.1)  # the commit result's callback runs in here
    assert committed.is_set()
    fetch.close()
    consumer.close()
