"""Performing the engine's actions: dead letters, outcome records, and the one release path.

Every committed transaction reaches the emitter through release(): straight away, or through the
global order when `ordering: global` holds it until the minimum partition watermark passes it.
Transactions a previous run committed but did not finish are resumed through the same path.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from processor.core.actions import Action, Committed, DeadLetter, Finished
from processor.core.engine import PartitionEngine
from processor.core.ordering import GlobalOrder
from processor.core.txn import Txn
from processor.runtime.emitter import Emitter

log = structlog.get_logger(__name__)


class Dispatcher:
    def __init__(self, cfg: Any, sink: Any, emitter: Emitter, producer: Any):
        self.raw_topic, self.outcomes_topic = cfg.raw_topic, cfg.outcomes_topic
        self.sink, self.emitter, self.producer = sink, emitter, producer
        self.orderer = GlobalOrder(cfg.max_hold_ms, cfg.stall_warn_ms) if cfg.ordering == "global" else None
        self.committed: list[tuple[PartitionEngine, Txn]] = []  # this batch's, released after the data flush
        self.dead_letters = 0  # sent since the last take_dead_letters()

    # ------------------------------------------------------------------ actions

    def perform(self, engine: PartitionEngine, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Committed):
                self.committed.append((engine, action.txn))
            elif isinstance(action, DeadLetter):
                self.dead_letters += 1
                log.warning("event.dead_letter", partition=action.partition, offset=action.offset, reason=action.reason)
                self.sink.dead_letter(
                    self.raw_topic, action.partition, action.offset, action.key, action.value, action.reason
                )
            elif isinstance(action, Finished) and action.needs_record:
                # The low watermark waits for this record (offsets.py): a rebuild reads it.
                self.sink.outcome(self.outcomes_topic, action.xid, action.partition, action.offset, action.outcome)

    def take_dead_letters(self) -> int:
        n, self.dead_letters = self.dead_letters, 0
        return n

    def release_committed(self) -> None:
        """Release this batch's commits, in commit order, once their data is readable: a staged
        transaction's is (in memory), a stored one's once its engine's pending writes are flushed.
        A flush writes ahead of the checkpoint (PartitionEngine.flush_data), so only those flush."""
        if not self.committed:
            return
        for engine in {id(e): e for e, txn in self.committed if txn.staged is None}.values():
            engine.flush_data()
        for engine, txn in self.committed:
            self.release(engine, txn)
        self.committed.clear()

    def release(self, engine: PartitionEngine, txn: Txn) -> None:
        if self.orderer is None:
            self.emitter.release(engine, txn)
        else:
            self.orderer.hold(engine, txn, now_ms())

    def resume(self, engine: PartitionEngine) -> None:
        """Re-emit transactions a previous run committed but did not finish (from the emit cursor)."""
        for txn in list(engine.pending.values()):
            log.info("txn.resume_emit", partition=engine.partition, xid=txn.xid, after_seq=txn.acked_seq)
            self.release(engine, txn)

    def release_held(self, watermarks: dict[int, int]) -> None:
        if self.orderer is not None and self.orderer.heap:
            for engine, txn in self.orderer.ready(watermarks, now_ms()):
                self.emitter.release(engine, txn)

    def release_all_held(self) -> None:
        """End of the input that existed at start: no smaller commit_scn can come any more."""
        if self.orderer is not None and self.orderer.heap:
            for engine, txn in self.orderer.release_all():
                self.emitter.release(engine, txn)

    # ------------------------------------------------------------------ state

    @property
    def holding(self) -> bool:
        return self.orderer is not None and bool(self.orderer.heap)

    @property
    def busy(self) -> bool:
        """Released or held transactions not finished yet."""
        return bool(self.emitter.queue) or self.holding

    def drain(self, timeout_s: float) -> None:
        """Wait until every released transaction is fully acknowledged."""
        deadline = time.monotonic() + timeout_s
        while self.emitter.queue and time.monotonic() < deadline:
            self.producer.poll(0.05)
            self.emitter.advance()
        self.producer.flush(max(0.0, deadline - time.monotonic()))
        self.emitter.advance()

    def drop_partition(self, engine: PartitionEngine) -> None:
        """Forget a partition that left: its store state resumes its emissions elsewhere."""
        self.emitter.drop_partition(engine)
        if self.orderer is not None:
            self.orderer.drop_partition(engine.partition)

    def figures(self) -> dict:
        now = now_ms()
        return {
            "held_txns": len(self.orderer.heap) if self.orderer else 0,
            "oldest_held_age_ms": self.orderer.oldest_held_age_ms(now) if self.orderer else 0,
            "ordering_relaxed": self.orderer.relaxed if self.orderer else 0,
            "changes_emitted": self.emitter.changes_emitted,
            "transactions_emitted": self.emitter.transactions_emitted,
        }


def now_ms() -> float:
    return time.monotonic() * 1000
