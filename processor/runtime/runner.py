"""The processor loop: consume raw events, drive the engines, emit, persist, commit low watermarks.

Per poll batch: apply every record to its partition's engine (data goes to that engine's
WriteBatch), flush data once, release the batch's committed transactions to the emitter, serve
delivery reports, then checkpoint each engine (data, metadata, completed index, emit cursors and
input position in one WriteBatch). The committed input offset is each partition's low watermark.
"""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass, field

import structlog
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from processor.core import events as ev
from processor.core.engine import Committed, DeadLetter, Filters, PartitionEngine
from processor.core.ordering import GlobalOrder
from processor.core.txn import Txn
from processor.kafka.clients import (
    CONSUMER_DEFAULTS,
    end_offsets,
    ensure_topics,
    make_producer,
    partition_count,
)
from processor.kafka.delivery import for_guarantee
from processor.kafka.sink import KafkaSink
from processor.runtime.config import ProcessorConfig
from processor.runtime.emitter import Emitter
from processor.runtime.index_rebuild import completed_from_records
from processor.runtime.offsets import OffsetCommitter
from processor.runtime.partitions import PartitionState, Phase, restore_partition
from processor.store.rocks import RocksStore

log = structlog.get_logger(__name__)


class LostStateError(RuntimeError):
    """The committed low watermark is below the raw topic's log start: input was deleted unread."""


@dataclass
class RunSummary:
    events: int = 0
    committed: int = 0
    rolled_back: int = 0
    changes_emitted: int = 0
    dead_letters: int = 0
    late_events: int = 0
    filtered_txns: int = 0
    peak_buffered_bytes: int = 0
    peak_open_txns: int = 0
    lost_events: int = 0
    seconds: float = 0.0
    restores: dict = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


