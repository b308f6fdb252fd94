"""Acknowledgement by settlement (processor/runtime/emitter.py, processor/kafka/delivery.py).

No output counts as acknowledged before a settlement covers it (the sink's queue was seen empty,
or a flush returned with nothing left): not for the emit cursor, not for sending END, not for
finishing the transaction. A settlement covers what was sent before it, never what follows. A
failure report still stops the process, even when the queue is empty by then.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from processor.core import events as ev
from processor.core.engine import Committed, PartitionEngine
from processor.kafka.delivery import AtLeastOnce, for_guarantee
from processor.kafka.sink import KafkaSink
from processor.runtime.emitter import DeliveryFailed, Emitter
from processor.store.memory import MemoryStore


class QueueSink:
    """Keeps each output's failure callback until delivered; settled when nothing is queued."""

    def __init__(self):
        self.queued: list = []
        self.sent: list[str] = []

    def send_change(self, key, value, on_ack):
        self.sent.append("change" if value is not None else "tombstone")
        self.queued.append(on_ack)

    def send_transaction(self, key, value, on_ack):
        self.sent.append(ev.decode_transaction(value)["status"])
        self.queued.append(on_ack)

    def settled(self):
        return not self.queued

    def deliver(self, n=None, err=None):
        n = len(self.queued) if n is None else n
        taken, self.queued = self.queued[:n], self.queued[n:]
        for on_ack in taken:
            if err is not None:
                on_ack(err)


def commit(engine: PartitionEngine, xid: str, n: int, offset: int = 0) -> tuple:
    actions = []
    for seq in range(1, n + 1):
        e = ev.raw_event(xid, ev.INSERT, seq, seq, table="s.t", key={"id": seq}, after={"id": seq})
        actions += engine.apply(offset + seq - 1, xid.encode(), ev.encode_raw(e))
    actions += engine.apply(offset + n, xid.encode(), ev.encode_raw(ev.raw_event(xid, ev.COMMIT, n + 1, n + 1)))
    engine.flush_data()
    return next(a.txn for a in actions if isinstance(a, Committed))


def cursor(txn) -> tuple:
    return txn.acked_seq, txn.acked_count, dict(txn.acked_tables)


def test_nothing_counts_as_acknowledged_before_a_settlement_covers_it():
    sink, engine = QueueSink(), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    txn = commit(engine, "a", 3)
    emitter.release(engine, txn)
    sink.deliver(3)  # BEGIN and two of the three changes delivered: not settled
    assert emitter.advance() == 0
    assert cursor(txn) == (-1, 0, {})  # the cursor does not move per delivery
    assert sink.sent == ["BEGIN", "change", "change", "change"]  # no END
    sink.deliver()
    assert emitter.advance() == 0  # settled: the cursor moves and END goes out, but END is not settled
    assert cursor(txn) == (3, 3, {"s.t": 3})
    assert sink.sent[-1] == "END" and "a" in engine.pending and emitter.queue
    assert emitter.advance() == 0  # END still queued
    sink.deliver()
    assert emitter.advance() == 1 and "a" not in engine.pending and not emitter.queue


class CountingSettledSink(QueueSink):
    """Delivers at once; counts how often the emitter asks whether it is settled."""

    def __init__(self):
        super().__init__()
        self.asked = 0

    def send_change(self, key, value, on_ack):
        self.sent.append("change")

    def send_transaction(self, key, value, on_ack):
        self.sent.append(ev.decode_transaction(value)["status"])

    def settled(self):
        self.asked += 1
        return True


def test_a_release_leaves_settling_and_end_to_the_batch_under_at_least_once():
    """A release does not ask the sink whether it is settled (one call per transaction, nearly always
    "no" right after its changes were produced); the batch's advance settles and sends the ENDs."""
    sink, engine = CountingSettledSink(), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    txn = commit(engine, "a", 2)
    emitter.release(engine, txn)
    assert sink.sent == ["BEGIN", "change", "change"] and sink.asked == 0
    assert cursor(txn) == (-1, 0, {})
    assert emitter.advance() == 1  # settled: cursor, END, END settled, finished
    assert sink.sent[-1] == "END" and cursor(txn) == (2, 2, {"s.t": 2}) and "a" not in engine.pending


