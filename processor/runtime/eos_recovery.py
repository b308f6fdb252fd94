"""exactly_once: recovering in process when a rebalance aborts a batch's Kafka transaction.

A consumer group that moves on while a batch's transaction is open (a member joins, leaves, dies
or restarts) refuses the batch's offsets: send_offsets_to_transaction fails with
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS, and the delivery aborts the
transaction (TransactionAborted). None of the batch's outputs or offsets are visible, but the
engines have moved on: events applied, transactions released, acknowledged and deleted from the
store. Exiting would make every survivor of one kill die as well, each death another rebalance.

Instead, as Kafka Streams closes its tasks dirty on TaskMigratedException, every held partition is
dropped (engine, emissions, global-order entries; under exactly_once the store is not trusted, so
the restore wipes it) and taken on again through the normal restore path: committed offsets,
completed-index rebuild from Kafka, the consumer rewound there. The group membership stays; the
rebalance then revokes or assigns as usual. A fenced or fatal producer still stops the process.

A group that keeps moving (a member crash-looping) would make this spin: abort, rebuild, abort. So
recoveries with no committed batch between them back off exponentially before the restore (0.5 s,
1 s, 2 s, ... up to 10 s: below max.poll.interval.ms, and the heartbeat thread keeps the membership),
logged as exactly_once.recovery_backoff and counted in txbuffer_eos_recovery_backoff_seconds_total
(txbuffer_eos_recoveries_in_a_row says how deep); the first one after a committed batch waits nothing. A
stop request ends the wait, and the restore is then skipped (nothing is held, nothing committed).
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, TopicPartition

from processor.runtime import stop
from processor.runtime.partitions import Partitions, Phase

log = structlog.get_logger(__name__)

BACKOFF_FIRST_S = 0.5  # the wait before the second recovery in a row
BACKOFF_MAX_S = 10.0


def backoff_s(in_a_row: int) -> float:
    """The wait before the in_a_row-th recovery with no committed batch since the previous one."""
    if in_a_row <= 1:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * float(2 ** (in_a_row - 2)))


class EosRecovery:
    def __init__(self, partitions: Partitions, consumer: Consumer, producer: Any, metrics: Any = None):
        self.partitions, self.consumer, self.producer, self.metrics = partitions, consumer, producer, metrics
        self.recoveries = 0
        self.in_a_row = 0  # recoveries with no committed batch between them
        self.backoff_total_s = 0.0
        self._batches_seen = -1

    def recover(self, error: KafkaError) -> None:
        """The batch's transaction is aborted: close every held partition dirty and restore it."""
        started = time.monotonic()
        parts = self.partitions
        dropped = sorted(parts.held)
        self._forget_aborted_outputs()
        for p in dropped:
            self._close_dirty(p)
        if self._back_off(error):
            parts.on_change()
            return  # stopping: nothing is held, the loop ends
        topic = parts.cfg.raw_topic
        with stop.interruptible("exactly_once recovery restore"):
            starts = parts.take_on(self.consumer, [TopicPartition(topic, p) for p in dropped]) if dropped else {}
        for p, start in starts.items():
            # Prefetched records of the old position are discarded (librdkafka's seek barrier).
            self.consumer.seek(TopicPartition(topic, p, start))
        parts.pause_finished(self.consumer, starts)
        parts.on_change()
        self.recoveries += 1
        if self.metrics is not None:
            self.metrics.eos_abort(error.name())
        log.warning(
            "exactly_once.rebalance_recovered",
            error=error.name(),
            detail=error.str(),
            partitions=dropped,
            rewound_to=starts,
            seconds=round(time.monotonic() - started, 2),
            recoveries=self.recoveries,
        )

    def _back_off(self, error: KafkaError) -> bool:
        """Wait before a restore that follows another recovery with no committed batch between;
        True when a stop was requested (then the restore is skipped)."""
        batches = getattr(self.partitions.delivery, "committed_batches", 0)
        self.in_a_row = 1 if batches != self._batches_seen else self.in_a_row + 1
        self._batches_seen = batches
        delay = backoff_s(self.in_a_row)
        if self.metrics is not None:
            self.metrics.eos_backoff(self.in_a_row, delay)
        current = stop.current()
        if delay:
            log.warning(
                "exactly_once.recovery_backoff", error=error.name(), seconds=delay, recoveries_in_a_row=self.in_a_row
            )
            self.backoff_total_s += delay
            if current is not None:
                return current.wait(delay)
            time.sleep(delay)
        return current is not None and current.requested

    def _forget_aborted_outputs(self) -> None:
        """Delivery reports and pending work of the aborted batch no longer mean anything."""
        self.producer.poll(0)  # serves the reports of records the abort purged
        dispatcher = self.partitions.dispatcher
        dispatcher.committed.clear()
        dispatcher.take_dead_letters()
        del dispatcher.emitter.errors[:]  # in place: every ack tracker appends to this list
        dispatcher.sink.transaction_aborted()  # its dead letters went with the abort

    def _close_dirty(self, partition: int) -> None:
        parts = self.partitions
        state = parts.held.pop(partition)
        if partition in parts.to_resume:
            parts.to_resume.remove(partition)
        parts.dispatcher.drop_partition(state.engine)
        state.move(Phase.REVOKING)
        state.move(Phase.CLOSED)
