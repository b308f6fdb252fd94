"""Emission of committed transactions: the one dispatch path, whatever produced the commit.

A released transaction's changes are streamed from the store to a Sink. Outputs are acknowledged
by settlement, not one report at a time: when the sink is settled (sink.settled(): the Kafka
producer's queue is empty, so every record produced before is delivered or its failure was
reported), every output sent before counts as acknowledged. A failure is reported to the
callback passed with the output, and any failure stops the process (DeliveryFailed) before a
settlement counts. Settlement drives, in release order:
  * the emit cursor (acked_seq, acked_count, acked_tables): it moves to the last change sent
    before the settlement, is persisted with the store, and a crash in the middle of a huge
    transaction resumes after it;
  * END, sent only once every change of the transaction is settled (at_least_once; exactly_once
    sends it with its changes, in the same Kafka transaction);
  * finishing (engine.acknowledged: buffered events deleted, low watermark moves), only once END
    is settled too.
Transactions complete in release order, so the committed low watermark only moves forward.

A producer that settles by epochs (processor/kafka/settlement.py) lets the delivery settle part of
what is in flight: seal() closes the outputs sent since the last seal into a group tagged with an
epoch that they all belong to, and advance(through=epoch) settles the groups up to it, in order.

A sink that can hold a record until every record sent before it is acknowledged (KafkaSink on the
native producer: hold_transaction) gets each END as soon as its changes are all sent (hold_ends, set
by the at_least_once delivery): the producer sends it the moment the changes are acknowledged, and
the loop never waits for that. A held END counts as acknowledged once the group it was sealed in
settles. A failure report stops the producer's releases; the held ENDs come back (reclaim_held) and
go the usual way, each once its changes are acknowledged, so that what the report did (a dead
letter, a chunk) is in the END.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from processor.core import codec, keys
from processor.core import events as ev
from processor.core.assemble import change_event_bytes, iter_changes
from processor.core.contracts import Sink
from processor.core.engine import PartitionEngine
from processor.core.txn import Txn

# One released transaction and how far it is acknowledged: codec.Emission (compiled in
# processor/core/_emit.pxi, else processor.core.codec_py.PyEmission).
Emission = Any


class DeliveryFailed(RuntimeError):
    """The broker refused an output after the producer's retries; the process must restart."""


def _always_settled() -> bool:
    return True


