"""The processor loop: consume raw events, drive the engines, perform their actions, commit.

Per poll batch: apply every record to its partition's engine (data goes to that engine's
WriteBatch) and perform the actions it returns (dispatch.py), flush data once, release the batch's
committed transactions to the emitter, serve delivery reports, then checkpoint each engine (data,
metadata, completed index, emit cursors and input position in one WriteBatch). The committed input
offset is each partition's low watermark. Partition lifecycle lives in partitions.py, emission in
dispatch.py and emitter.py, the --available-now end in available_now.py.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from processor.core.engine import Filters, Finished
from processor.kafka.admin import ensure_topics, partition_count, producer_size_limit
from processor.kafka.delivery import TransactionAborted, for_guarantee, is_fenced
from processor.kafka.output_producer import output_producer
from processor.kafka.raw_fetch import raw_fetch
from processor.kafka.sink import KafkaSink
from processor.runtime.available_now import AvailableNow
from processor.runtime.config import ProcessorConfig
from processor.runtime.debezium_sink import make_output
from processor.runtime.dispatch import Dispatcher
from processor.runtime.emitter import Emitter
from processor.runtime.eos_recovery import EosRecovery
from processor.runtime.figures import RunSummary, snapshot
from processor.runtime.liveness import AssignmentWatch, AvailableNowTimeout
from processor.runtime.lost_state import LostStateError
from processor.runtime.offsets import OffsetCommitter
from processor.runtime.partitions import Partitions, Phase
from processor.runtime.stop import Stopping, StopSignal, set_current
from processor.store.rocks import RocksStore

log = structlog.get_logger(__name__)

_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
IDLE_WAIT_S = 0.1  # longest wait for input when nothing is in flight
ACK_WAIT_S = 0.002  # the same while emitted changes wait for acknowledgements
# A backlog is this many full poll batches in a row: the delivery may then defer its settlement
# (kafka/delivery.py). One or two full batches are the burst after a hiccup (a GC, a slow flush):
# deferring then only delayed ENDs, p99 ~100 ms at half the steady rate in the latency bench.
BACKLOG_BATCHES = 3
# A batch is checkpointed only once this long has passed since the last checkpoint, with or without a
# backlog: each costs a RocksDB write and a scan of what changed (at 10% of the steady rate, one per
# batch cost nearly as much CPU as applying them: session 48), and a crash re-reads from the last one,
# at most this much input. An idle loop's empty polls checkpoint what its last batch left.
CHECKPOINT_EVERY_S = 0.05
# SIGTERM bounds (stop.py): a poll (its rebalance callbacks: restore retries, revoke drains) and a
# batch's commit get these graces before a stop cuts them short; closing after a stop (drains,
# consumer close, producer flush) gets CLOSE_BUDGET_S from the signal.
POLL_GRACE_S = 5.0
COMMIT_GRACE_S = 10.0
CLOSE_BUDGET_S = 20.0

__all__ = ["AvailableNowTimeout", "LostStateError", "RunSummary", "Runner"]


class Runner:
    def __init__(self, cfg: ProcessorConfig, metrics=None):
        self.cfg = cfg
        self.metrics = metrics
        self.store = RocksStore(cfg.state_dir / "store")
        self.client = client = cfg.kafka_client()
        n_raw = partition_count(client, cfg.raw_topic)
        n_out = cfg.output_partitions or n_raw
        outputs = [cfg.changes_topic, cfg.transactions_topic, cfg.dlq_topic, cfg.outcomes_topic]
        ensure_topics(client, dict.fromkeys(outputs, n_out), cfg.replication_factor)
        # Outputs are acknowledged by settlement (kafka/delivery.py): librdkafka reports failures only.
        producer_conf: dict[str, Any] = {"acks": "all", "delivery.report.only.error": True}
        if cfg.guarantee == "exactly_once":
            producer_conf["transactional.id"] = cfg.transactional_id or f"{cfg.group}-{socket.gethostname()}"
        producer_conf.update(producer_size_limit(client, outputs))  # an oversized output fails alone
        self.producer_fatal: KafkaError | None = None
        self.producer, producer_kind = output_producer(
            client.producer_conf(**producer_conf, error_cb=self._producer_error), cfg.output_producer
        )
        log.info("producer.chosen", producer=producer_kind)
        max_record = int(client.producer_conf(**producer_conf).get("message.max.bytes", 1_000_000))  # chunk size
        self.sink = KafkaSink(
            self.producer, cfg.changes_topic, cfg.transactions_topic, cfg.dlq_topic, cfg.oversized, max_record
        )
        # The output mode (envelope: txbuffer | debezium) picks the emitter's sink.
        self.emitter = Emitter(make_output(cfg, self.sink, n_out), cfg.ordering, cfg.tombstones)
        self.delivery = for_guarantee(cfg.guarantee, self.producer, self.emitter, cfg.settle_interval_ms / 1000)
        self.dispatcher = Dispatcher(cfg, self.sink, self.emitter, self.producer)
        self.offsets = OffsetCommitter(cfg.raw_topic, self.sink, self.producer.poll)
        self.partitions = Partitions(
            cfg, client, self.store, Filters.from_config(cfg), self.dispatcher, self.delivery, self.offsets, metrics
        )
        self.consumer = client.consumer(
            cfg.group,
            **{
                "partition.assignment.strategy": "cooperative-sticky",
                # Bounded consumer prefetch (librdkafka's default queue is 64 MB per partition set).
                "fetch.max.bytes": 8 << 20,
                "queued.max.messages.kbytes": 16384,
                "queued.min.messages": 20000,
                "on_commit": self.offsets.on_commit,
            },
        )
        self.offsets.consumer = self.consumer
        self.fetch, fetch_kind = raw_fetch(self.consumer, cfg.raw_topic, cfg.max_batch, cfg.raw_fetch)
        self.partitions.fetch = self.fetch  # routes each partition to it before assigning it
        log.info("fetch.chosen", fetch=fetch_kind)
        self.eos_recovery = EosRecovery(self.partitions, self.consumer, self.producer, metrics)
        self.watch = AssignmentWatch(
            cfg.group, cfg.raw_topic, cfg.unassigned_warn_ms, cfg.available_now_timeout_ms if cfg.available_now else 0
        )
        self.summary = RunSummary()
        self.stop_requested = False
        self.stop = StopSignal(self._request_stop)
        self._poll_section = self.stop.interruptible("poll", POLL_GRACE_S)
        self._commit_section = self.stop.interruptible("batch commit", COMMIT_GRACE_S)
        self._failed = False  # the loop ended by an exception: engines may be past the last commit
        self._last_commit = 0.0
        self._full_batches = 0  # full poll batches in a row
        self._last_checkpoint = 0.0

    @property
    def parts(self):
        return self.partitions.held

    # ------------------------------------------------------------------ loop

    def run(self) -> RunSummary:
        cfg = self.cfg
        started = time.monotonic()
        finish = (
            AvailableNow(self.client, cfg.raw_topic, self.consumer, self.partitions, self.dispatcher)
            if cfg.available_now
            else None
        )
        if finish is not None:
            self.partitions.read_to = finish.targets
            if self.delivery.commits_offsets_itself:  # exactly_once: each batch committed them
                finish.on_own_done = self._commit_offsets
        self.stop.install()
        set_current(self.stop)
        # The loop makes short-lived objects by the million and almost no reference cycles: the
        # cyclic collector ran every 700 allocations and scanned the startup heap (~15% of the
        # loop). Freeze what exists now and collect far less often; cycles are still collected.
        gc_thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        self.delivery.start()
        p = self.partitions
        self.consumer.subscribe([cfg.raw_topic], on_assign=p.on_assign, on_revoke=p.on_revoke, on_lost=p.on_lost)
        last_log = time.monotonic()
        error: BaseException | None = None
        try:
            while not self.stop_requested:
                # Return at the first record, not when max_batch are there (kafka/poll.py); while
                # released changes wait for their acks, wake often so END follows them promptly.
                wait_s = ACK_WAIT_S if self.emitter.queue else IDLE_WAIT_S
                lap = self.summary.phases.now()
                with self._poll_section:
                    runs, errors, taken = self.fetch.poll(cfg.max_batch, wait_s)
                self._process(runs, errors, taken, self.summary.phases.lap("poll", lap))
                now = time.monotonic()
                self.watch.update(bool(p.held), now)
                if now - self._last_commit >= cfg.commit_interval_ms / 1000:
                    lap = self.summary.phases.now()
                    self.summary.sample_peaks(p.engines())
                    if cfg.max_open_age_ms:
                        self._abandon_old_transactions()
                    if self.delivery.commits_offsets_itself:
                        self._commit_offsets()
                    self._last_commit = now
                    if self.metrics is not None:
                        self.metrics.update(self.snapshot())
                    self.summary.phases.lap("housekeeping", lap)
                if now - last_log >= 5:
                    last_log = now
                    self._log_progress(now - started)
                if finish is not None and finish.reached():
                    if not self._open_batch(produce=False):  # the last batch's commit was aborted
                        continue
                    if cfg.max_open_age_ms:  # the retention policy also applies to what this run read last
                        self._abandon_old_transactions()
                        if not self._end_batch_now():  # exactly_once: its dead letters are committed
                            continue
                    with self.stop.interruptible("final drain", COMMIT_GRACE_S):
                        self.dispatcher.drain(timeout_s=60)
                    p.checkpoint_all(spill_all=True)
                    if self.delivery.commits_offsets_itself and not self._final_commit():
                        continue  # a rebalance is under way: decide again once it is over
                    log.info("run.available_now_done")
                    break
        except Stopping as exc:  # a SIGTERM cut a long wait short (stop.py)
            self._failed = True
            log.warning("run.stopped", reason=str(exc))
        except BaseException as exc:
            self._failed = True
            error = exc
            raise
        finally:
            gc.set_threshold(*gc_thresholds)
            gc.unfreeze()
            self.summary.seconds = time.monotonic() - started
            try:
                self.close()
            except Exception as close_error:
                if error is None:
                    raise
                # The loop's error propagates (a SystemError out of a rebalance callback would hide
                # it from the exit codes); what closing hit is chained to it, where is_fenced looks.
                log.warning("run.close_failed", error=repr(close_error), after=repr(error))
                if error.__cause__ is None:
                    error.__cause__ = close_error
            finally:
                self.stop.uninstall()  # also drops the handlers' reference to this runner
                set_current(None)
            fatal = self.producer_fatal
            if error is not None and fatal is not None and not is_fenced(error):
                # The producer's fatal error is why the loop failed, whatever surfaced first (a
                # flush can fail with a bare SystemError once a newer instance fenced this one):
                # name it, so the exit code says fenced (5).
                raise KafkaException(fatal) from error
        return self.summary

    def _producer_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served by poll and flush). A fatal error ends the producer:
        kept, and raised as the cause if the loop fails; the others are logged and retried."""
        if err.fatal() and self.producer_fatal is None:
            self.producer_fatal = err
            log.error("producer.fatal", error=str(err), fenced=err.code() in _FENCED_CODES)
        elif not err.fatal():
            log.warning("producer.error", error=str(err))

    def _request_stop(self, *_: object) -> None:
        if not self.stop_requested:
            log.info("run.stop_requested")
        self.stop_requested = True

    def _process(self, runs: dict, errors: list, taken: int, lap: tuple[float, float]) -> None:
        """One poll batch: {partition: its records}, the consumer errors, and how many records."""
        p, dispatcher, clock = self.partitions, self.dispatcher, self.summary.phases
        # Transactions a previous run left committed-but-unfinished go out before anything this
        # batch commits (commit order), and before this batch can add to engine.pending.
        if p.to_resume and not self._open_batch():
            return
        p.resume_pending()
        for err in errors:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consume.error", error=str(err))
        performed = []
        for q, run in runs.items():
            state = p.held.get(q)
            if state is None or (state.phase is not Phase.RUNNING and state.phase is not Phase.RESTORING):
                continue
            actions = state.engine.apply_records(run)
            if actions:
                performed.append((state.engine, actions))
        lap = clock.lap("apply", lap)
        # Only now may the actions produce: exactly_once's last commit ran while this batch was
        # polled and applied (delivery.py), and its outputs go in the next Kafka transaction.
        if not self._open_batch(produce=bool(taken or dispatcher.busy)):
            return
        lap = clock.lap("commit_wait", lap)
        for engine, actions in performed:
            dispatcher.perform(engine, actions)
        self.summary.events += taken
        self._full_batches = self._full_batches + 1 if taken >= self.cfg.max_batch else 0
        backlog = self._full_batches >= BACKLOG_BATCHES
        dispatcher.release_committed()
        dispatcher.release_held({q: st.engine.watermark for q, st in p.held.items()})
        lap = clock.lap("release", lap)
        # The settlement sends what the release produced (below a backlog without waiting out
        # linger.ms: kafka/delivery.py); the checkpoint follows, while the broker works on it.
        with self._commit_section:
            self.delivery.end_batch(self._low_watermarks, self.consumer, backlog)
        if dispatcher.take_dead_letters() and self.delivery.commits_offsets_itself:
            self.sink.flush_dead_letters()  # durable before the offsets behind them are persisted
        lap = clock.lap("settle", lap)
        if time.monotonic() - self._last_checkpoint >= CHECKPOINT_EVERY_S:
            self._checkpoint(lap)

    def _checkpoint(self, lap: tuple[float, float]) -> None:
        self.partitions.checkpoint_all()  # transactions still in flight stay staged (PartitionEngine._spill_due)
        self._last_checkpoint = time.monotonic()
        self.summary.phases.lap("checkpoint", lap)

    def _open_batch(self, produce: bool = True) -> bool:
        """exactly_once: wait for the previous batch's commit and, to produce, open this batch's
        Kafka transaction. False when that commit was aborted: every held partition was rewound to
        the committed offsets, and what this batch applied is dropped."""
        try:
            with self._commit_section:
                if produce:
                    self.delivery.begin_batch()
                else:
                    self.delivery.join()
        except TransactionAborted as exc:
            self.eos_recovery.recover(exc.args[0])
            return False
        return True

    def _end_batch_now(self) -> bool:
        """End the batch that outputs made outside _process belong to, and wait for its commit
        (exactly_once: a Kafka transaction that nothing else would commit before the run ends).
        False when the commit was aborted and the partitions rewound."""
        with self._commit_section:
            self.delivery.end_batch(self._low_watermarks, self.consumer)
        return self._open_batch(produce=False)

    def _abandon_old_transactions(self) -> None:
        """Retention policy: transactions open longer than max_open_age_ms (source time) are dropped
        with a dead letter, so none holds the low watermark and the buffer forever."""
        if not self._open_batch():  # exactly_once: the dead letters go in the next batch's transaction
            return
        for engine in self.partitions.engines():
            actions = engine.abandon_older_than(self.cfg.max_open_age_ms)
            for action in actions:
                if isinstance(action, Finished):
                    log.warning("txn.abandoned", partition=engine.partition, xid=action.xid)
            self.dispatcher.perform(engine, actions)
        self.dispatcher.take_dead_letters()
        self.sink.flush_dead_letters()

    def _low_watermarks(self) -> list[TopicPartition]:
        return [TopicPartition(self.cfg.raw_topic, q, lw) for q, lw in self.partitions.low_watermarks().items()]

    def _commit_offsets(self, force: bool = False, asynchronous: bool = True) -> None:
        self._last_commit = time.monotonic()
        self.offsets.commit(self.partitions.low_watermarks(), force, asynchronous)

    def _final_commit(self) -> bool:
        """Commit every held low watermark synchronously; False when the group is rebalancing (the
        broker refuses commits then: seen on Apache Kafka when a member joins or dies at the end)."""
        try:
            self._commit_offsets(force=True, asynchronous=False)
        except KafkaException as exc:
            log.warning("run.available_now_commit_retry", error=str(exc))
            return False
        return True

    def _log_progress(self, elapsed: float) -> None:
        snap = self.snapshot()
        log.info(
            "progress",
            events=self.summary.events,
            events_per_s=round(self.summary.events / max(elapsed, 1e-9)),
            **{k: v for k, v in snap.items() if k != "partitions"},
        )
        if self.metrics is not None:
            self.metrics.update(snap)

    def snapshot(self) -> dict:
        """Point-in-time figures for logs, metrics and `txbuffer status`."""
        return snapshot(
            self.partitions.held,
            self.consumer,
            self.cfg.raw_topic,
            self.cfg.ordering,
            **self.dispatcher.figures(),
            **self.watch.figures(),
        )

    def close(self) -> None:
        """Drain, checkpoint, leave the group, flush. After a stop every wait here is bounded by what
        is left of CLOSE_BUDGET_S; a wait past it is cut short (stop.py) and the close goes on."""
        self.partitions.closing = True
        # exactly_once: after a failed or interrupted batch the engines are past the last committed
        # Kafka transaction, so the revoke must not commit their low watermarks, and the producer
        # (maybe inside a transactional call that never returns) is not used again.
        abandon = self._failed and not self.delivery.commits_offsets_itself
        if not abandon:
            try:
                with self._closing_step("last commit"):
                    self.delivery.join()
            except TransactionAborted as exc:  # a restart rewinds to the committed offsets
                log.warning("run.last_commit_aborted", error=str(exc))
                abandon = True
        try:
            if abandon:
                self._abandon_held()
                self.producer.poll(0)  # raises a fatal producer error (fenced: exit 5) that caused the failure
            else:
                with self._closing_step("close drain") as budget:
                    self.dispatcher.drain(timeout_s=budget)
                self.partitions.checkpoint_all(spill_all=True)
        finally:
            self._finalise_summary()
            closed = False
            try:
                with self._closing_step("consumer close"):
                    closed = self._close_consumer()  # revokes: commits each held partition's low watermark
            finally:
                if not abandon:
                    with self._closing_step("producer flush") as budget:
                        self.producer.flush(budget)
                if closed:
                    self.store.close()
                else:  # the revoke may still run on the close thread: leave the store to the WAL
                    log.warning("run.store_left_open", reason="consumer close cut short")

    def _close_consumer(self) -> bool:
        """consumer.close() on a thread of its own, waited for in slices that a stop's grace can cut
        (Stopping): librdkafka's close waits without a timeout for its requests to a hung broker
        (seen: > 90 s with the broker SIGSTOPped). True once it returned."""
        self.fetch.close()  # its hold on the consumer's queues goes first (librdkafka's rule)
        done = threading.Event()
        failure: list[BaseException] = []

        def close() -> None:
            try:
                self.consumer.close()
            except BaseException as exc:  # handed to the main thread
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=close, name="consumer-close", daemon=True).start()
        while not done.wait(0.1):
            pass
        if failure:
            raise failure[0]
        return True

    def _closing_step(self, what: str) -> _ClosingStep:
        """A close step: bounded by the stop's remaining budget once a stop was requested."""
        return _ClosingStep(self.stop, what)

    def _abandon_held(self) -> None:
        """Forget every held partition without a commit: the next owner starts from the last
        committed batch's offsets (what a SIGKILL would leave)."""
        held = sorted(self.partitions.held)
        for p in held:
            state = self.partitions.held.pop(p)
            if p in self.partitions.to_resume:
                self.partitions.to_resume.remove(p)
            if state.engine is not None:
                self.dispatcher.drop_partition(state.engine)
            if state.phase is not Phase.REVOKING:
                state.move(Phase.REVOKING)
            state.move(Phase.CLOSED)
        if held:
            log.warning("run.partitions_abandoned", partitions=held, reason="exactly_once batch not committed")

    def _finalise_summary(self) -> None:
        s = self.summary
        s.peak_buffered_bytes = max(s.peak_buffered_bytes, sum(e.buffered_bytes() for e in self.partitions.engines()))
        s.changes_emitted = self.emitter.changes_emitted
        s.add_engine_counts(self.partitions.engines())
        s.restores = self.partitions.restores
        s.lost_events = self.partitions.lost_events
        s.settling_flushes = getattr(self.delivery, "settling_flushes", 0)
        s.deferred_settlements = getattr(self.delivery, "deferred_settlements", 0)
        log.info(
            "run.phases",
            **s.phases.seconds(),
            settling_flushes=s.settling_flushes,
            deferred_settlements=s.deferred_settlements,
            stalls=s.phases.stall_list(),
        )


class _ClosingStep:
    """`with` one close step: yields its time budget (30 s, or what is left of the stop's budget)
    and swallows Stopping, so the remaining steps still run."""

    def __init__(self, stop: StopSignal, what: str):
        self.stop, self.what = stop, what
        self.section: Any = None

    def __enter__(self) -> float:
        grace = self.stop.remaining(CLOSE_BUDGET_S, CLOSE_BUDGET_S)  # a stop during the step: this long
        self.section = self.stop.interruptible(self.what, max(grace, 1.0))
        self.section.__enter__()
        return self.stop.remaining(CLOSE_BUDGET_S, 30.0)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        self.section.__exit__(kind, exc, tb)
        if kind is Stopping:
            log.warning("run.close_step_cut", step=self.what, reason=str(exc))
            return True
        return False