def test_a_release_sends_end_at_once_under_exactly_once_and_to_a_synchronous_sink():
    sink, engine = CountingSettledSink(), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    emitter.end_waits_for_acks = False  # exactly_once (delivery.ExactlyOnce)
    emitter.release(engine, commit(engine, "a", 2))
    assert sink.sent == ["BEGIN", "change", "change", "END"]

    class Synchronous:  # no settled(): what it took is acknowledged
        def __init__(self):
            self.sent: list[str] = []

        def send_change(self, key, value, on_ack):
            self.sent.append("change")

        def send_transaction(self, key, value, on_ack):
            self.sent.append(ev.decode_transaction(value)["status"])

    engine = PartitionEngine(0, MemoryStore())
    emitter = Emitter(Synchronous())
    emitter.release(engine, commit(engine, "b", 1))
    assert emitter.sink.sent == ["BEGIN", "change", "END"] and "b" not in engine.pending and not emitter.queue


def test_a_settlement_covers_what_was_sent_before_it_and_not_what_follows():
    sink, engine = QueueSink(), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    first = commit(engine, "a", 2)
    emitter.release(engine, first)
    sink.deliver()
    emitter.advance(settled=True)  # e.g. a flush returned 0
    second = commit(engine, "b", 2, offset=3)
    emitter.release(engine, second)
    assert cursor(first) == (2, 2, {"s.t": 2})
    assert cursor(second) == (-1, 0, {})  # released after the settlement
    assert sink.sent.count("END") == 1
    emitter.advance()  # END of a queued, b's changes queued: nothing settles
    assert cursor(second) == (-1, 0, {}) and sink.sent.count("END") == 1
    sink.deliver()
    emitter.advance()
    assert cursor(second) == (2, 2, {"s.t": 2}) and sink.sent.count("END") == 2
    assert list(engine.pending) == ["b"]  # a finished (its END settled), b's END not yet: release order


def test_a_failure_report_raises_even_once_the_queue_is_empty_and_moves_nothing():
    sink, engine = QueueSink(), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    txn = commit(engine, "a", 2)
    emitter.release(engine, txn)
    sink.deliver(2)
    sink.deliver(1, err="Broker: Not enough in-sync replicas")  # the second change failed
    sink.deliver()
    assert sink.settled()
    with pytest.raises(DeliveryFailed, match="in-sync replicas"):
        emitter.advance()
    assert cursor(txn) == (-1, 0, {}) and "END" not in sink.sent and "a" in engine.pending


class FlushCountingProducer:
    def __init__(self, sink_queue: list):
        self.queue, self.flushes = sink_queue, 0

    def poll(self, timeout=None):
        return 0

    def flush(self, timeout=None):
        self.flushes += 1
        self.queue.clear()
        return 0


def released(producer_type: type = FlushCountingProducer, **delivery_options) -> tuple:
    """An at_least_once delivery (AtLeastOnce(**delivery_options), or for_guarantee's when none)
    whose emitter released transaction "a" (2 changes), its batch not ended yet."""
    sink, engine = QueueSink(), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    producer = producer_type(sink.queued)
    if delivery_options:
        delivery = AtLeastOnce(producer, emitter, **delivery_options)
    else:
        delivery = for_guarantee("at_least_once_dedup", producer, emitter)
    emitter.release(engine, commit(engine, "a", 2))
    return sink, engine, emitter, producer, delivery


def ended_batch(producer_type: type) -> tuple:
    """One at_least_once batch that released transaction "a" (2 changes), ended on producer_type."""
    sink, engine, emitter, producer, delivery = released(producer_type)
    delivery.end_batch(list, None)
    return sink, engine, emitter, producer, delivery


