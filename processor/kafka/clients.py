"""Small Kafka helpers shared by the runner, the sources and the tools: topics, clients, partitioning."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Tansu takes ~23 s to join a group with the default session timeout; 6 s brings it to ~3 s.
CONSUMER_DEFAULTS = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
}

# murmur2 so that Java producers (the Kafka default partitioner) and ours agree on XID -> partition.
PRODUCER_DEFAULTS = {
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "compression.type": "lz4",
    # Bounded producer memory: a huge transaction's emission waits on delivery reports instead of
    # queueing millions of records (and their callbacks) in librdkafka.
    "queue.buffering.max.messages": 50000,
    "queue.buffering.max.kbytes": 32768,
}


def ensure_topics(bootstrap: str, topics: dict[str, int], timeout_s: float = 30.0) -> None:
    """Create each topic with its partition count unless it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=timeout_s).topics
    wanted = [
        NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items() if name not in existing
    ]
    if wanted:
        for _name, future in admin.create_topics(wanted, operation_timeout=timeout_s).items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != exc.args[0].TOPIC_ALREADY_EXISTS:
                    raise
    # Topics that existed are used as they are; the ones created here must show their partitions.
    created = {t.topic: t.num_partitions for t in wanted}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=timeout_s).topics
        if all(name in md and (name not in created or len(md[name].partitions) == created[name]) for name in topics):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics not visible after {timeout_s}s: {sorted(topics)}")


def partition_count(bootstrap: str, topic: str, timeout_s: float = 10.0) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=timeout_s)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise LookupError(f"topic {topic!r} does not exist on {bootstrap}")
    return len(meta.partitions)


def make_producer(bootstrap: str, **overrides: object) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_DEFAULTS}
    conf.update(overrides)
    return Producer(conf)


def produce_all(producer: Producer, topic: str, records: Iterable[tuple[bytes | None, bytes, int | None]]) -> int:
    """Produce (key, value, partition) tuples, backing off when the local queue is full; flushes."""
    n = 0
    for key, value, partition in records:
        while True:
            try:
                if partition is None:
                    producer.produce(topic, value=value, key=key)
                else:
                    producer.produce(topic, value=value, key=key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise TimeoutError(f"{remaining} records not delivered to {topic}")
    return n


def end_offsets(bootstrap: str, topic: str, group: str = "txbuffer-probe", timeout_s: float = 10.0) -> dict[int, int]:
    """True end offset per partition.

    Tansu's ListOffsets under-reports the end: it returns the base offset of the last record batch,
    so a partition holding one batch looks empty (low == listed == 0). Each partition is therefore
    fetched from there, and the end is the high watermark of the fetch response.
    """
    from confluent_kafka import Consumer

    n = partition_count(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER_DEFAULTS})
    try:
        ends: dict[int, int] = {}
        start = []
        for p in range(n):
            low, listed = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            ends[p] = listed
            start.append(TopicPartition(topic, p, max(low, listed - 1) if listed > low else low))
        consumer.assign(start)  # every partition at once: one round of fetches, not one per partition
        waiting = set(ends)
        deadline = time.monotonic() + timeout_s
        while waiting:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)
            for p in list(waiting):
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)
                if high is not None and high >= 0:  # a fetch response arrived: its high watermark is exact
                    ends[p] = max(ends[p], high)
                    waiting.discard(p)
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: no fetch response for partitions {sorted(waiting)} within {timeout_s}s")
        return ends
    finally:
        consumer.close()
