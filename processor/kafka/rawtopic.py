"""Writing RawEvents onto the raw topic: key = XID, murmur2 partitioning, heartbeats to every partition.

Every source (generator, PostgreSQL capture, Oracle and IBM i replay) writes through RawTopicWriter,
so partitioning, heartbeat and size rules live in one place. An event too large for the raw topic
follows the `oversized` policy: `dlq` and `chunk` write it to the DLQ (reason, source, xid, size)
when a DLQ topic is given, `fail` (or no DLQ topic) raises RecordTooLarge: it never loops on a
record the broker will always refuse. Raw events are not chunked: the engine's fragment mechanism
(LOB_WRITE pieces merged into their change) needs free seq numbers after the change, which a
writer cannot know are free, so `chunk` dead-letters inputs and chunks only outputs.

A dead-lettered change or fragment leaves its transaction incomplete, so the writer puts the
incomplete marker (processor.core.incomplete: a SAVEPOINT named txb.incomplete) on the raw topic in
its place, and the processor dead-letters that transaction whole at its COMMIT instead of emitting
it without the event. A control event (BEGIN, COMMIT, ROLLBACK, ...) is written again without its
attrs instead (they never reach an output), so the transaction still ends, whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog
from confluent_kafka import KafkaError, KafkaException, Message

from processor.core import events, incomplete
from processor.kafka.admin import BROKER_DEFAULT_REPLICATION, ensure_topics, partition_count, producer_size_limit
from processor.kafka.client_config import KafkaClientConfig, as_client_config
from processor.kafka.dlq import DeadLetterWriter
from processor.kafka.output_producer import output_producer
from processor.kafka.produce import RecordTooLarge, flush, produce

log = structlog.get_logger(__name__)

OVERSIZED_POLICIES = ("dlq", "fail", "chunk")


class RawTopicWriter:
    """Produces RawEvents keyed by XID. The producer's murmur2 partitioner matches Java's default."""

    def __init__(
        self,
        client: KafkaClientConfig | str,
        topic: str = "txbuffer.raw",
        partitions: int = 4,
        create: bool = True,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        replication_factor: int = BROKER_DEFAULT_REPLICATION,
        dlq_topic: str | None = None,
        source: str = "source",
        oversized: str = "dlq",
        producer: str = "auto",
        **producer_conf: object,
    ):
        if oversized not in OVERSIZED_POLICIES:
            raise ValueError(f"oversized must be one of {OVERSIZED_POLICIES}, not {oversized!r}")
        self.client = as_client_config(client)
        self.policy = oversized
        if create:
            ensure_topics(self.client, {topic: partitions}, replication_factor)
        self.topic = topic
        self.source = source
        self.partitions = partition_count(self.client, topic)
        conf = self.client.producer_conf(**{**producer_size_limit(self.client, [topic]), **producer_conf})
        if on_delivery is None:
            # Only failures need a report here: with delivery.report.only.error the native producer
            # (kafka/output_producer.py) spends no Python on a success. A source writing 175k events/s
            # took 0.70 cores with confluent-kafka's produce and a callback per record, 0.35 this way.
            conf.setdefault("delivery.report.only.error", True)
        # `producer` chooses as config `output_producer` does: auto, native or confluent.
        self.producer, _ = output_producer(conf, producer)
        self._send = self.producer.produce
        self.dlq: DeadLetterWriter | None = None  # bad input of the sources (replay)
        self._oversized_dlq: DeadLetterWriter | None = None  # made at the first oversized event
        self._producer_conf = producer_conf
        if dlq_topic:
            ensure_topics(self.client, {dlq_topic: 1}, replication_factor)
            self.dlq = DeadLetterWriter(self.producer, dlq_topic)
        self.written = 0
        self.oversized = 0  # events dead-lettered for their size; each marked its transaction incomplete
        self.failed: list[str] = []
        self._on_delivery = on_delivery
        # One callback object for every record: the native producer keeps one table entry per distinct
        # callback still queued, and `self._delivered` would be a new bound method at each call.
        self._report = self._delivered

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(err.str())
        if self._on_delivery is not None:
            self._on_delivery(err, msg)

    def _produce(self, key: bytes, value: bytes, partition: int | None = None, event: dict | None = None) -> None:
        try:
            # The common case in one call; a full queue or a refusal goes through produce(), which
            # waits for room or names the record too large.
            self._send(self.topic, value, key, -1 if partition is None else partition, self._report)
        except (BufferError, KafkaException):
            if not self._produce_slowly(key, value, partition, event):
                return
        self.written += 1
        if self.written % 10000 == 0:
            self.producer.poll(0)

    def _produce_slowly(self, key: bytes, value: bytes, partition: int | None, event: dict | None) -> bool:
        """produce() with its waits; False when the event was too large and dead-lettered instead."""
        try:
            produce(self.producer, self.topic, value, key, partition=partition, on_delivery=self._report)
        except RecordTooLarge as exc:
            if self.dlq is None or self.policy == "fail":
                raise
            self._oversized_event(key, value, exc, event)
            return False
        return True

    def _oversized_event(self, key: bytes, value: bytes, exc: RecordTooLarge, event: dict | None) -> None:
        """Dead-letter the event and mark its transaction incomplete on the raw topic, in its place."""
        self.oversized += 1
        xid = key.decode(errors="replace")
        reason = str(exc) + ("; raw events are not chunked" if self.policy == "chunk" else "")
        self._dead_letters().write(key, value, reason, self.source, xid=xid, size=exc.size)
        if not xid:
            return  # a HEARTBEAT: no transaction to mark
        if event is None:
            event = events.decode_raw(value)  # only on this rare path: write_encoded passes bytes
        stand_in = incomplete.stripped(event, exc.size)
        marked = stand_in is None
        if stand_in is None:
            stand_in = incomplete.marker(event, reason, exc.size)
        produce(self.producer, self.topic, events.encode_raw(stand_in), key, on_delivery=self._report)
        self.written += 1
        log.warning(
            "raw.oversized", topic=self.topic, xid=xid, seq=event["seq"], op=event["op"], size=exc.size, marked=marked
        )

    def _dead_letters(self) -> DeadLetterWriter:
        """The oversized events' DLQ writer: its own producer, capped at the DLQ topic's limit rather
        than the raw topic's, so an event the raw topic refuses keeps its value when it fits there."""
        assert self.dlq is not None
        if self._oversized_dlq is None:
            conf = {**producer_size_limit(self.client, [self.dlq.topic]), **self._producer_conf}
            self._oversized_dlq = DeadLetterWriter(self.client.producer(**conf), self.dlq.topic)
        return self._oversized_dlq

    def write(self, event: dict) -> None:
        """Write one RawEvent (a dict as from events.raw_event) to its XID's partition."""
        self._produce(event["xid"].encode(), events.encode_raw(event), event=event)

    def write_encoded(self, xid: str, value: bytes) -> None:
        self._produce(xid.encode(), value)

    def write_encoded_run(self, records: list, start: int, stop: int) -> None:
        """write_encoded(record[0], record[1]) for records[start:stop], in order: with the native
        producer in one call per run of records the queue takes (a paced source's lap)."""
        produce_run = getattr(self.producer, "produce_run", None)
        if produce_run is None:  # confluent-kafka's Producer
            for xid, value, *_ in records[start:stop]:
                self._produce(xid.encode(), value)
            return
        i = start
        while i < stop:
            queued = produce_run(self.topic, records, i, stop, self._report)
            self.written += queued - i
            if queued < stop:  # a full queue or a refusal: produce() waits for room or names it
                xid, value = records[queued][0], records[queued][1]
                self._produce(xid.encode(), value)
                queued += 1
            i = queued

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
        flush(self.producer, timeout_s, self.topic)
        for dlq in (self.dlq, self._oversized_dlq):
            if dlq is not None:
                dlq.flush(timeout_s)
        if self.failed:
            raise RuntimeError(f"{len(self.failed)} raw events failed: {self.failed[:3]}")
