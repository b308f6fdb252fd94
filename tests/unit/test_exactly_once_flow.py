"""Control flow of guarantee=exactly_once (processor/delivery.py) without a broker.

The transactional call order is checked against a recording producer here; the same flow runs end
to end on Apache Kafka in tests/integration/test_exactly_once.py (SIGKILL, zombie fencing).
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from processor.core import events as ev
from processor.core.engine import Committed, PartitionEngine
from processor.kafka.admin import KafkaUnavailable
from processor.kafka.delivery import (
    AtLeastOnce,
    ExactlyOnce,
    TransactionAborted,
    TransactionStuck,
    for_guarantee,
    is_fenced,
)
from processor.runtime.emitter import DeliveryFailed, Emitter
from processor.store.memory import MemoryStore


class RecordingProducer:
    """Acknowledges produced records on flush(), like a transactional producer inside a transaction."""

    def __init__(self, fail_commit: KafkaError | None = None):
        self.calls: list[str] = []
        self.unacked: list = []
        self.fail_commit = fail_commit

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")

    def flush(self, timeout=None):
        self.calls.append("flush")
        while self.unacked:
            self.unacked.pop(0)(None)
        return 0

    def poll(self, timeout=None):
        return 0

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append(f"offsets:{[(tp.partition, tp.offset) for tp in offsets]}")

    def commit_transaction(self, timeout):
        if self.fail_commit is not None:
            raise KafkaException(self.fail_commit)
        self.calls.append("commit")

    def abort_transaction(self, timeout):
        self.calls.append("abort")


class Sink:
    def __init__(self, producer: RecordingProducer):
        self.producer = producer
        self.sent: list[str] = []

    def send_change(self, key, value, on_ack):
        self.sent.append("change")
        self.producer.calls.append("produce:change")
        self.producer.unacked.append(on_ack)

    def send_transaction(self, key, value, on_ack):
        status = ev.decode_transaction(value)["status"]
        self.sent.append(status)
        self.producer.calls.append(f"produce:{status}")
        self.producer.unacked.append(on_ack)

    def settled(self):
        return not self.producer.unacked


class Consumer:
    def consumer_group_metadata(self):
        return "group-metadata"


def committed_txn(engine: PartitionEngine):
    actions = []
    for offset, e in enumerate(
        [
            ev.raw_event("a", ev.INSERT, 1, 1, table="s.t", key={"id": 1}, after={"id": 1}),
            ev.raw_event("a", ev.INSERT, 2, 2, table="s.t", key={"id": 2}, after={"id": 2}),
            ev.raw_event("a", ev.COMMIT, 3, 3),
        ]
    ):
        actions += engine.apply(offset, b"a", ev.encode_raw(e))
    engine.flush_data()
    return next(a.txn for a in actions if isinstance(a, Committed))


def test_batch_commits_outputs_and_low_watermark_in_one_transaction():
    producer = RecordingProducer()
    sink = Sink(producer)
    emitter = Emitter(sink)
    delivery = ExactlyOnce(producer, emitter)
    engine = PartitionEngine(0, MemoryStore())
    delivery.start()
    delivery.begin_batch()
    emitter.release(engine, committed_txn(engine))
    delivery.end_batch(lambda: [TopicPartition("raw", 0, engine.low_watermark())], Consumer())
    assert not emitter.queue and not engine.pending  # finished inside the transaction
    delivery.join()

    assert producer.calls == [
        "init",
        "begin",
        "produce:BEGIN",
        "produce:change",
        "produce:change",
        "produce:END",  # in the same Kafka transaction as its changes: it need not wait for their acks
        # no flush: commit_transaction delivers every record of the transaction, or fails it whole
        "offsets:[(0, 3)]",
        "commit",
    ]
    assert delivery.committed_batches == 1


def test_end_batch_without_begin_commits_nothing():
    producer = RecordingProducer()
    delivery = ExactlyOnce(producer, Emitter(Sink(producer)))
    delivery.end_batch(lambda: [], Consumer())
    assert producer.calls == []


def test_abortable_commit_failure_aborts_and_stops_the_runner():
    error = KafkaError(KafkaError._FENCED, "fenced", txn_requires_abort=True)
    producer = RecordingProducer(fail_commit=error)
    emitter = Emitter(Sink(producer))
    delivery = ExactlyOnce(producer, emitter)
    delivery.begin_batch()
    delivery.end_batch(lambda: [TopicPartition("raw", 0, 5)], Consumer())
    with pytest.raises(KafkaException) as caught:
        delivery.join()  # the commit ran in the background: its failure comes out here
    assert not isinstance(caught.value, TransactionAborted)  # fenced: the runner stops, it does not rewind
    assert producer.calls[-1] == "abort"
    assert not delivery.in_transaction and delivery.committed_batches == 0


class CoordinatorLostProducer(RecordingProducer):
    """send_offsets_to_transaction never returns, whatever its timeout: librdkafka after a broker
    SIGKILL and restart (confluentinc/librdkafka#5456; a py-spy dump showed the processor waiting in
    rd_kafka_send_offsets_to_transaction for over 5 minutes with a 60 s timeout)."""

    def __init__(self):
        super().__init__()
        self.never = threading.Event()

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append("offsets")
        self.never.wait()


@pytest.mark.timeout(30)  # before the fix this hung forever
def test_a_send_offsets_call_that_never_returns_stops_the_batch_within_its_deadline():
    producer = CoordinatorLostProducer()
    delivery = ExactlyOnce(producer, Emitter(Sink(producer)), flush_timeout_s=0.2, stuck_grace_s=0.3)
    delivery.begin_batch()
    delivery.end_batch(lambda: [TopicPartition("raw", 0, 5)], Consumer())
    started = time.monotonic()
    with pytest.raises(TransactionStuck, match=r"producer commit did not return within 0\.7s") as caught:
        delivery.begin_batch()  # the next batch waits for the commit: 2 x 0.2 s of call timeouts + 0.3 s grace
    assert time.monotonic() - started < 3
    assert isinstance(caught.value, KafkaUnavailable)  # the CLI exits with code 3; a restart fences
    assert producer.calls == ["begin", "offsets"] and not delivery.in_transaction
    producer.never.set()


def test_exactly_once_never_trusts_the_local_store_and_commits_offsets_only_in_transactions():
    producer = RecordingProducer()
    emitter = Emitter(Sink(producer))
    eos = for_guarantee("exactly_once", producer, emitter)
    alo = for_guarantee("at_least_once_dedup", producer, emitter)
    assert isinstance(eos, ExactlyOnce) and not eos.trusts_local_store and not eos.commits_offsets_itself
    assert isinstance(alo, AtLeastOnce) and alo.trusts_local_store and alo.commits_offsets_itself


def test_exactly_once_restore_rebuilds_even_when_a_local_store_exists():
    from processor.core.engine import Filters
    from processor.runtime.partitions import restore_partition

    store = MemoryStore()
    engine = PartitionEngine(0, store)
    engine.apply(0, b"a", ev.encode_raw(ev.raw_event("a", ev.INSERT, 1, 1, table="s.t", key={"id": 1})))
    engine.checkpoint(spill_all=True)
    trusted = restore_partition(0, store, Filters(), 10, committed=0, log_start=0)
    assert trusted.source == "local" and trusted.start_offset == 1
    rebuilt = restore_partition(0, store, Filters(), 10, committed=0, log_start=0, trust_local=False)
    assert rebuilt.source == "rebuild-empty" and rebuilt.start_offset == 0


def test_fencing_is_recognised_also_behind_the_error_that_closing_raised_after_it():
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
    try:
        try:
            raise fenced
        finally:
            raise RuntimeError("21 outputs failed, first: Local: Purged in queue")  # what close() raised
    except RuntimeError as exc:
        assert is_fenced(exc)
    assert not is_fenced(KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION)))
    assert not is_fenced(RuntimeError("no Kafka error at all"))


@pytest.mark.parametrize("guarantee", ["at_least_once_dedup", "exactly_once"])
def test_end_waits_for_the_changes_settlement_only_under_at_least_once(guarantee):
    producer = RecordingProducer()
    sink = Sink(producer)
    emitter = Emitter(sink)
    for_guarantee(guarantee, producer, emitter)
    engine = PartitionEngine(0, MemoryStore())
    emitter.release(engine, committed_txn(engine))
    if guarantee == "exactly_once":
        assert sink.sent == ["BEGIN", "change", "change", "END"]
    else:
        assert sink.sent == ["BEGIN", "change", "change"]  # END only once both changes are acknowledged
    del producer.unacked[:2]  # BEGIN and the first change delivered: the producer is not settled yet
    emitter.advance()
    if guarantee != "exactly_once":
        assert sink.sent == ["BEGIN", "change", "change"]  # one change still unacknowledged
    else:
        del producer.unacked[1]  # END delivered before the last change
        emitter.advance()
        assert emitter.queue and engine.pending  # not finished while a change is unacknowledged
    producer.unacked.clear()
    emitter.advance()
    assert sink.sent == ["BEGIN", "change", "change", "END"]
    assert not emitter.queue if guarantee == "exactly_once" else emitter.queue
    producer.flush()
    emitter.advance()
    assert not emitter.queue and not engine.pending


class SlowCommitProducer(RecordingProducer):
    """commit_transaction waits until the test lets it return."""

    def __init__(self):
        super().__init__()
        self.committing, self.may_return = threading.Event(), threading.Event()

    def commit_transaction(self, timeout):
        self.committing.set()
        assert self.may_return.wait(10)
        self.calls.append("commit")


def test_the_commit_runs_while_the_loop_goes_on_and_the_next_batch_waits_for_it_before_producing():
    producer = SlowCommitProducer()
    emitter = Emitter(Sink(producer))
    delivery = ExactlyOnce(producer, emitter)
    engine = PartitionEngine(0, MemoryStore())
    delivery.begin_batch()
    emitter.release(engine, committed_txn(engine))
    delivery.end_batch(lambda: [TopicPartition("raw", 0, engine.low_watermark())], Consumer())
    assert producer.committing.wait(5)  # end_batch returned with the commit under way
    assert "commit" not in producer.calls and delivery.committed_batches == 0

    opened = threading.Event()
    nxt = threading.Thread(target=lambda: (delivery.begin_batch(), opened.set()))
    nxt.start()
    assert not opened.wait(0.3)  # the next transaction does not begin before the commit returned
    producer.may_return.set()
    nxt.join(5)
    assert opened.is_set()
    assert producer.calls[-3:] == ["offsets:[(0, 3)]", "commit", "begin"]
    assert delivery.committed_batches == 1 and delivery.in_transaction


def test_a_commit_the_group_refused_is_aborted_and_comes_out_of_join_as_a_rewind():
    error = KafkaError(KafkaError.ILLEGAL_GENERATION, "the group moved on", txn_requires_abort=True)
    producer = RecordingProducer(fail_commit=error)
    delivery = ExactlyOnce(producer, Emitter(Sink(producer)))
    delivery.begin_batch()
    delivery.end_batch(lambda: [TopicPartition("raw", 0, 5)], Consumer())
    delivery.quiesce()  # a rebalance callback waits: the failure is kept, not raised inside poll
    assert producer.calls[-1] == "abort"
    with pytest.raises(TransactionAborted):
        delivery.begin_batch()
    assert "begin" not in producer.calls[1:]  # the loop rewinds first, then opens the next transaction
    delivery.begin_batch()  # the failure came out once
    assert producer.calls[-1] == "begin"


def test_a_commit_failed_by_a_refused_record_stops_the_process_instead_of_rewinding_forever():
    error = KafkaError(KafkaError._STATE, "a record failed", txn_requires_abort=True)
    producer = RecordingProducer(fail_commit=error)
    sink = Sink(producer)
    emitter = Emitter(sink)
    delivery = ExactlyOnce(producer, emitter)
    engine = PartitionEngine(0, MemoryStore())
    delivery.begin_batch()
    emitter.release(engine, committed_txn(engine))
    delivery.end_batch(lambda: [TopicPartition("raw", 0, engine.low_watermark())], Consumer())
    refused = producer.unacked.pop(1)  # the first change's report: served once the commit failed
    producer.poll = lambda timeout=None: refused(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    with pytest.raises(DeliveryFailed, match="Broker: Message size too large"):
        delivery.join()
    assert producer.calls[-1] == "abort"
