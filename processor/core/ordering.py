"""Global commit order: release committed transactions across partitions in commit_scn order.

A partition's watermark is the highest scn proven complete on it (COMMIT, ROLLBACK, HEARTBEAT:
events of a partition arrive in source-log order). A committed transaction is held, as metadata
only (its changes stay in the store), until the minimum watermark over the owned partitions
reaches its commit_scn; nothing with a smaller commit_scn can then still arrive. Ties break on
(thread, xid) so every run releases in the same order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import structlog

from processor.core.engine import PartitionEngine
from processor.core.txn import Txn

log = structlog.get_logger(__name__)


@dataclass(order=True)
class Held:
    sort_key: tuple[int, int, str, int]
    held_at_ms: float = field(compare=False)
    engine: PartitionEngine = field(compare=False)
    txn: Txn = field(compare=False)


class GlobalOrder:
    def __init__(self, max_hold_ms: int = 0, stall_warn_ms: int = 30000):
        self.max_hold_ms = max_hold_ms
        self.stall_warn_ms = stall_warn_ms
        self.heap: list[Held] = []
        self.relaxed = 0  # released by max_hold before the watermark allowed it
        self._advanced: dict[int, tuple[int, float]] = {}  # partition -> (watermark, when it last moved)
        self._warned: set[int] = set()

    def hold(self, engine: PartitionEngine, txn: Txn, now_ms: float) -> None:
        c = txn.commit
        assert c is not None, "only committed transactions are held"
        heapq.heappush(self.heap, Held((c.scn, c.thread, txn.xid, txn.partition), now_ms, engine, txn))

    def ready(self, watermarks: dict[int, int], now_ms: float) -> list[tuple[PartitionEngine, Txn]]:
        """Transactions that may go out now, in release order."""
        self._track_stalls(watermarks, now_ms)
        low = min(watermarks.values()) if watermarks else None
        out = []
        while self.heap:
            head = self.heap[0]
            if low is not None and head.sort_key[0] <= low:
                pass
            elif self.max_hold_ms and now_ms - head.held_at_ms >= self.max_hold_ms:
                self.relaxed += 1
                log.warning(
                    "ordering.relaxed",
                    xid=head.txn.xid,
                    partition=head.txn.partition,
                    commit_scn=head.sort_key[0],
                    min_watermark=low,
                    held_ms=round(now_ms - head.held_at_ms),
                )
            else:
                break
            heapq.heappop(self.heap)
            out.append((head.engine, head.txn))
        return out

    def release_all(self) -> list[tuple[PartitionEngine, Txn]]:
        """End of input (available-now): nothing more can arrive, so everything held may go, in order."""
        out = [(h.engine, h.txn) for h in sorted(self.heap)]
        self.heap.clear()
        return out

    def drop_partition(self, partition: int) -> None:
        """A revoked partition's held transactions stay pending in its store; its next owner releases them."""
        self.heap = [h for h in self.heap if h.txn.partition != partition]
        heapq.heapify(self.heap)
        self._advanced.pop(partition, None)

    def _track_stalls(self, watermarks: dict[int, int], now_ms: float) -> None:
        for p, wm in watermarks.items():
            last = self._advanced.get(p)
            if last is None or wm > last[0]:
                self._advanced[p] = (wm, now_ms)
                self._warned.discard(p)
            elif self.heap and self.stall_warn_ms and now_ms - last[1] > self.stall_warn_ms and p not in self._warned:
                self._warned.add(p)
                log.warning(
                    "ordering.partition_stalled",
                    partition=p,
                    watermark=wm,
                    stalled_ms=round(now_ms - last[1]),
                    held=len(self.heap),
                )

    def stalled_partitions(self, now_ms: float) -> list[int]:
        return [p for p, (_, since) in self._advanced.items() if self.heap and now_ms - since > self.stall_warn_ms]

    def oldest_held_age_ms(self, now_ms: float) -> float:
        return max((now_ms - h.held_at_ms for h in self.heap), default=0.0)
