"""Committing the input position: each owned partition's low watermark, to the consumer group.

The watermark moves past a finished transaction only once everything that records how it
finished is durable: outcome records and dead letters (END records are covered by the emitter,
which finishes a transaction only after its END is acknowledged).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from confluent_kafka import Consumer, TopicPartition

from processor.kafka.sink import KafkaSink
from processor.runtime import broker_contact

log = structlog.get_logger(__name__)

# Re-send unchanged watermarks this often: a commit lost without an error reaching us (a rebalance
# racing the commit) must not stick for the rest of the run.
RESEND_EVERY_S = 10.0


class OffsetCommitter:
    def __init__(self, topic: str, sink: KafkaSink, poll_producer: Callable[[float], object]):
        self.topic = topic
        self.sink = sink
        self.poll_producer = poll_producer
        self.consumer: Consumer | None = None
        self.sent: dict[int, int] = {}
        self.last_resend = time.monotonic()

    def outputs_durable(self, timeout_s: float = 5.0) -> bool:
        """Outcome records and dead letters acknowledged: the watermark may move past their events."""
        deadline = time.monotonic() + timeout_s
        while (self.sink.outcomes_unacked or self.sink.dlq_unacked) and time.monotonic() < deadline:
            self.poll_producer(0.05)
        return not (self.sink.outcomes_unacked or self.sink.dlq_unacked)

    def commit(self, watermarks: dict[int, int], force: bool = False, asynchronous: bool = True) -> None:
        """Commit the watermarks that changed (all of them when forced or when it is time to resend)."""
        now = time.monotonic()
        if now - self.last_resend > RESEND_EVERY_S:
            force = True
        if force:
            self.last_resend = now
        if not self.outputs_durable():
            log.warning(
                "offsets.commit_deferred",
                unacked_outcomes=self.sink.outcomes_unacked,
                unacked_dead_letters=self.sink.dlq_unacked,
            )
            return
        offsets = []
        for p, lw in watermarks.items():
            if force or self.sent.get(p) != lw:
                offsets.append(TopicPartition(self.topic, p, lw))
                self.sent[p] = lw
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=asynchronous)

    def on_commit(self, err, partitions: list[TopicPartition]) -> None:
        """A failed commit (e.g. a stale generation during a rebalance) is retried at the next
        interval even if the watermark has not moved since."""
        if err is None:
            broker_contact.seen()  # the broker answered, whatever it said per partition
        failed = [tp for tp in partitions if err is not None or tp.error is not None]
        for tp in failed:
            if self.sent.get(tp.partition) == tp.offset:
                del self.sent[tp.partition]
        if failed:
            log.warning(
                "offsets.commit_failed",
                error=str(err or failed[0].error),
                partitions={tp.partition: tp.offset for tp in failed},
            )