def test_at_least_once_settles_a_batch_by_two_flushes_and_an_idle_one_by_none():
    sink, engine, emitter, producer, delivery = ended_batch(FlushCountingProducer)
    # The first flush settles the changes, which sends END; the second settles END: the transaction
    # finishes within its batch, before the checkpoint (which would otherwise spill it to the store).
    assert producer.flushes == 2 and sink.sent[-1] == "END"
    assert not engine.pending and not emitter.unsettled
    delivery.end_batch(list, None)
    assert producer.flushes == 2  # nothing sent: no flush


def test_under_a_backlog_settling_waits_for_its_interval():
    sink, engine, _emitter, producer, delivery = released(settle_interval_s=3600)
    # A full batch, within the interval: no flush, nothing acknowledged.
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 0 and "END" not in sink.sent and "a" in engine.pending
    assert cursor(engine.pending["a"]) == (-1, 0, {})
    # A batch that is not full (caught up) settles at once, deferred or not before.
    delivery.end_batch(list, None, backlog=False)
    assert producer.flushes == 2 and sink.sent[-1] == "END" and not engine.pending
    # Counted for the run's summary (run.phases) and the bench.
    assert (delivery.deferred_settlements, delivery.settling_flushes) == (1, 2)


def test_without_an_interval_a_backlog_defers_nothing():
    # settle_interval_ms 0 turns the deferral off (delivery.py): every batch settles at once.
    _sink, engine, _emitter, producer, delivery = released(settle_interval_s=0.0)
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 2 and not engine.pending and delivery.deferred_settlements == 0


def test_under_a_backlog_the_interval_bounds_the_deferral():
    _sink, engine, emitter, producer, delivery = released(settle_interval_s=0.05)
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 0 and emitter.unsettled
    time.sleep(0.06)
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 2 and not engine.pending and not emitter.unsettled


def test_under_a_backlog_a_batch_longer_than_the_interval_defers_once_not_twice_in_a_row():
    # A slow machine: one batch alone outlasts the interval. It still defers (else the deferral
    # never fires there); the next batch settles both, whatever the clock says.
    _sink, engine, emitter, producer, delivery = released(settle_interval_s=0.01)
    time.sleep(0.02)
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 0 and emitter.unsettled
    time.sleep(0.02)
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 2 and not engine.pending and not emitter.unsettled
    # Settled: the next full batch may defer again.
    emitter.release(engine, commit(engine, "b", 1))
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 2 and emitter.unsettled


def test_under_a_backlog_a_queue_that_drained_on_its_own_settles_without_a_flush():
    sink, engine, _emitter, producer, delivery = released(settle_interval_s=3600)
    sink.deliver()  # librdkafka delivered everything meanwhile: the queue is empty
    # The changes settle and END goes out; END itself is unsettled, so the batch is still deferred.
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 0 and sink.sent[-1] == "END" and "a" in engine.pending
    sink.deliver()
    delivery.end_batch(list, None, backlog=True)
    assert producer.flushes == 0 and not engine.pending


class StuckProducer(FlushCountingProducer):
    def flush(self, timeout=None):
        self.flushes += 1
        return len(self.queue)  # nothing delivered within the timeout


def test_at_least_once_does_not_flush_twice_when_the_first_flush_did_not_settle():
    sink, engine, _emitter, producer, _delivery = ended_batch(StuckProducer)
    assert producer.flushes == 1 and "END" not in sink.sent and "a" in engine.pending


def test_a_record_the_broker_never_takes_stays_unsettled_until_its_failure_report_raises():
    """librdkafka itself: with delivery.report.only.error a record counts in len(producer) until it
    is delivered or its failure report was served, so the sink never settles past a failure."""
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 300, "delivery.report.only.error": True}
    )
    sink, engine = KafkaSink(producer, "changes", "transactions", "dlq"), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    delivery = AtLeastOnce(producer, emitter, flush_timeout_s=0.1)
    txn = commit(engine, "a", 2)
    emitter.release(engine, txn)
    deadline = time.monotonic() + 10
    with pytest.raises(DeliveryFailed, match="timed out"):
        while time.monotonic() < deadline:
            delivery.end_batch(list, None)
            assert cursor(txn) == (-1, 0, {})
    assert cursor(txn) == (-1, 0, {}) and "a" in engine.pending
