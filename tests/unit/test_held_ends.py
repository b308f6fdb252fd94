"""Held ENDs (processor/runtime/emitter.py, delivery.AtLeastOnce with NativeProducer.hold): each END is
handed to the producer as soon as its changes are sent, and the producer sends it once they are all
acknowledged, so no batch waits for the broker. An END still never goes before its changes are
acknowledged, a transaction finishes only once its END is, ENDs keep commit order, and after a failure
report the held ENDs come back and go the usual way."""

from __future__ import annotations

import pytest

from processor.core import events as ev
from processor.core.engine import PartitionEngine
from processor.kafka.delivery import AtLeastOnce
from processor.runtime.emitter import DeliveryFailed, Emitter
from processor.store.memory import MemoryStore

from .test_emitter_settlement import commit, cursor


class HoldingProducer:
    """NativeProducer's epochs, send_now and hold over an in-memory queue. A record is (epoch, label,
    on_ack, held); delivery is in queue order. A held record waits, in order, until no plain record of
    an epoch up to its `after` is queued; a failure report stops that until reclaim_held()."""

    def __init__(self) -> None:
        self.epoch, self.flushes, self.sent_now = 1, 0, 0
        self.kicked_after: list[tuple[list[str], list[str]]] = []  # at each send_now: (sent, held) so far
        self.queued: list[tuple[int, str, object, bool]] = []
        self.held: list[tuple[int, int, str, object]] = []  # (after, epoch, label, on_ack)
        self.sent: list[str] = []
        self.blocked = False
        self._produced_in_open = False

    # -- what the sink calls
    def produce(self, label: str, on_ack) -> None:
        self.queued.append((self.epoch, label, on_ack, False))
        self.sent.append(label)
        self._produced_in_open = True

    def hold(self, label: str, on_ack) -> None:
        after = self.next_epoch() if self._produced_in_open else self.epoch - 1
        self.held.append((after, self.epoch, label, on_ack))
        self._release()

    def held_labels(self) -> list[str]:
        return [label for _, _, label, _ in self.held]

    def reclaim_held(self) -> int:
        if not self.blocked:
            return 0
        taken, self.held, self.blocked = len(self.held), [], False
        return taken

    def _release(self) -> None:
        while self.held and not self.blocked:
            after, epoch, label, on_ack = self.held[0]
            if any(e <= after and not held for e, _, _, held in self.queued):
                return
            self.held.pop(0)
            self.queued.append((epoch, label, on_ack, True))
            self.sent.append(label)

    def deliver(self, n: int | None = None, err: object = None, recovered: bool = False, first: int = 0) -> None:
        """The broker acknowledges n queued records from position `first` (all by default); with err
        they failed, and their report runs (recovered: the sink dealt with it, as its oversized
        policies do, so on_ack sees nothing)."""
        n = len(self.queued) - first if n is None else n
        taken = self.queued[first : first + n]
        self.queued = self.queued[:first] + self.queued[first + n :]
        for _, _, on_ack, _ in taken:
            if err is not None:
                self.blocked = True
                if not recovered:
                    on_ack(err)
        self._release()

    # -- what the delivery calls
    def next_epoch(self) -> int:
        closed, self.epoch = self.epoch, self.epoch + 1
        self._produced_in_open = False
        return closed

    def settled_epoch(self) -> int:
        pending = [e for e, *_ in self.queued] + [e for _, e, _, _ in self.held]
        return (min(pending) if pending else self.epoch) - 1

    def poll(self, timeout=None) -> int:
        return 0

    def flush(self, timeout=None) -> int:
        self.flushes += 1
        self.deliver()
        return len(self)

    def send_now(self) -> None:
        self.sent_now += 1
        self.kicked_after.append((list(self.sent), self.held_labels()))

    def __len__(self) -> int:
        return len(self.queued) + len(self.held)


class HoldingSink:
    def __init__(self, producer: HoldingProducer):
        self.producer = producer

    def send_change(self, key, value, on_ack):
        self.producer.produce("change", on_ack)

    def send_transaction(self, key, value, on_ack):
        self.producer.produce(ev.decode_transaction(value)["status"] + ":" + key.decode(), on_ack)

    def hold_transaction(self, key, value, on_ack):
        assert ev.decode_transaction(value)["status"] == "END"
        self.producer.hold("END:" + key.decode(), on_ack)

    def reclaim_held(self) -> int:
        return self.producer.reclaim_held()

    def settled(self) -> bool:
        return len(self.producer) == 0


def holding() -> tuple:
    producer = HoldingProducer()
    sink, engine = HoldingSink(producer), PartitionEngine(0, MemoryStore())
    emitter = Emitter(sink)
    delivery = AtLeastOnce(producer, emitter, settle_interval_s=3600)
    assert delivery.holds_ends and emitter.hold_ends
    return producer, engine, emitter, delivery


