"""Delivery guarantees: when outputs count as written and when input offsets are committed.

Both acknowledge outputs by settlement, not by a delivery report per record: the producer runs
with delivery.report.only.error, and once its queue is empty (len(producer) == 0, or a flush that
returned 0) every record produced before is delivered, or its failure was reported and stops the
process. The emitter then counts every output sent before as acknowledged (emitter.py).

at_least_once_dedup: outputs stream continuously; the low watermark is committed periodically. A
crash re-emits at most what followed the last commit, with the same event_ids. A batch that sent
outputs ends with a flush (librdkafka skips linger.ms for it: one round trip), which settles them:
their cursors move and their ENDs go out. Measured against settling only when the queue drains on
its own or the oldest output waited 20 ms, the flush per batch used no more CPU per event and gave a
lower commit-to-END latency (issue 14). With NativeProducer the batch waits for nothing: once the
release has produced the batch's outputs, send_now has librdkafka send them without waiting out
linger.ms, one request per partition, and each END is held by the producer as soon as its changes
are sent (NativeProducer.hold, emitter.hold_ends): the thread that serves the last of their
acknowledgements hands it to librdkafka, and a later batch settles it by its epoch (the loop comes
back within runner.ACK_WAIT_S while any wait). Sending as the release produced (send_now before
it) had the producer's thread send while the loop still released: at half the steady rate it made
3.9k sendmsg calls a second against 2.7k, its work and the broker's took the two cores from the
release, and commit-to-END p50 was 1.4-1.7 ms higher in each of three alternated pairs (session
53). Before that, the batch's flush waited for the changes and then sent the ENDs: one round trip
per batch on the loop, and the ENDs of a batch's first transactions waited for its last.
confluent-kafka's Producer cannot send without waiting: there the flush waits for the
changes, and a second flush settles the ENDs within the batch.

Under a backlog (the poll returned full batches, runner.BACKLOG_BATCHES in a row: more are
waiting) the batch does not wait for the broker: the loop goes on to the next batch while
librdkafka delivers this one's outputs (the steady bench spent a fifth of its wall time waiting in
the flushes). With a producer that counts epochs (NativeProducer, kafka/settlement.py) each batch
is an epoch: the batch seals its outputs with it, and settles, without waiting, every earlier batch
whose outputs the broker has acknowledged by then, so ENDs go out and transactions finish a batch
or two later; past IN_FLIGHT_LIMIT records in flight the batch waits for the broker after all
(backpressure: what is in flight holds memory). confluent-kafka's Producer only tells an empty queue: there the flush is deferred to
the next batch, and to more batches in a row while the last settlement is younger than
settle_interval_ms (20 ms by default; 0 turns it off; one batch may always defer, as one
5,000-record batch can take longer than the interval). A checkpoint then finds released
transactions in flight: it leaves them staged, and a crash re-reads and re-emits them, as
at_least_once allows (PartitionEngine._spill_due). A batch after one that was not full settles at
once, with the flushes, so below saturation (the latency bench's 10-50% levels: batches of 1-2k
records) END follows its changes by one round trip.

exactly_once: each poll batch is one Kafka transaction holding its outputs (changes, BEGIN/END,
dead letters) and the input offsets they imply (send_offsets_to_transaction). Every transaction
released in the batch is finished inside it, so an END never commits without its changes. Kafka
is then the only source of truth: on start the runner rebuilds every partition from the committed
offsets rather than trusting a local store that may be ahead of an aborted transaction.

The batch's commit (send_offsets_to_transaction, commit_transaction) runs on a thread while the
loop polls and applies the next batch; the loop waits for it (join) before the next batch
produces anything, so transactions never overlap. Rebalance callbacks wait for it too (quiesce)
and keep its failure for the loop: an aborted commit then rewinds every held partition
(eos_recovery) as an abort inside the batch did. No flush precedes the commit: commit_transaction
delivers every record of the transaction or fails it whole, and a record the broker refused is
reported as DeliveryFailed, not retried by a rewind.

librdkafka's transactional calls can block far past their timeout: send_offsets_to_transaction
waits forever when the group coordinator went away during the transaction (seen after a broker
SIGKILL and restart: the processor stalled, the group could not rebalance, SIGTERM went unheard;
confluentinc/librdkafka#5456, #5511). Each call here therefore runs with a hard deadline, and a
call that misses it raises TransactionStuck: the process exits (code 3) and its restart, with the
same transactional.id, fences the open transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from processor.kafka.admin import KafkaUnavailable
from processor.kafka.settlement import counts_epochs

log = structlog.get_logger(__name__)


class TransactionStuck(KafkaUnavailable):
    """A transactional call of the producer did not return by its hard deadline."""


# The consumer group moved on while the batch's transaction was open (a member joined, left or
# died): its offsets cannot commit, but the producer is sound. Anything fenced or fatal is not.
_REBALANCE = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID})
_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def is_fenced(exc: BaseException | None) -> bool:
    """True when another instance with this transactional.id took over (this one is a zombie),
    also when the fencing surfaced first and closing the runner raised something else after it."""
    seen = 0
    while exc is not None and seen < 10:
        error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if isinstance(error, KafkaError) and error.code() in _FENCED:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class TransactionAborted(KafkaException):
    """end_batch aborted the batch's Kafka transaction and the producer can go on (not fenced, not
    fatal): nothing of the batch is visible, so the caller rewinds to the committed offsets."""


class BoundedCall:
    """call() started on a helper thread; wait() for it at most deadline_s, TransactionStuck past it
    (the thread, blocked inside librdkafka, is abandoned: the caller must not use the producer
    again). Started and waited for at once by bounded_call, or later: a batch's commit runs while
    the loop goes on."""

    def __init__(self, what: str, call: Callable[[], Any]) -> None:
        self.what, self._call = what, call
        self._outcome: dict[str, Any] = {}
        self._worker = threading.Thread(target=self._run, name=f"txn-{what}", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        try:
            self._outcome["value"] = self._call()
        except BaseException as exc:  # handed to the waiting thread
            self._outcome["error"] = exc

    def wait(self, deadline_s: float) -> Any:
        self._worker.join(deadline_s)
        if self._worker.is_alive():
            log.error("exactly_once.stuck", call=self.what, waited_s=deadline_s)
            raise TransactionStuck(
                f"producer {self.what} did not return within {deadline_s:g}s (librdkafka ignores its timeout "
                "when the group coordinator went away mid-transaction); exiting so that a restart fences the "
                "transaction"
            )
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome.get("value")


def bounded_call(what: str, call: Callable[[], Any], deadline_s: float) -> Any:
    """call() in a helper thread, waited for at most deadline_s (BoundedCall)."""
    return BoundedCall(what, call).wait(deadline_s)


# at_least_once: how long the flush that ends a batch may block the loop (a broker outage: the next
# batch tries again, and nothing counts as acknowledged meanwhile).
SETTLE_FLUSH_TIMEOUT_S = 1.0
# Under a backlog a batch goes on without waiting for the broker while fewer records than this are in
# flight (about two batches' outputs in the steady bench: ~0.9 a raw event), else it waits (flushes):
# what is in flight holds memory, and a committed transaction still in flight at a checkpoint costs
# it more (a stored one's metadata is written again as its cursor moves). many_open (100k
# transactions of one change committed in a row: ~15k outputs a batch) took 50-90 MB more peak RSS
# and ~4x the checkpoint time with 20,000; with 10,000 it is back to its figures before the epochs.
IN_FLIGHT_LIMIT = 10_000


class AtLeastOnce:
    name = "at_least_once_dedup"
    trusts_local_store = True
    commits_offsets_itself = True

    def __init__(
        self,
        producer,
        emitter,
        flush_timeout_s: float = SETTLE_FLUSH_TIMEOUT_S,
        settle_interval_s: float = 0.0,
    ) -> None:
        self.producer, self.emitter = producer, emitter
        self.flush_timeout_s = flush_timeout_s
        self.settle_interval_s = settle_interval_s
        self.by_epoch = counts_epochs(producer)
        # NativeProducer: sends without waiting for the broker (send_now), and settles by epochs.
        self.sends_now = self.by_epoch and hasattr(producer, "send_now")
        # ... and holds each END until its changes are acknowledged (NativeProducer.hold), so that no
        # batch waits for the broker to send its ENDs (emitter.py; not for a sink without ENDs to hold).
        self.holds_ends = self.sends_now and hasattr(producer, "hold") and hasattr(emitter.sink, "hold_transaction")
        emitter.hold_ends = self.holds_ends
        self.settling_flushes = 0
        self.deferred_settlements = 0  # batches that did not wait for the broker
        self._last_settled = time.monotonic()
        self._deferred_last = False  # the last batch deferred its settlement

    def start(self) -> None:
        pass

    def begin_batch(self) -> None:
        pass

    def join(self) -> None:
        pass

    def quiesce(self) -> None:
        pass

    def standalone(self, produce: Callable[[], None]) -> None:
        """Outputs outside the poll loop (lost-state reports): produced and made durable now."""
        produce()
        self.producer.flush(30)

    def end_batch(self, offsets: Callable[[], list[TopicPartition]], consumer, backlog: bool = False) -> None:
        """Settle what the batch sent: at once, or under a backlog as far as the broker got."""
        emitter, producer = self.emitter, self.producer
        if emitter.unsettled and backlog and self.by_epoch:
            if len(producer) < IN_FLIGHT_LIMIT:
                if self.holds_ends:  # the batch's ENDs are held in advance(), and sealed with its changes
                    self._settle_by_holds(send_now=False)  # under a backlog linger.ms makes larger requests
                else:  # the ENDs advance() sends go in the next group: this batch's changes settle apart
                    producer.poll(0)  # takes in the reports; failures are reported before their epoch settles
                    emitter.seal(producer.next_epoch())
                    emitter.advance(through=producer.settled_epoch())
                self.deferred_settlements += 1
                return
            # Else the broker is behind: wait for it below, as the memory in flight would only grow.
        elif emitter.unsettled and backlog and self._may_defer():
            producer.poll(0)  # error callbacks
            emitter.advance()  # settles anyway if the queue happens to be empty
            if emitter.unsettled:
                self.deferred_settlements += 1
                self._deferred_last = True
                return
        if self.holds_ends and not backlog:
            self._settle_by_holds()
        elif self.sends_now and not backlog:
            self._settle_changes_send_ends()
        elif emitter.unsettled:
            # Serves the failure reports too: advance raises for any before a settlement counts.
            self.settling_flushes += 1
            settled = self.producer.flush(self.flush_timeout_s) == 0
            emitter.advance(settled=settled)
            if settled and emitter.unsettled:
                # The settlement released ENDs: settle them too, so their transactions finish in this
                # batch. Left to the next batch, they would be unfinished at this batch's checkpoint,
                # which then spills their staged changes to the store only to delete them a batch
                # later; and the flush sends the ENDs now, not after the producer's linger.
                self.settling_flushes += 1
                emitter.advance(settled=self.producer.flush(self.flush_timeout_s) == 0)
        else:
            self.producer.poll(0)  # error callbacks
            emitter.advance()
        self._last_settled = time.monotonic()
        self._deferred_last = False

    def _settle_by_holds(self, send_now: bool = True) -> None:
        """With ENDs held (NativeProducer.hold): no wait. The producer sends each END as its changes are
        acknowledged; this settles what the broker acknowledged so far, holds the ENDs the batch
        released and seals them with its changes. Below a backlog it also kicks the sending thread,
        which serves the acknowledgements that release the ENDs."""
        emitter, producer = self.emitter, self.producer
        producer.poll(0)  # failure reports first: advance raises for any before its epoch counts
        emitter.advance(through=producer.settled_epoch())
        if emitter.unsealed:
            emitter.seal(producer.next_epoch())
        if send_now and emitter.unsettled:
            producer.send_now()

    def _settle_changes_send_ends(self) -> None:
        """Below a backlog, with NativeProducer: wait for what the batch sent, then send the ENDs that
        released and go on. An earlier batch's ENDs settle here by their epoch, without a wait of their
        own. Not under a backlog past IN_FLIGHT_LIMIT: there the batch settles its ENDs too, as a
        stored transaction still pending at a checkpoint writes its metadata again (100k stored
        transactions committed in a row: session 40 measured that cost at 0.41x steady)."""
        emitter, producer = self.emitter, self.producer
        producer.poll(0)  # failure reports first: advance raises for any before its epoch counts
        emitter.advance(through=producer.settled_epoch())
        if emitter.unsealed:
            self.settling_flushes += 1
            emitter.advance(settled=producer.flush(self.flush_timeout_s) == 0)  # sends the ENDs
        if emitter.unsealed:
            emitter.seal(producer.next_epoch())
            producer.send_now()

    def _may_defer(self) -> bool:
        """One batch in a row may always defer (the interval on): a batch that alone takes longer
        than the interval (a slow machine: 60 ms per 5,000 records) would otherwise never defer.
        More in a row only while the last settlement is younger than the interval."""
        if self.settle_interval_s <= 0:
            return False
        return not self._deferred_last or time.monotonic() - self._last_settled < self.settle_interval_s


class ExactlyOnce:
    name = "exactly_once"
    trusts_local_store = False
    commits_offsets_itself = False

    def __init__(self, producer, emitter, flush_timeout_s: float = 60.0, stuck_grace_s: float = 15.0) -> None:
        self.producer, self.emitter = producer, emitter
        emitter.end_waits_for_acks = False  # END commits atomically with its changes
        self.flush_timeout_s = flush_timeout_s
        self.stuck_grace_s = stuck_grace_s  # past the call's own timeout: the call is stuck
        self.in_transaction = False
        self.committed_batches = 0
        self._commit: BoundedCall | None = None  # the last batch's commit, while it runs
        self._failure: BaseException | None = None  # how it ended, when a rebalance callback waited

    def _txn_call(self, what: str, *args: Any) -> Any:
        method = getattr(self.producer, what)
        return bounded_call(
            what, lambda: method(*args, self.flush_timeout_s), self.flush_timeout_s + self.stuck_grace_s
        )

    def start(self) -> None:
        self._txn_call("init_transactions")

    def standalone(self, produce: Callable[[], None]) -> None:
        self.quiesce()
        self.producer.begin_transaction()
        produce()
        self._txn_call("commit_transaction")

    def begin_batch(self) -> None:
        """Open the batch's Kafka transaction, once the previous batch's commit is over (join)."""
        self.join()
        if not self.in_transaction:
            self.producer.begin_transaction()
            self.in_transaction = True

    def end_batch(self, offsets: Callable[[], list[TopicPartition]], consumer, backlog: bool = False) -> None:
        """Finish every released transaction, then commit outputs and input offsets atomically, in
        the background: the loop goes on polling and applying the next batch meanwhile, and waits
        for the commit (join) before it produces again."""
        if not self.in_transaction:
            return
        self.in_transaction = False
        # ENDs went out with their changes (end_waits_for_acks is off), and commit_transaction
        # delivers every record of the transaction or fails it whole: the released transactions
        # finish now, without a flush of their own. If the commit fails, the abort takes the batch
        # back and eos_recovery rebuilds the engines from the committed offsets.
        for _ in range(3):
            self.emitter.advance(settled=True)
            if not self.emitter.queue:
                break
        else:
            raise RuntimeError(f"{len(self.emitter.queue)} released transactions did not finish in the batch")
        position, metadata = offsets(), consumer.consumer_group_metadata()
        producer, timeout_s = self.producer, self.flush_timeout_s

        def commit() -> None:  # both calls wait for the broker, not the CPU: librdkafka releases the GIL
            producer.send_offsets_to_transaction(position, metadata, timeout_s)
            producer.commit_transaction(timeout_s)

        self._commit = BoundedCall("commit", commit)

    def join(self) -> None:
        """Wait for the last batch's commit. Raises TransactionAborted when it was aborted and the
        producer can go on, the error itself when not (fenced, fatal, stuck)."""
        self.quiesce()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def quiesce(self) -> None:
        """Wait for the last batch's commit and keep how it ended for the next join: rebalance
        callbacks call this, so nothing there uses the producer while it commits, and a failure
        reaches the loop, which can rewind, instead of escaping from inside the consumer's poll."""
        commit, self._commit = self._commit, None
        if commit is None:
            return
        try:
            commit.wait(2 * self.flush_timeout_s + self.stuck_grace_s)  # two calls, each with its timeout
            self.committed_batches += 1
        except TransactionStuck:
            raise  # the producer is not used again: the process exits and its restart fences
        except KafkaException as exc:
            self._failure = self._aborted(exc)
        except BaseException as exc:
            self._failure = exc

    def _aborted(self, exc: KafkaException) -> BaseException:
        """Abort after a failed commit; the exception for join to raise."""
        error = exc.args[0]
        if not (error.txn_requires_abort() or error.code() in _REBALANCE):
            return exc  # the runner stops; a restart rebuilds from the committed offsets
        recoverable = not error.fatal() and error.code() not in _FENCED
        (log.warning if recoverable else log.error)("exactly_once.abort", error=str(error))
        # A record the broker refused fails the commit too: a delivery failure, which a rewind would
        # only repeat. Its report is served before the abort (whose purge reports every unsent
        # record as failed: eos_recovery discards those), and the emitter raises DeliveryFailed.
        self.producer.poll(0)
        refused: Exception | None = None
        try:
            self.emitter.raise_failures()
        except Exception as failed:
            refused = failed
        try:
            self._txn_call("abort_transaction")
        except KafkaException as abort_error:
            return abort_error
        if refused is not None:
            return refused
        return TransactionAborted(error) if recoverable else exc


def for_guarantee(guarantee: str, producer, emitter, settle_interval_s: float = 0.0):
    if guarantee == "exactly_once":
        return ExactlyOnce(producer, emitter)
    return AtLeastOnce(producer, emitter, settle_interval_s=settle_interval_s)
