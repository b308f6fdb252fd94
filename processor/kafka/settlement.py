"""When outputs count as acknowledged: the producer has settled past them.

The outputs' producer runs with delivery.report.only.error, so a success is never reported record by
record. A record counts as acknowledged once the producer settled past it:
  * NativeProducer counts its records in epochs (processor/kafka/_rdkafka_producer.pyx): a point
    is an epoch, and it settles once every record up to it is reported, while later records are
    still in flight;
  * confluent-kafka's Producer only says that its queue is empty (len() == 0), which settles every
    point before, and under a steady load may not be seen for a long time.
"""

from __future__ import annotations

from typing import Any


def counts_epochs(producer: Any) -> bool:
    """The producer settles by epochs (NativeProducer), not only when its queue is empty."""
    return hasattr(producer, "settled_epoch")


class Settlement:
    """Points in a producer's stream of records, and whether it settled past them."""

    def __init__(self, producer: Any):
        self.producer = producer
        self.by_epoch = counts_epochs(producer)

    def mark(self) -> int:
        """A point after every record produced so far."""
        return int(self.producer.epoch) if self.by_epoch else 0

    def covers(self, mark: int) -> bool:
        """Every record produced before `mark` was taken is acknowledged, or failed and its report ran.
        Does not wait; reports come in with the producer's poll or flush."""
        producer = self.producer
        if not self.by_epoch:
            return len(producer) == 0
        if producer.epoch == mark:
            producer.next_epoch()  # closed, so that it can settle
        return bool(producer.settled_epoch() >= mark)


class Unacknowledged:
    """How many records a writer produced (dead letters, outcomes) that the producer has not yet
    settled past: 0 once it has (each is then acknowledged, or failed and its report ran)."""

    def __init__(self, producer: Any):
        self._settlement = Settlement(producer)
        self._count = 0
        self._last = 0  # the settlement point after the last one produced

    def produced(self) -> None:
        """One more was produced (queued) just now."""
        self._count += 1
        self._last = self._settlement.mark()

    @property
    def count(self) -> int:
        if self._count and self._settlement.covers(self._last):
            self._count = 0
        return self._count