class Emitter:
    def __init__(self, sink: Sink, ordering: str = "partition", tombstones: bool = False):
        self.sink = sink
        self.ordering = ordering
        self.tombstones = tombstones
        self.queue: deque[Emission] = deque()  # released and not finished, in release order
        self._to_end: deque[Emission] = deque()  # the tail of queue whose END is not sent yet
        self._unsettled: list[Emission] = []  # emissions with outputs sent since the last seal
        # (epoch, emissions with outputs sent, emissions whose END was held), oldest first
        self._sealed: deque[tuple[int, list[Emission], list[Emission]]] = deque()
        # A sink without settled() writes synchronously: what it took is acknowledged.
        self._settled: Callable[[], bool] = getattr(sink, "settled", _always_settled)
        self.errors: list[str] = []
        self._failed = self._check  # the one failure callback every output carries (no object per output)
        # The sink's frame-free path for changes, when it has one (contracts.Sink.direct_change_sender).
        direct_sender = getattr(sink, "direct_change_sender", None)
        self._direct = direct_sender(self._failed) if direct_sender is not None else None
        self.changes_emitted = 0
        self.transactions_emitted = 0
        self.settlements = 0
        self.on_complete: Callable[[Emission], None] | None = None
        # at_least_once: END is sent once every change is acknowledged, so an END on the topic means
        # its changes are there. exactly_once: END is in the same Kafka transaction as its changes
        # and becomes visible with them or not at all, so it goes out at once (one flush per batch,
        # not two); the guarantee sets this (processor.kafka.delivery).
        self.end_waits_for_acks = True
        # at_least_once on a sink that holds records (module doc): advance() hands over the ENDs of
        # the batch's released transactions at once, in one epoch of the producer. (Held as each
        # transaction was released, an epoch each, they cost the producer's threads more CPU and
        # gave no lower latency: docs/benchmarks.md, session 49.)
        self.hold_ends = False
        self._held: list[Emission] = []  # ENDs held since the last seal
        self._held_order: deque[Emission] = deque()  # every held END not known delivered, in hold order
        self._send_directly: set[Emission] = set()  # reclaimed: the usual way, after their changes' acks

    def release(self, engine: PartitionEngine, txn: Txn) -> None:
        """Stream every change of a committed transaction to the sink, in seq order."""
        em = codec.emission(engine, txn)
        self.queue.append(em)
        self._to_end.append(em)
        self._unsettled.append(em)
        key = txn.xid.encode()
        failed = self._failed
        self.sink.send_transaction(key, em.transaction_bytes("BEGIN", self.ordering), failed)
        send, tombstones = self.sink.send_change, self.tombstones
        stream = em.stream
        sent = 0
        last_seq, table = em.last_seq, ""
        try:
            if txn.fragments:  # changes may have fragments to merge: the decoding path
                writer = stream.writer
                for change in iter_changes(engine.store, txn):
                    table = change.table or ""
                    total_order, collection_order = stream.number(table)
                    value = change_event_bytes(change, txn, total_order, collection_order, writer)
                    send(change.kafka_key, value, failed)
                    last_seq = change.seq
                    sent += 1
                    if tombstones and change.op == ev.DELETE:
                        send(change.kafka_key, None, failed)
            else:  # the per-change loop in C; it takes back a change numbered but not sent itself
                stream.sent, stream.last_seq = 0, last_seq
                tombstone_after = ev.DELETE if tombstones else None
                try:
                    staged = txn.staged  # never reached the store: its staged writes read in place
                    if staged is None or not stream.send_staged(
                        staged, txn.prefix, txn.acked_seq, send, failed, tombstone_after, self._direct
                    ):
                        begin = keys.event_key(txn.prefix, txn.acked_seq + 1)
                        pairs = engine.buffered(txn, begin, keys.events_end(txn.prefix))
                        stream.send_all(pairs, send, failed, tombstone_after, self._direct)
                finally:
                    sent, last_seq = stream.sent, stream.last_seq
        except BaseException:
            # Cut short (a stop, a failed produce): the cursor may only ever cover changes sent, so a
            # change numbered but not sent is taken back from the numbering.
            if stream.produced > txn.acked_count + sent:
                stream.produced -= 1
                stream.tables[table] -= 1
            raise
        finally:
            em.last_seq = last_seq
            if sent:
                em.changes_settled = False
            self.changes_emitted += sent
        em.all_sent = True
        # A sink that writes synchronously has acknowledged the changes already: END goes, and the
        # transaction finishes. Under exactly_once END goes at once, with no settlement: the batch's
        # Kafka transaction commits it with its changes, and the batch's end finishes it. Otherwise
        # the changes just sent are unacknowledged until a settlement, which only advance() makes:
        # the batch's advance (processor.kafka.delivery) sends the ENDs.
        if self._settled is _always_settled:
            self.advance()
        elif not self.end_waits_for_acks:
            self._send_ends()

    def _check(self, err: object | None) -> None:
        if err is not None:
            self.errors.append(str(err))

    def raise_failures(self) -> None:
        """DeliveryFailed if any output failed (its report was served)."""
        if self.errors:
            raise DeliveryFailed(f"{len(self.errors)} outputs failed, first: {self.errors[0]}")

    @property
    def unsettled(self) -> bool:
        """Outputs were sent (or ENDs held) since the last settlement."""
        return bool(self._unsettled or self._held or self._sealed)

    @property
    def unsealed(self) -> bool:
        """Outputs were sent (or ENDs held) since the last seal or settlement."""
        return bool(self._unsettled or self._held)

    def seal(self, epoch: int) -> None:
        """The outputs sent, and ENDs held, since the last seal all belong to `epoch` or an earlier one."""
        if self._unsettled or self._held:
            self._sealed.append((epoch, self._unsettled, self._held))
            self._unsettled, self._held = [], []

    def settle(self, through: int | None = None) -> None:
        """Every output sent so far is acknowledged (the caller saw the sink settled); or, with
        `through`, those of the groups sealed with an epoch up to it."""
        sealed = self._sealed
        while sealed and (through is None or sealed[0][0] <= through):
            _, ems, held = sealed.popleft()
            codec.settle_all(ems)  # the changes first: a held END was sealed with them or later
            self._ends_delivered(held)
        if through is None:
            unsettled, held = self._unsettled, self._held
            self._unsettled, self._held = [], []
            codec.settle_all(unsettled)
            self._ends_delivered(held)
        self.settlements += 1

    def _ends_delivered(self, ems: list[Emission]) -> None:
        order = self._held_order
        for em in ems:
            order.popleft()  # delivered in hold order: the producer releases them in order
            em.end_sent = em.end_acked = True

    def _reclaim_ends(self) -> None:
        """The producer stopped releasing held ENDs (a failure report ran): take back those it still
        held, the last ones held, to send each the usual way once its changes are acknowledged."""
        taken = self.sink.reclaim_held()
        if not taken:
            return
        order = self._held_order
        back = [order.pop() for _ in range(min(taken, len(order)))]  # the last held first
        gone = set(back)
        self._held = [em for em in self._held if em not in gone]
        self._sealed = deque((epoch, ems, [em for em in held if em not in gone]) for epoch, ems, held in self._sealed)
        live = set(self.queue)  # a revoked partition's emissions are resumed by the store, elsewhere
        for em in back:  # appendleft from the last held: _to_end gets them back in hold order
            if em in live:
                self._to_end.appendleft(em)
                self._send_directly.add(em)

    def advance(self, settled: bool = False, through: int | None = None) -> int:
        """Settle if the sink is settled (or the caller says so: a flush returned with nothing left),
        else the groups sealed up to epoch `through` (the producer's settled epoch); then send ENDs
        and finish acknowledged transactions, in release order. Returns how many finished. Raises
        DeliveryFailed if any output failed: a failure is reported before the sink, or its epoch,
        can be settled, so no failed output ever counts as acknowledged."""
        if self._held_order:
            self._reclaim_ends()
        if not settled and self.unsettled:
            settled = self._settled()
        self.raise_failures()
        if settled:
            if self.unsettled:
                self.settle()
        elif through is not None and self._sealed and self._sealed[0][0] <= through:
            self.settle(through)
        ended = self._send_ends()
        if ended and self._settled():  # a synchronous sink: the ENDs are acknowledged already
            self.raise_failures()
            self.settle()
        queue, done = self.queue, []
        while queue and queue[0].end_acked:
            done.append(queue.popleft())
        if not done:
            return 0
        # One call per engine (a partition's transactions finish in their release order there),
        # not one per transaction.
        for engine in {em.engine for em in done}:
            engine.acknowledged_all([em.txn for em in done if em.engine is engine])
        self.transactions_emitted += len(done)
        if self.on_complete is not None:
            for em in done:
                self.on_complete(em)
        return len(done)

    def _send_ends(self) -> bool:
        """Send the END of each emission, in release order, whose changes are all sent and, unless
        END need not wait for them (exactly_once), acknowledged; or hold it (hold_ends) as soon as its
        changes are sent. True if any went."""
        to_end, wait_for_acks = self._to_end, self.end_waits_for_acks
        ended = False
        direct = self._send_directly
        if self.hold_ends:  # bound once: a batch holds the END of each transaction it released
            held, held_order, hold = self._held, self._held_order, self.sink.hold_transaction
        while to_end:
            em = to_end[0]
            if not em.all_sent:
                break
            if self.hold_ends and not (direct and em in direct):
                to_end.popleft()
                held.append(em)
                held_order.append(em)
                hold(em.txn.xid.encode(), em.transaction_bytes("END", self.ordering), self._failed)
                continue
            if wait_for_acks and not em.changes_settled:
                break  # later ENDs wait, so END order follows commit order
            to_end.popleft()
            direct.discard(em)
            em.end_sent = True
            self._unsettled.append(em)
            ended = True
            self.sink.send_transaction(em.txn.xid.encode(), em.transaction_bytes("END", self.ordering), self._failed)
        return ended

    def pending_for(self, engine: PartitionEngine) -> int:
        return sum(1 for em in self.queue if em.engine is engine)

    def drop_partition(self, engine: PartitionEngine) -> None:
        """Forget emissions of a revoked partition; its store state resumes them elsewhere."""
        self.queue = deque(em for em in self.queue if em.engine is not engine)
        self._to_end = deque(em for em in self._to_end if em.engine is not engine)
        self._unsettled = [em for em in self._unsettled if em.engine is not engine]
        self._sealed = deque(
            (epoch, [em for em in ems if em.engine is not engine], held) for epoch, ems, held in self._sealed
        )
        # Held ENDs stay: the producer still sends them (as it does what is in flight), and their count
        # keeps _held_order in step with the producer's.
        self._send_directly = {em for em in self._send_directly if em.engine is not engine}
