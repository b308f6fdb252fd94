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
from typing import Any

from processor.core import codec, keys
from processor.core import events as ev
from processor.core.assemble import change_event_bytes, change_writer, iter_changes, transaction_event
from processor.core.contracts import Sink
from processor.core.engine import PartitionEngine
from processor.core.txn import Txn


class DeliveryFailed(RuntimeError):
    """The broker refused an output after the producer's retries; the process must restart."""


class Emission:
    """One released transaction: its change numbering (stream) and its acknowledgements (acks)."""

    __slots__ = ("acks", "all_sent", "end_acked", "end_sent", "engine", "stream", "txn")

    def __init__(self, engine: PartitionEngine, txn: Txn, stream: Any, acks: Any):
        self.engine, self.txn, self.stream, self.acks = engine, txn, stream, acks
        self.all_sent = self.end_sent = self.end_acked = False

    @property
    def produced(self) -> int:
        """total_order of the last change sent."""
        produced: int = self.stream.produced
        return produced

    @property
    def tables(self) -> dict[str, int]:
        """Changes sent per table (from the start of the transaction)."""
        tables: dict[str, int] = self.stream.tables
        return tables


class Emitter:
    def __init__(self, sink: Sink, ordering: str = "partition", tombstones: bool = False):
        self.sink = sink
        self.ordering = ordering
        self.tombstones = tombstones
        self.queue: deque[Emission] = deque()  # released and not finished, in release order
        self._to_end: deque[Emission] = deque()  # the tail of queue whose END is not sent yet
        self.errors: list[str] = []
        self.changes_emitted = 0
        self.transactions_emitted = 0
        self.on_complete: Callable[[Emission], None] | None = None
        # at_least_once: END is sent once every change is acknowledged, so an END on the topic means
        # its changes are there. exactly_once: END is in the same Kafka transaction as its changes
        # and becomes visible with them or not at all, so it goes out at once (one flush per batch,
        # not two); the guarantee sets this (processor.kafka.delivery).
        self.end_waits_for_acks = True

    def release(self, engine: PartitionEngine, txn: Txn) -> None:
        """Stream every change of a committed transaction to the sink, in seq order."""
        writer = change_writer(txn)
        em = Emission(
            engine,
            txn,
            codec.change_stream(writer, txn.acked_count, dict(txn.acked_tables)),
            codec.AckTracker(txn, engine, self.errors),
        )
        self.queue.append(em)
        self._to_end.append(em)
        key = txn.xid.encode()
        self.sink.send_transaction(
            key, codec.encode_transaction(transaction_event("BEGIN", txn, self.ordering)), self._check
        )
        send, track, tombstones = self.sink.send_change, em.acks.track, self.tombstones
        sent = 0
        if txn.fragments:  # changes may have fragments to merge: the decoding path
            for change in iter_changes(engine.store, txn):
                total_order, collection_order = em.stream.number(change.table)
                value = change_event_bytes(change, txn, total_order, collection_order, writer)
                send(change.kafka_key, value, track(change.seq, change.table or ""))
                if tombstones and change.op == ev.DELETE:
                    send(change.kafka_key, None, self._check)
                sent += 1
        else:
            begin = keys.event_key(txn.prefix, txn.acked_seq + 1)
            following = em.stream.next
            for _, raw in engine.store.scan(begin, keys.upper_bound(txn.prefix + keys.EVENT)):
                out = following(raw)
                if out is None:
                    continue
                kafka_key, value, seq, table, op = out
                send(kafka_key, value, track(seq, table))
                if tombstones and op == ev.DELETE:
                    send(kafka_key, None, self._check)
                sent += 1
        self.changes_emitted += sent
        em.all_sent = True
        self.advance()

    def _check(self, err: object | None) -> None:
        if err is not None:
            self.errors.append(str(err))

    def _end_acked(self, em: Emission, err: object | None) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        em.end_acked = True

    def advance(self) -> int:
        """Send ENDs and finish acknowledged transactions, in release order. Returns how many finished."""
        if self.errors:
            raise DeliveryFailed(f"{len(self.errors)} outputs failed, first: {self.errors[0]}")
        to_end, wait_for_acks = self._to_end, self.end_waits_for_acks
        while to_end:
            em = to_end[0]
            if not em.all_sent or (wait_for_acks and em.acks.pending):
                break  # later ENDs wait, so END order follows commit order
            to_end.popleft()
            em.end_sent = True
            end = transaction_event("END", em.txn, self.ordering, em.produced, em.tables)
            self.sink.send_transaction(
                em.txn.xid.encode(), codec.encode_transaction(end), lambda err, em=em: self._end_acked(em, err)
            )
        finished = 0
        queue = self.queue
        while queue and queue[0].end_acked and not queue[0].acks.pending:
            em = queue.popleft()
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
        self._to_end = deque(em for em in self._to_end if em.engine is not engine)
