"""--available-now: process what exists in the raw topic at start, then stop (like Spark's trigger).

Done when every partition this instance holds reached its end offset of the start, nothing is in
flight, and every other partition is either committed at its target by another member or the group
has been stable long enough that no dead member still holds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaException, TopicPartition

from processor.kafka.client_config import CONSUMER_DEFAULTS
from processor.kafka.end_offsets import end_offsets
from processor.runtime.dispatch import Dispatcher
from processor.runtime.partitions import Partitions

log = structlog.get_logger(__name__)

ELSEWHERE_CHECK_S = 0.2  # how often the other members' committed offsets are asked for at the end


class AvailableNow:
    def __init__(self, client: Any, topic: str, consumer: Consumer, partitions: Partitions, dispatcher: Dispatcher):
        self.topic, self.consumer, self.partitions, self.dispatcher = topic, consumer, partitions, dispatcher
        self.targets: dict[int, int] = end_offsets(client, topic)
        log.info("run.available_now", targets=self.targets)
        # A dead member keeps its partitions until its session times out and the group rebalances:
        # without proof those partitions are done, wait well past it.
        self.settle_s = 3 * CONSUMER_DEFAULTS["session.timeout.ms"] / 1000 + 2
        self._last_elsewhere_check = 0.0
        # Called once this instance's own partitions are done, before it waits for the others: the
        # runner commits their offsets then, so the others see them done without waiting out the
        # commit interval (each member waited for the other's periodic commit: ~1-2 s per run).
        self.on_own_done: Callable[[], None] = lambda: None
        self._own_done: frozenset[int] = frozenset()

    def reached(self) -> bool:
        held = self.partitions.held
        if self.partitions.to_resume:
            return False
        if not held:
            # Holding nothing (more members than partitions, or ours moved away at the end) is done
            # once others committed every partition at its target: never wait for an assignment then.
            return bool(self.targets) and self._finished_elsewhere(self.targets)
        behind = [p for p, state in held.items() if state.engine.next_offset < self.targets.get(p, 0)]
        if behind and not self._read_past_targets(behind):
            return False
        self.dispatcher.release_all_held()
        if self.dispatcher.emitter.queue:
            return False
        if self._own_done != held.keys():
            self._own_done = frozenset(held)
            self.on_own_done()
        others = {p: end for p, end in self.targets.items() if p not in held}
        return (
            not others
            or self._finished_elsewhere(others)
            or time.monotonic() - self.partitions.last_rebalance > self.settle_s
        )

    def _read_past_targets(self, partitions: list[int]) -> bool:
        """The consumer's position passed the target although no record did: the log ends in
        transaction markers (a transactional producer writes the raw topic) or aborted records,
        which a read_committed consumer skips without handing them to the engine."""
        positions = self.consumer.position([TopicPartition(self.topic, p) for p in partitions])
        return all(tp.offset >= self.targets.get(tp.partition, 0) for tp in positions)

    def _finished_elsewhere(self, targets: dict[int, int]) -> bool:
        """Every partition this instance does not hold has a committed low watermark at its target."""
        now = time.monotonic()
        if now - self._last_elsewhere_check < ELSEWHERE_CHECK_S:
            return False
        self._last_elsewhere_check = now
        try:
            committed = self.consumer.committed([TopicPartition(self.topic, p) for p in targets], timeout=5)
        except KafkaException:
            return False
        return all(tp.offset >= targets[tp.partition] for tp in committed)