class Runner:
    def __init__(self, cfg: ProcessorConfig, metrics=None):
        self.cfg = cfg
        self.metrics = metrics
        self.filters = Filters.from_config(cfg)
        self.store = RocksStore(cfg.state_dir / "store")
        self.parts: dict[int, PartitionState] = {}
        self.to_resume: list[int] = []
        n_raw = partition_count(cfg.bootstrap, cfg.raw_topic)
        n_out = cfg.output_partitions or n_raw
        ensure_topics(
            cfg.bootstrap,
            {cfg.changes_topic: n_out, cfg.transactions_topic: n_out, cfg.dlq_topic: n_out, cfg.outcomes_topic: n_out},
        )
        producer_conf = {"acks": "all"}
        if cfg.guarantee == "exactly_once":
            producer_conf["transactional.id"] = cfg.transactional_id or f"{cfg.group}-{socket.gethostname()}"
        self.producer = make_producer(cfg.bootstrap, **producer_conf)
        self.sink = KafkaSink(self.producer, cfg.changes_topic, cfg.transactions_topic, cfg.dlq_topic)
        self.emitter = Emitter(self.sink, cfg.ordering, cfg.tombstones)
        self.delivery = for_guarantee(cfg.guarantee, self.producer, self.emitter)
        self.orderer = GlobalOrder(cfg.max_hold_ms, cfg.stall_warn_ms) if cfg.ordering == "global" else None
        self.offsets = OffsetCommitter(cfg.raw_topic, self.sink, self.producer.poll)
        self.consumer = Consumer(
            {
                "bootstrap.servers": cfg.bootstrap,
                "group.id": cfg.group,
                "partition.assignment.strategy": "cooperative-sticky",
                **CONSUMER_DEFAULTS,
                # Bounded consumer prefetch (librdkafka's default queue is 64 MB per partition set).
                "fetch.max.bytes": 8 << 20,
                "queued.max.messages.kbytes": 16384,
                "queued.min.messages": 20000,
                "on_commit": self.offsets.on_commit,
            }
        )
        self.offsets.consumer = self.consumer
        self.summary = RunSummary()
        self.stop_requested = False
        self._last_commit = 0.0
        self._targets: dict[int, int] | None = None
        self._closing = False
        self._last_rebalance = time.monotonic()
        # A dead member keeps its partitions until its session times out and the group rebalances
        # (Tansu takes a while longer): without proof those partitions are done, wait well past it.
        self._settle_s = 3 * CONSUMER_DEFAULTS["session.timeout.ms"] / 1000 + 2
        self._last_elsewhere_check = 0.0

    # ------------------------------------------------------------------ rebalance

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._last_rebalance = time.monotonic()
        if self._closing:
            return  # leaving the group: take nothing on
        # A hung broker (seen: a 30 s SIGSTOP) times out the look-ups below; retry rather than exit.
        deadline = time.monotonic() + 300
        while True:
            try:
                staged = self._restore_partitions(consumer, partitions)
                break
            except (KafkaException, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("partition.assign_retry", partitions=[tp.partition for tp in partitions], error=str(exc))
                time.sleep(1.0)
        for state, source in staged.values():
            self.parts[state.partition] = state
            self.summary.restores[state.partition] = source
            self.to_resume.append(state.partition)
        consumer.incremental_assign(
            [TopicPartition(self.cfg.raw_topic, p, state.engine.next_offset) for p, (state, _) in staged.items()]
        )

    def _restore_partitions(self, consumer: Consumer, partitions: list[TopicPartition]) -> dict:
        """{partition: (state, source)} with engines restored or rebuilt; nothing is taken on until all are."""
        committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
        staged = {}
        rebuild: dict[int, tuple[PartitionEngine, int]] = {}
        for tp in partitions:
            p = tp.partition
            state = PartitionState(p)
            state.move(Phase.RESTORING)
            low, _ = consumer.get_watermark_offsets(TopicPartition(self.cfg.raw_topic, p), timeout=10)
            c = committed.get(p)
            c = None if c is None or c < 0 or c == OFFSET_INVALID else c
            restored = restore_partition(
                p,
                self.store,
                self.filters,
                self.cfg.completed_index_min_entries,
                c,
                low,
                trust_local=self.delivery.trusts_local_store,
            )
            engine, start = restored.engine, restored.start_offset
            if start < low:
                engine, start = self._lost_state(
                    p,
                    start,
                    low,
                    (
                        f"raw partition {p}: low watermark {start} is below log start {low}; {low - start} events "
                        f"of open transactions were deleted before they were processed"
                    ),
                    lost=low - start,
                )
            elif start > self._listed_end(consumer, p):
                end = end_offsets(self.cfg.bootstrap, self.cfg.raw_topic, group=self.cfg.group + "-probe").get(p, 0)
                if start > end:
                    # The topic was recreated or truncated under us: our position does not exist.
                    engine, start = self._lost_state(
                        p,
                        start,
                        low,
                        (
                            f"raw partition {p}: position {start} is beyond the log end {end}; the raw topic was "
                            f"recreated or truncated, the state for it no longer matches the log"
                        ),
                        lost=start - end,
                    )
            if engine is not restored.engine or restored.source != "local":
                rebuild[p] = (engine, start)
            engine.next_offset = start
            state.engine = engine
            staged[p] = (state, restored.source)
            log.info(
                "partition.assigned",
                partition=p,
                source=restored.source,
                start_offset=start,
                committed=c,
                open_txns=len(restored.engine.open),
                pending=len(restored.engine.pending),
            )
        if rebuild:
            self._rebuild_completed_index(rebuild)
        return staged

    def _rebuild_completed_index(self, rebuild: dict[int, tuple[PartitionEngine, int]]) -> None:
        found = completed_from_records(
            self.cfg.bootstrap,
            self.cfg.transactions_topic,
            self.cfg.outcomes_topic,
            {p: start for p, (_, start) in rebuild.items()},
            keep_below=self.cfg.completed_index_min_entries,
        )
        for p, (engine, _) in rebuild.items():
            for xid, offset, outcome in found[p]:
                engine.mark_completed(xid, offset, outcome)

    def _listed_end(self, consumer: Consumer, partition: int) -> int:
        """ListOffsets' end: exact on Kafka, an under-estimate on Tansu (so only a hint to look closer)."""
        _, high = consumer.get_watermark_offsets(TopicPartition(self.cfg.raw_topic, partition), timeout=10)
        return high

    def _lost_state(
        self, partition: int, start: int, log_start: int, reason: str, lost: int
    ) -> tuple[PartitionEngine, int]:
        """Never continue silently: report RESYNC_REQUIRED and a dead letter, then fail or skip."""
        log.error(
            "partition.lost_state",
            partition=partition,
            low_watermark=start,
            log_start=log_start,
            lost=lost,
            policy=self.cfg.lost_state_policy,
            reason=reason,
        )
        resync = {
            "status": "RESYNC_REQUIRED",
            "id": f"partition-{partition}",
            "commit_scn": -1,
            "ts_ms": 0,
            "thread": 1,
            "event_count": lost,
            "data_collections": None,
            "input_partition": partition,
            "commit_offset": start,
            "ordering": self.cfg.ordering,
            "reason": reason,
        }

        def report() -> None:
            self.sink.send_transaction(
                f"partition-{partition}".encode(), ev.encode_transaction(resync), lambda err: None
            )
            self.sink.dead_letter(self.cfg.raw_topic, partition, start, None, None, reason)

        self.delivery.standalone(report)
        if self.metrics is not None:
            self.metrics.lost_state(partition, lost)
        if self.cfg.lost_state_policy == "fail":
            raise LostStateError(reason)
        self.summary.lost_events += lost
        # Skip: start over at the log start with empty state (what was open is gone with its events).
        PartitionEngine.wipe(partition, self.store)
        engine = PartitionEngine(partition, self.store, self.filters, self.cfg.completed_index_min_entries)
        engine.next_offset = log_start
        return engine, log_start

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._last_rebalance = time.monotonic()
        revoked = [tp.partition for tp in partitions if tp.partition in self.parts]
        for p in revoked:
            self.parts[p].move(Phase.REVOKING)
        # Finish what is in flight, so the committed low watermark is as far as it can be.
        self._drain(timeout_s=30)
        offsets = []
        for p in revoked:
            state = self.parts.pop(p)
            state.engine.checkpoint()
            offsets.append(TopicPartition(self.cfg.raw_topic, p, state.engine.low_watermark()))
            self.emitter.drop_partition(state.engine)
            if self.orderer is not None:
                self.orderer.drop_partition(p)
            state.move(Phase.CLOSED)
            log.info("partition.revoked", partition=p, low_watermark=offsets[-1].offset)
        if offsets and self.offsets.outputs_durable():
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except Exception as exc:  # the group may already have moved on; the store still has it
                log.warning("partition.revoke_commit_failed", error=str(exc))
        elif offsets:
            # Outcome records or dead letters are not acknowledged yet (e.g. the broker is hung):
            # the next owner re-reads from the older watermark rather than past unrecorded outcomes.
            log.warning(
                "partition.revoke_commit_skipped",
                unacked_outcomes=self.sink.outcomes_unacked,
                unacked_dead_letters=self.sink.dlq_unacked,
            )
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            state = self.parts.pop(tp.partition, None)
            if state is not None:
                self.emitter.drop_partition(state.engine)
                if self.orderer is not None:
                    self.orderer.drop_partition(tp.partition)
                log.warning("partition.lost", partition=tp.partition)
        consumer.incremental_unassign(partitions)

    # ------------------------------------------------------------------ loop

    def run(self) -> RunSummary:
        cfg = self.cfg
        started = time.monotonic()
        if cfg.available_now:
            self._targets = end_offsets(cfg.bootstrap, cfg.raw_topic, group=cfg.group + "-probe")
            log.info("run.available_now", targets=self._targets)
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.delivery.start()
        self.consumer.subscribe(
            [cfg.raw_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        last_log = time.monotonic()
        try:
            while not self.stop_requested:
                msgs = self.consumer.consume(cfg.max_batch, 0.1)
                self._process(msgs)
                now = time.monotonic()
                if now - self._last_commit >= cfg.commit_interval_ms / 1000:
                    self._sample_peaks()
                    if cfg.max_open_age_ms:
                        self._abandon_old_transactions()
                    if self.delivery.commits_offsets_itself:
                        self._commit_offsets()
                    self._last_commit = now
                    if self.metrics is not None:
                        self.metrics.update(self.snapshot())
                if now - last_log >= 5:
                    last_log = now
                    self._log_progress(now - started)
                if self._targets is not None and self._reached_targets():
                    self._drain(timeout_s=60)
                    self._checkpoint_all()
                    if self.delivery.commits_offsets_itself:
                        self._commit_offsets(force=True, asynchronous=False)
                    log.info("run.available_now_done")
                    break
        finally:
            self.summary.seconds = time.monotonic() - started
            for sig, handler in previous.items():  # also drops the handlers' reference to this runner
                signal.signal(sig, handler)
            self.close()
        return self.summary

    def _request_stop(self, *_: object) -> None:
        self.stop_requested = True

    def _process(self, msgs) -> None:
        if msgs or self.to_resume or self.emitter.queue or (self.orderer is not None and self.orderer.heap):
            self.delivery.begin_batch()
        # Transactions a previous run left committed-but-unfinished go out before anything this
        # batch commits (commit order), and before this batch can add to engine.pending.
        self._resume_pending()
        committed: list[tuple[PartitionEngine, Txn]] = []
        dead = False
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume.error", error=str(err))
                continue
            state = self.parts.get(msg.partition())
            if state is None or (state.phase is not Phase.RUNNING and state.phase is not Phase.RESTORING):
                continue
            engine = state.engine
            offset = msg.offset()
            if offset < engine.next_offset:
                continue  # already applied (re-delivered after a seek)
            for action in engine.apply(offset, msg.key(), msg.value()):
                if isinstance(action, Committed):
                    committed.append((engine, action.txn))
                elif isinstance(action, DeadLetter):
                    dead = True
                    log.warning(
                        "event.dead_letter", partition=action.partition, offset=action.offset, reason=action.reason
                    )
                    self.sink.dead_letter(
                        self.cfg.raw_topic, action.partition, action.offset, action.key, action.value, action.reason
                    )
        self.summary.events += len(msgs)
        self._publish_outcomes()
        if committed:
            for engine in {id(e): e for e, _ in committed}.values():
                engine.flush_data()
            for engine, txn in committed:
                self._commit_ready(engine, txn)
        if self.orderer is not None and self.orderer.heap:
            watermarks = {p: st.engine.watermark for p, st in self.parts.items()}
            for engine, txn in self.orderer.ready(watermarks, _now_ms()):
                self.emitter.release(engine, txn)
        self.delivery.end_batch(self._low_watermarks, self.consumer)
        if dead and self.delivery.commits_offsets_itself:
            self.sink.flush_dead_letters()  # durable before the offsets behind them are persisted
        self._checkpoint_all()

    def _publish_outcomes(self) -> None:
        for p, state in self.parts.items():
            engine = state.engine
            if engine.outcomes:
                for xid, offset, outcome in engine.outcomes:
                    self.sink.outcome(self.cfg.outcomes_topic, xid, p, offset, outcome)
                engine.outcomes.clear()

    def _commit_ready(self, engine: PartitionEngine, txn: Txn) -> None:
        """One dispatch path: straight to the emitter, or through the global order."""
        if self.orderer is None:
            self.emitter.release(engine, txn)
        else:
            self.orderer.hold(engine, txn, _now_ms())

    def _resume_pending(self) -> None:
        """Re-emit transactions a previous run committed but did not finish (from the emit cursor)."""
        while self.to_resume:
            state = self.parts.get(self.to_resume.pop())
            if state is None:
                continue
            state.move(Phase.RUNNING)
            for txn in list(state.engine.pending.values()):
                log.info("txn.resume_emit", partition=state.partition, xid=txn.xid, after_seq=txn.acked_seq)
                self._commit_ready(state.engine, txn)

    def _checkpoint_all(self) -> None:
        for state in self.parts.values():
            state.engine.checkpoint()

    def _drain(self, timeout_s: float) -> None:
        """Wait until every released transaction is fully acknowledged."""
        deadline = time.monotonic() + timeout_s
        while self.emitter.queue and time.monotonic() < deadline:
            self.producer.poll(0.05)
            self.emitter.advance()
        self.producer.flush(max(0.0, deadline - time.monotonic()))
        self.emitter.advance()

    def _abandon_old_transactions(self) -> None:
        """Retention policy: a transaction open longer than max_open_age_ms (source time) is dropped
        with a dead letter, so it cannot hold the low watermark and the buffer forever."""
        for p, state in self.parts.items():
            engine = state.engine
            for txn in engine.too_old(self.cfg.max_open_age_ms):
                reason = (
                    f"abandoned: transaction {txn.xid} open for {engine.last_ts_ms - txn.first_ts_ms} ms "
                    f"(source time) > max_open_age_ms={self.cfg.max_open_age_ms}; {txn.events} buffered "
                    f"events dropped; a later COMMIT will be reported, not emitted"
                )
                log.warning("txn.abandoned", partition=p, xid=txn.xid, first_offset=txn.first_offset, events=txn.events)
                self.sink.dead_letter(self.cfg.raw_topic, p, txn.first_offset, txn.xid.encode(), None, reason)
                engine.abandon(txn.xid, engine.next_offset - 1)
        self.sink.flush_dead_letters()

    def _low_watermarks(self) -> list[TopicPartition]:
        return [TopicPartition(self.cfg.raw_topic, p, st.engine.low_watermark()) for p, st in self.parts.items()]

    def _commit_offsets(self, force: bool = False, asynchronous: bool = True) -> None:
        self._last_commit = time.monotonic()
        self.offsets.commit({p: st.engine.low_watermark() for p, st in self.parts.items()}, force, asynchronous)

    def _finished_elsewhere(self, targets: dict[int, int]) -> bool:
        """Every partition this instance does not own has a committed low watermark at its target."""
        now = time.monotonic()
        if now - self._last_elsewhere_check < 1.0:
            return False
        self._last_elsewhere_check = now
        try:
            committed = self.consumer.committed([TopicPartition(self.cfg.raw_topic, p) for p in targets], timeout=5)
        except KafkaException:
            return False
        return all(tp.offset >= targets[tp.partition] for tp in committed)

    def _reached_targets(self) -> bool:
        """Available-now is done when what existed at start is processed on every partition this
        instance owns, and every other partition is either committed at its target by another
        member or the group has settled long enough that no dead member still holds it."""
        if not self.parts or self.to_resume:
            return False
        if not all(state.engine.next_offset >= self._targets.get(p, 0) for p, state in self.parts.items()):
            return False
        if self.orderer is not None and self.orderer.heap:
            # End of the input that existed at start: no smaller commit_scn can come any more.
            for engine, txn in self.orderer.release_all():
                self.emitter.release(engine, txn)
        if self.emitter.queue:
            return False
        others = {p: end for p, end in self._targets.items() if p not in self.parts}
        return (
            not others or self._finished_elsewhere(others) or time.monotonic() - self._last_rebalance > self._settle_s
        )

    def _sample_peaks(self) -> None:
        engines = [st.engine for st in self.parts.values()]
        self.summary.peak_buffered_bytes = max(
            self.summary.peak_buffered_bytes, sum(e.buffered_bytes() for e in engines)
        )
        self.summary.peak_open_txns = max(self.summary.peak_open_txns, sum(len(e.open) for e in engines))

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
        parts = {}
        for p, state in self.parts.items():
            e = state.engine
            oldest = e.oldest_open()
            _, high = self.consumer.get_watermark_offsets(TopicPartition(self.cfg.raw_topic, p), cached=True) or (0, -1)
            parts[p] = {
                "phase": state.phase.value,
                "next_offset": e.next_offset,
                "low_watermark": e.low_watermark(),
                "lag": max(0, high - e.next_offset) if high is not None and high >= 0 else None,
                "oldest_open_age_ms": (e.last_ts_ms - oldest.first_ts_ms) if oldest and oldest.first_ts_ms else None,
                "open_txns": len(e.open),
                "pending_txns": len(e.pending),
                "watermark": e.watermark,
                "buffered_events": e.buffered_events(),
                "buffered_bytes": e.buffered_bytes(),
                "oldest_open_first_offset": oldest.first_offset if oldest else None,
                "oldest_open_events": oldest.events if oldest else 0,
                "stats": e.stats.__dict__ if hasattr(e.stats, "__dict__") else _stats_dict(e.stats),
            }
        now = _now_ms()
        return {
            "ordering": self.cfg.ordering,
            "held_txns": len(self.orderer.heap) if self.orderer else 0,
            "oldest_held_age_ms": self.orderer.oldest_held_age_ms(now) if self.orderer else 0,
            "ordering_relaxed": self.orderer.relaxed if self.orderer else 0,
            "open_txns": sum(v["open_txns"] for v in parts.values()),
            "buffered_events": sum(v["buffered_events"] for v in parts.values()),
            "buffered_bytes": sum(v["buffered_bytes"] for v in parts.values()),
            "changes_emitted": self.emitter.changes_emitted,
            "transactions_emitted": self.emitter.transactions_emitted,
            "partitions": parts,
        }

    def close(self) -> None:
        self._closing = True
        try:
            self._drain(timeout_s=30)
            self._checkpoint_all()
        finally:
            self._finalise_summary()
            try:
                self.consumer.close()  # revokes: commits each partition's low watermark
            finally:
                self.producer.flush(30)
                self.store.close()

    def _finalise_summary(self) -> None:
        snap = self.snapshot()
        self.summary.peak_buffered_bytes = max(self.summary.peak_buffered_bytes, snap["buffered_bytes"])
        self.summary.changes_emitted = self.emitter.changes_emitted
        for state in self.parts.values():
            s = state.engine.stats
            self.summary.committed += s.committed
            self.summary.rolled_back += s.rolled_back
            self.summary.dead_letters += s.dead_letters
            self.summary.late_events += s.late_events
            self.summary.filtered_txns += s.filtered_txns


def _now_ms() -> float:
    return time.monotonic() * 1000


def _stats_dict(stats) -> dict:
    return {name: getattr(stats, name) for name in stats.__slots__}
