"""Writing RawEvents onto the raw topic: key = XID, murmur2 partitioning, heartbeats to every partition.

Every source (generator, PostgreSQL capture, Oracle and IBM i replay) writes through RawTopicWriter,
so partitioning and heartbeat rules live in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, Message

from processor.core import events
from processor.kafka.clients import ensure_topics, make_producer, partition_count


class RawTopicWriter:
    """Produces RawEvents keyed by XID. The producer's murmur2 partitioner matches Java's default."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = "txbuffer.raw",
        partitions: int = 4,
        create: bool = True,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        **producer_conf: object,
    ):
        if create:
            ensure_topics(bootstrap, {topic: partitions})
        self.topic = topic
        self.partitions = partition_count(bootstrap, topic)
        self.producer = make_producer(bootstrap, **producer_conf)
        self.written = 0
        self.failed: list[str] = []
        self._on_delivery = on_delivery

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(str(err))
        if self._on_delivery is not None:
            self._on_delivery(err, msg)

    def _produce(self, key: bytes, value: bytes, partition: int | None = None) -> None:
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, on_delivery=self._delivered, **kwargs)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.written += 1
        if self.written % 10000 == 0:
            self.producer.poll(0)

    def write(self, event: dict) -> None:
        """Write one RawEvent (a dict as from events.raw_event) to its XID's partition."""
        self._produce(event["xid"].encode(), events.encode_raw(event))

    def write_encoded(self, xid: str, value: bytes) -> None:
        self._produce(xid.encode(), value)

    def write_all(
        self, source: Iterable[dict], progress: Callable[[int], None] | None = None, every: int = 5000
    ) -> int:
        """Write a stream of RawEvents in order; HEARTBEATs go to every partition. Returns the count."""
        n = 0
        for event in source:
            if event["op"] == events.HEARTBEAT:
                self.heartbeat(event["scn"], ts_ms=event["ts_ms"], thread=event["thread"])
            else:
                self.write(event)
            n += 1
            if progress is not None and n % every == 0:
                progress(every)
        if progress is not None:
            progress(n % every)
        return n

    def heartbeat(self, scn: int, ts_ms: int = 0, thread: int = 1) -> None:
        """HEARTBEAT(scn) to every partition: no COMMIT below scn will follow on any of them."""
        value = events.encode_raw(events.raw_event("", events.HEARTBEAT, 0, scn, ts_ms=ts_ms, thread=thread))
        for p in range(self.partitions):
            self._produce(b"", value, partition=p)

    def flush(self, timeout_s: float = 60.0) -> None:
        remaining = self.producer.flush(timeout_s)
        if remaining:
            raise TimeoutError(f"{remaining} raw events not delivered to {self.topic}")
        if self.failed:
            raise RuntimeError(f"{len(self.failed)} raw events failed: {self.failed[:3]}")
