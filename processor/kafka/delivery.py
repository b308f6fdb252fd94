"""Delivery guarantees: when outputs count as written and when input offsets are committed.

at_least_once_dedup: outputs stream continuously; the low watermark is committed periodically. A
crash re-emits at most what followed the last commit, with the same event_ids.

exactly_once: each poll batch is one Kafka transaction holding its outputs (changes, BEGIN/END,
dead letters) and the input offsets they imply (send_offsets_to_transaction). Every transaction
released in the batch is finished inside it, so an END never commits without its changes. Kafka
is then the only source of truth: on start the runner rebuilds every partition from the committed
offsets rather than trusting a local store that may be ahead of an aborted transaction.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from confluent_kafka import KafkaException, TopicPartition

log = structlog.get_logger(__name__)


class AtLeastOnce:
    name = "at_least_once_dedup"
    trusts_local_store = True
    commits_offsets_itself = True

    def __init__(self, producer, emitter) -> None:
        self.producer, self.emitter = producer, emitter

    def start(self) -> None:
        pass

    def begin_batch(self) -> None:
        pass

    def standalone(self, produce: Callable[[], None]) -> None:
        """Outputs outside the poll loop (lost-state reports): produced and made durable now."""
        produce()
        self.producer.flush(30)

    def end_batch(self, offsets: Callable[[], list[TopicPartition]], consumer) -> None:
        self.producer.poll(0)
        self.emitter.advance()


class ExactlyOnce:
    name = "exactly_once"
    trusts_local_store = False
    commits_offsets_itself = False

    def __init__(self, producer, emitter, flush_timeout_s: float = 60.0) -> None:
        self.producer, self.emitter = producer, emitter
        self.flush_timeout_s = flush_timeout_s
        self.in_transaction = False
        self.committed_batches = 0

    def start(self) -> None:
        self.producer.init_transactions(self.flush_timeout_s)

    def standalone(self, produce: Callable[[], None]) -> None:
        self.producer.begin_transaction()
        produce()
        self.producer.commit_transaction(self.flush_timeout_s)

    def begin_batch(self) -> None:
        if not self.in_transaction:
            self.producer.begin_transaction()
            self.in_transaction = True

    def end_batch(self, offsets: Callable[[], list[TopicPartition]], consumer) -> None:
        """Finish every released transaction, then commit outputs and input offsets atomically."""
        if not self.in_transaction:
            return
        try:
            # flush -> changes acknowledged -> advance sends ENDs -> flush -> advance finishes them.
            for _ in range(3):
                remaining = self.producer.flush(self.flush_timeout_s)
                if remaining:
                    raise TimeoutError(f"{remaining} outputs not acknowledged in {self.flush_timeout_s}s")
                self.emitter.advance()
                if not self.emitter.queue:
                    break
            else:
                raise RuntimeError(f"{len(self.emitter.queue)} released transactions did not finish in the batch")
            self.producer.send_offsets_to_transaction(
                offsets(), consumer.consumer_group_metadata(), self.flush_timeout_s
            )
            self.producer.commit_transaction(self.flush_timeout_s)
            self.committed_batches += 1
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                log.error("exactly_once.abort", error=str(error))
                self.producer.abort_transaction(self.flush_timeout_s)
            raise  # the runner stops; a restart rebuilds from the committed offsets
        finally:
            self.in_transaction = False


def for_guarantee(guarantee: str, producer, emitter):
    return ExactlyOnce(producer, emitter) if guarantee == "exactly_once" else AtLeastOnce(producer, emitter)
