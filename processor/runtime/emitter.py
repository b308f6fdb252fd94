"""Emission of committed transactions: the one dispatch path, whatever produced the commit.

A released transaction's changes are streamed from the store to a Sink. The emitter tracks
acknowledgements so that:
  * the emit cursor (last contiguously acknowledged seq) is persisted, and a crash in the middle
    of a huge transaction resumes after it;
  * END is sent only after every change of the transaction is acknowledged;
  * buffered events are deleted (engine.acknowledged) only after END is acknowledged too.
Transactions complete in release order, so the committed low watermark only moves forward.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from processor.core import codec
from processor.core import events as ev
from processor.core.assemble import change_event_bytes, change_writer, iter_changes, transaction_event
from processor.core.contracts import Sink
from processor.core.engine import PartitionEngine
from processor.core.txn import Txn


class DeliveryFailed(RuntimeError):
    """The broker refused an output after the producer's retries; the process must restart."""


@dataclass
class Emission:
    engine: PartitionEngine
    txn: Txn
    produced: int = 0  # total_order of the last change sent
    tables: dict = field(default_factory=dict)  # per-table count of changes sent
    inflight: deque = field(default_factory=deque)  # (total_order, seq, table), in send order
    acked_ahead: set = field(default_factory=set)  # acked total_orders beyond the contiguous prefix
    all_sent: bool = False
    end_sent: bool = False
    end_acked: bool = False


class Emitter:
    def __init__(self, sink: Sink, ordering: str = "partition", tombstones: bool = False):
        self.sink = sink
        self.ordering = ordering
        self.tombstones = tombstones
        self.queue: deque[Emission] = deque()
        self.errors: list[str] = []
        self.changes_emitted = 0
        self.transactions_emitted = 0
        self.on_complete: Callable[[Emission], None] | None = None

    def release(self, engine: PartitionEngine, txn: Txn) -> None:
        """Stream every change of a committed transaction to the sink, in seq order."""
        em = Emission(engine, txn, produced=txn.acked_count, tables=dict(txn.acked_tables))
        self.queue.append(em)
        key = txn.xid.encode()
        self.sink.send_transaction(
            key, codec.encode_transaction(transaction_event("BEGIN", txn, self.ordering)), self._check
        )
        writer = change_writer(txn)
        for change in iter_changes(engine.store, txn):
            table = change.table or ""
            em.produced += 1
            em.tables[table] = em.tables.get(table, 0) + 1
            order = em.produced
            em.inflight.append((order, change.seq, table))
            value = change_event_bytes(change, txn, order, em.tables[table], writer)
            self.sink.send_change(
                change.kafka_key, value, lambda err, em=em, order=order: self._change_acked(em, order, err)
            )
            if self.tombstones and change.op == ev.DELETE:
                self.sink.send_change(change.kafka_key, None, self._check)
            self.changes_emitted += 1
        em.all_sent = True
        self.advance()

    def _check(self, err: object | None) -> None:
        if err is not None:
            self.errors.append(str(err))

    def _change_acked(self, em: Emission, order: int, err: object | None) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        em.acked_ahead.add(order)
        moved = False
        while em.inflight and em.inflight[0][0] in em.acked_ahead:
            order0, seq, table = em.inflight.popleft()
            em.acked_ahead.discard(order0)
            txn = em.txn
            txn.acked_seq, txn.acked_count = seq, order0
            txn.acked_tables[table] = txn.acked_tables.get(table, 0) + 1
            moved = True
        if moved:
            em.engine.cursor_moved(em.txn)

    def _end_acked(self, em: Emission, err: object | None) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        em.end_acked = True

    def advance(self) -> int:
        """Send ENDs and finish acknowledged transactions, in release order. Returns how many finished."""
        if self.errors:
            raise DeliveryFailed(f"{len(self.errors)} outputs failed, first: {self.errors[0]}")
        for em in self.queue:
            if not (em.all_sent and not em.inflight):
                break  # later ENDs wait, so END order follows commit order
            if not em.end_sent:
                em.end_sent = True
                end = transaction_event("END", em.txn, self.ordering, em.produced, em.tables)
                self.sink.send_transaction(
                    em.txn.xid.encode(), codec.encode_transaction(end), lambda err, em=em: self._end_acked(em, err)
                )
        finished = 0
        while self.queue and self.queue[0].end_acked:
            em = self.queue.popleft()
            em.engine.acknowledged(em.txn)
            self.transactions_emitted += 1
            finished += 1
            if self.on_complete is not None:
                self.on_complete(em)
        return finished

    def pending_for(self, engine: PartitionEngine) -> int:
        return sum(1 for em in self.queue if em.engine is engine)

    def drop_partition(self, engine: PartitionEngine) -> None:
        """Forget emissions of a revoked partition; its store state resumes them elsewhere."""
        self.queue = deque(em for em in self.queue if em.engine is not engine)