def batch(delivery: AtLeastOnce, emitter: Emitter, engine: PartitionEngine, *txns, backlog: bool = False) -> None:
    """One poll batch as the runner runs it: release, end the batch."""
    for txn in txns:
        emitter.release(engine, txn)
    delivery.end_batch(list, None, backlog=backlog)


def test_below_a_backlog_an_end_goes_when_its_changes_are_acknowledged_and_no_batch_waits():
    producer, engine, emitter, delivery = holding()
    a = commit(engine, "a", 2)
    batch(delivery, emitter, engine, a)
    assert producer.sent == ["BEGIN:a", "change", "change"] and len(producer.held) == 1  # held, not sent
    assert cursor(a) == (-1, 0, {}) and "a" in engine.pending
    producer.deliver()  # the changes are acknowledged: the producer hands the END over itself
    assert producer.sent[-1] == "END:a" and not producer.held
    batch(delivery, emitter, engine)  # the changes' epoch settled, the END's not yet
    assert "a" in engine.pending
    producer.deliver()
    batch(delivery, emitter, engine)
    assert not engine.pending and not emitter.unsettled and not emitter.queue
    assert cursor(a) == (2, 2, {"s.t": 2})
    assert producer.flushes == 0 and delivery.settling_flushes == 0  # nothing ever waited for the broker


def test_below_a_backlog_the_batch_is_sent_once_it_is_released_and_its_ends_held():
    producer, engine, emitter, delivery = holding()
    a, b = commit(engine, "a", 2), commit(engine, "b", 1, offset=10)
    emitter.release(engine, a)
    emitter.release(engine, b)
    assert producer.sent_now == 0  # nothing is sent while the release produces: one request per partition
    delivery.end_batch(list, None)
    assert producer.kicked_after == [(["BEGIN:a", "change", "change", "BEGIN:b", "change"], ["END:a", "END:b"])]
    # Under a backlog linger.ms makes the requests: no send_now.
    emitter.release(engine, commit(engine, "c", 1, offset=20))
    delivery.end_batch(list, None, backlog=True)
    assert producer.sent_now == 1


def test_held_ends_keep_commit_order_and_one_does_not_wait_for_the_end_before_it():
    producer, engine, emitter, delivery = holding()
    a, b = commit(engine, "a", 1), commit(engine, "b", 3, offset=10)
    batch(delivery, emitter, engine, a, b)
    assert producer.held_labels() == ["END:a", "END:b"]  # held together, after the batch's changes
    producer.deliver(2)  # a's BEGIN and change: b's changes are still in flight
    assert "END:a" not in producer.sent and len(producer.held) == 2
    producer.deliver(4)  # b's BEGIN and changes
    assert producer.sent[-2:] == ["END:a", "END:b"] and not producer.held
    batch(delivery, emitter, engine)  # c's END, held now, does not wait for a's and b's to be delivered
    c = commit(engine, "c", 1, offset=20)
    batch(delivery, emitter, engine, c)
    assert [label for _, label, _, _ in producer.queued] == ["END:a", "END:b", "BEGIN:c", "change"]
    producer.deliver(2, first=2)  # c's BEGIN and change, before a's and b's ENDs (other partitions)
    assert producer.sent[-1] == "END:c"  # c's END did not wait for theirs
    producer.deliver(2)  # a's and b's ENDs
    batch(delivery, emitter, engine)
    assert list(engine.pending) == ["c"]  # a and b finished, in order; c's END is in flight
    producer.deliver()
    batch(delivery, emitter, engine)
    assert not engine.pending


def test_under_a_backlog_the_batch_holds_its_ends_and_a_transaction_finishes_once_its_end_is_delivered():
    producer, engine, emitter, delivery = holding()
    a = commit(engine, "a", 2)
    batch(delivery, emitter, engine, a, backlog=True)
    assert delivery.deferred_settlements == 1 and producer.held_labels() == ["END:a"]
    producer.deliver(3)  # the changes: the END goes out
    batch(delivery, emitter, engine, backlog=True)
    # The END is sealed with its changes: their group settles only once the END is delivered.
    assert "a" in engine.pending and producer.sent[-1] == "END:a"
    producer.deliver()
    batch(delivery, emitter, engine, backlog=True)
    assert not engine.pending and cursor(a) == (2, 2, {"s.t": 2}) and producer.flushes == 0


def test_a_failed_change_stops_its_end_and_the_process():
    producer, engine, emitter, delivery = holding()
    a = commit(engine, "a", 2)
    batch(delivery, emitter, engine, a)
    producer.deliver(2)  # BEGIN delivered, the first change fails
    producer.deliver(1, err="broker down")
    assert "END:a" not in producer.sent
    with pytest.raises(DeliveryFailed, match="broker down"):
        batch(delivery, emitter, engine)
    assert "END:a" not in producer.sent and "a" in engine.pending


def test_after_a_recovered_failure_the_held_ends_come_back_and_go_the_usual_way_in_order():
    producer, engine, emitter, delivery = holding()
    a, b = commit(engine, "a", 1), commit(engine, "b", 1, offset=10)
    batch(delivery, emitter, engine, a, b)
    producer.deliver(1)  # a's BEGIN
    producer.deliver(1, err="too large", recovered=True)  # a's change: dead-lettered by the sink
    producer.deliver()  # b's BEGIN and change: the releases stay stopped
    assert "END:a" not in producer.sent and "END:b" not in producer.sent and len(producer.held) == 2
    batch(delivery, emitter, engine)  # reclaimed: both go the usual way, their changes being acknowledged
    assert producer.sent[-2:] == ["END:a", "END:b"] and not producer.held
    assert engine.pending and not emitter._send_directly
    producer.deliver()
    batch(delivery, emitter, engine)
    assert not engine.pending and not emitter.unsettled
    c = commit(engine, "c", 1, offset=20)  # later ENDs are held again
    batch(delivery, emitter, engine, c)
    assert producer.held_labels() == ["END:c"]
    producer.deliver()
    assert producer.sent[-1] == "END:c"
    producer.deliver()
    batch(delivery, emitter, engine)
    assert not engine.pending


def test_a_flush_settles_held_ends_too():
    """The settling flush (a backlog past IN_FLIGHT_LIMIT, a drain): a flush that returns with nothing
    left covers the held ENDs, which len() counts."""
    producer, engine, emitter, _delivery = holding()
    a = commit(engine, "a", 2)
    emitter.release(engine, a)
    assert emitter.advance(settled=producer.flush() == 0) == 0  # the changes; the END is held now
    assert producer.sent[-1] == "END:a"  # released at once: everything before it is acknowledged
    assert emitter.advance(settled=producer.flush() == 0) == 1 and not engine.pending


class SinkProducer:
    """What KafkaSink needs of NativeProducer's holds: records held in order, released once their
    changes are acknowledged, or given back (reclaim_held) after a failure report."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.held: list[bytes] = []

    def produce(self, topic, value=None, key=None, *_args, **_kwargs):
        self.sent.append(value)

    def hold(self, topic, value, key, on_delivery=None):
        self.held.append(value)

    def release(self) -> None:
        self.sent += self.held
        self.held = []

    def reclaim_held(self) -> int:
        taken, self.held = len(self.held), []
        return taken

    def poll(self, _timeout=None):
        return 0

    def __len__(self) -> int:
        return len(self.held)


def _kafka_sink() -> tuple:
    from processor.kafka.produce import RecordTooLarge
    from processor.kafka.sink import KafkaSink

    from .test_eos_abort import end_of

    producer = SinkProducer()
    sink = KafkaSink(producer, "changes", "transactions", "dlq")

    def dead_letter(xid: str) -> None:
        change = {"source": {"xid": xid}, "event_id": f"1:10:{xid}:1"}
        sink._dead_letter_change(b"k", b"v", change, RecordTooLarge("changes", 2_000_000), lambda _err: None)

    def hold(xid: str) -> None:
        sink.hold_transaction(xid.encode(), end_of(xid), lambda _err: None)

    def send(xid: str) -> dict:
        sink.send_transaction(xid.encode(), end_of(xid), lambda _err: None)
        return ev.decode_transaction(producer.sent[-1])

    return producer, sink, dead_letter, hold, send


def test_a_held_end_given_back_says_its_dead_lettered_change_when_it_is_sent_again():
    producer, sink, dead_letter, hold, send = _kafka_sink()
    dead_letter("big")
    hold("big")
    assert ev.decode_transaction(producer.held[0])["reason"].startswith("1 change(s) dead-lettered")
    assert sink.reclaim_held() == 1  # a failure report stopped the releases: the END comes back unsent
    assert send("big")["reason"].startswith("1 change(s) dead-lettered: record too large")


@pytest.mark.parametrize("marked_after", [False, True], ids=["then-unmarked", "then-marked"])
def test_only_the_held_ends_given_back_take_their_reasons_back(marked_after):
    """a's END went with its reason, then later ENDs come back. A marked hold after a's drops a's mark
    from the sink's list (it went); without one the list still has it, and the reclaim must skip it."""
    producer, sink, dead_letter, hold, send = _kafka_sink()
    dead_letter("a")
    hold("a")
    producer.release()  # a's END went, with its reason
    if marked_after:
        dead_letter("b")
        hold("b")
    hold("c")
    assert sink.reclaim_held() == (2 if marked_after else 1)
    assert not send("a").get("reason")  # a's reason is not said twice
    if marked_after:
        assert send("b")["reason"].startswith("1 change(s) dead-lettered")
    assert not send("c").get("reason")
