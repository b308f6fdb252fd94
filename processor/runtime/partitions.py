"""A raw partition's life on this instance: assigned -> restoring -> running -> revoking -> closed.

Restoring decides whether the local store can be trusted or the partition is rebuilt from the
committed low watermark (the raw topic is the source of truth; the store is a cache). Partitions
(the rebalance listener) owns the partitions this instance holds and drives each through its life.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition

from processor.core.engine import Filters, PartitionEngine
from processor.core.store import Store
from processor.runtime.dispatch import Dispatcher
from processor.runtime.index_rebuild import completed_from_records
from processor.runtime.lost_state import below_log_start, beyond_log_end, handle_lost_state

log = structlog.get_logger(__name__)

REVOKE_PROBE_S = 2.0  # a revoke commits only after the cluster answered a metadata request this fast


class Phase(enum.Enum):
    ASSIGNED = "assigned"
    RESTORING = "restoring"
    RUNNING = "running"
    REVOKING = "revoking"
    CLOSED = "closed"


_NEXT = {
    Phase.ASSIGNED: {Phase.RESTORING, Phase.REVOKING},
    Phase.RESTORING: {Phase.RUNNING, Phase.REVOKING},
    Phase.RUNNING: {Phase.REVOKING},
    Phase.REVOKING: {Phase.CLOSED},
    Phase.CLOSED: set(),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class Restored:
    engine: PartitionEngine
    start_offset: int
    source: str  # "local", "rebuild-empty", "rebuild-stale"


class PartitionState:
    def __init__(self, partition: int):
        self.partition = partition
        self.phase = Phase.ASSIGNED
        self.engine: PartitionEngine | None = None

    def move(self, phase: Phase) -> None:
        if phase not in _NEXT[self.phase]:
            raise IllegalTransition(f"partition {self.partition}: {self.phase.value} -> {phase.value}")
        self.phase = phase


def restore_partition(
    partition: int,
    store: Store,
    filters: Filters,
    min_completed: int,
    committed: int | None,
    log_start: int,
    trust_local: bool = True,
) -> Restored:
    """Local state if present and consistent with the committed low watermark, else a rebuild.

    `committed` is the group's committed offset (the low watermark) or None. With
    trust_local=False (exactly_once) the store is always rebuilt from the committed offset.
    """
    ahead = trust_local and PartitionEngine.written_ahead(partition, store)
    local = PartitionEngine.restore(partition, store, filters, min_completed) if trust_local and not ahead else None
    if ahead:
        # The last run wrote data past its last checkpoint and stopped before the next one.
        log.warning("partition.store_ahead", partition=partition, committed=committed)
        PartitionEngine.wipe(partition, store)
        source = "rebuild-ahead"
    elif local is not None:
        if committed is None or committed <= local.next_offset:
            return Restored(local, local.next_offset, "local")
        # Another instance went further than this store knows: it is stale, not trusted.
        log.warning("partition.store_stale", partition=partition, local_next=local.next_offset, committed=committed)
        PartitionEngine.wipe(partition, store)
        source = "rebuild-stale"
    else:
        PartitionEngine.wipe(partition, store)  # drop any half-written leftovers
        source = "rebuild-empty"
    start = committed if committed is not None else log_start
    engine = PartitionEngine(partition, store, filters, min_completed)
    engine.next_offset = start
    return Restored(engine, start, source)


class Partitions:
    """The partitions this instance holds, and the consumer group's rebalance callbacks."""

    def __init__(
        self,
        cfg: Any,
        client: Any,
        store: Store,
        filters: Filters,
        dispatcher: Dispatcher,
        delivery: Any,
        offsets: Any,
        metrics: Any = None,
    ):
        self.cfg, self.client, self.store, self.filters = cfg, client, store, filters
        self.dispatcher, self.delivery, self.offsets, self.metrics = dispatcher, delivery, offsets, metrics
        self.held: dict[int, PartitionState] = {}
        self.to_resume: list[int] = []
        self.restores: dict[int, str] = {}
        self.lost_events = 0
        self.closing = False
        self.last_rebalance = time.monotonic()
        self.on_change: Callable[[], None] = lambda: None  # told after every assignment change
        # --available-now: the offsets this run reads up to (runtime/available_now.py). A partition
        # taken on at its target has nothing left to read: its completed index is not rebuilt and
        # the consumer pauses it. The last member of a group run so took over the partitions of
        # those that finished first, and rebuilt each from the outputs (seconds) only to stop.
        self.read_to: dict[int, int] | None = None
        # Where the runner takes the records (kafka/raw_fetch.py): told of each partition before it is
        # assigned and after it is revoked. None: the consumer's own consume (tests without a runner).
        self.fetch: Any = None

    def engines(self) -> list[PartitionEngine]:
        return [state.engine for state in self.held.values() if state.engine is not None]

    # ------------------------------------------------------------------ assign

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.last_rebalance = time.monotonic()
        self.delivery.quiesce()  # exactly_once: no producer call while the last batch commits
        if self.closing:
            return  # leaving the group: take nothing on
        starts = self.take_on(consumer, partitions)
        if self.fetch is not None:
            self.fetch.route(list(starts))  # before the fetch starts: no record may reach another queue
        consumer.incremental_assign([TopicPartition(self.cfg.raw_topic, p, start) for p, start in starts.items()])
        self.pause_finished(consumer, starts)
        self.on_change()

    def at_target(self, partition: int, start: int) -> bool:
        """--available-now: nothing is left to read from this partition."""
        return self.read_to is not None and start >= self.read_to.get(partition, 0)

    def pause_finished(self, consumer: Consumer, starts: dict[int, int]) -> None:
        """Pause the partitions taken on at their --available-now target: a record written since
        the start must not reach an engine whose completed index was not rebuilt."""
        finished = [p for p, start in starts.items() if self.at_target(p, start)]
        if finished:
            consumer.pause([TopicPartition(self.cfg.raw_topic, p) for p in finished])
            log.info("partition.nothing_to_read", partitions=finished, reason="taken on at its available-now target")

    def take_on(self, consumer: Consumer, partitions: list[TopicPartition]) -> dict[int, int]:
        """Restore or rebuild these partitions and hold them (restoring, to resume); {partition: start
        offset}, where the caller positions the consumer. Also the exactly_once dirty-close recovery."""
        # A hung broker (seen: a 30 s SIGSTOP) times out the look-ups below; retry rather than exit.
        deadline = time.monotonic() + 300
        while True:
            try:
                staged = self._restore(consumer, partitions)
                break
            except (KafkaException, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("partition.assign_retry", partitions=[tp.partition for tp in partitions], error=str(exc))
                time.sleep(1.0)
        for state, source in staged.values():
            self.held[state.partition] = state
            self.restores[state.partition] = source
            self.to_resume.append(state.partition)
        return {p: state.engine.next_offset for p, (state, _) in staged.items()}

    def _restore(self, consumer: Consumer, partitions: list[TopicPartition]) -> dict:
        """{partition: (state, source)} with engines restored or rebuilt; nothing is taken on until all are."""
        cfg = self.cfg
        committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
        staged = {}
        rebuild: dict[int, tuple[PartitionEngine, int]] = {}
        for tp in partitions:
            p = tp.partition
            state = PartitionState(p)
            state.move(Phase.RESTORING)
            low, listed_end = consumer.get_watermark_offsets(TopicPartition(cfg.raw_topic, p), timeout=10)
            c = committed.get(p)
            c = None if c is None or c < 0 or c == OFFSET_INVALID else c
            restored = restore_partition(
                p,
                self.store,
                self.filters,
                cfg.completed_index_min_entries,
                c,
                low,
                trust_local=self.delivery.trusts_local_store,
            )
            engine, start = restored.engine, restored.start_offset
            if start < low:
                engine = self._lost_state(p, start, low, below_log_start(p, start, low), lost=low - start)
                start = low
            elif start > listed_end:  # the topic was recreated or truncated under us: our position does not exist
                engine = self._lost_state(p, start, low, beyond_log_end(p, start, listed_end), lost=start - listed_end)
                start = low
            if (engine is not restored.engine or restored.source != "local") and not self.at_target(p, start):
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
                # > start_offset: transactions staged in memory at the last checkpoint are re-read up to here
                applied_to=engine.applied_to(),
            )
        if rebuild:
            found = completed_from_records(
                self.client,
                cfg.transactions_topic,
                cfg.outcomes_topic,
                {p: start for p, (_, start) in rebuild.items()},
                keep_below=cfg.completed_index_min_entries,
            )
            for p, (engine, _) in rebuild.items():
                for xid, offset, outcome in found[p]:
                    engine.mark_completed(xid, offset, outcome)
        return staged

    def _lost_state(self, partition: int, start: int, log_start: int, reason: str, lost: int) -> PartitionEngine:
        engine = handle_lost_state(
            self.cfg,
            self.dispatcher.sink,
            self.delivery.standalone,
            self.store,
            self.filters,
            partition,
            start,
            log_start,
            reason,
            lost,
            self.metrics,
        )
        self.lost_events += lost
        return engine

    def resume_pending(self) -> None:
        """Newly held partitions start running: what a previous run committed but did not finish goes
        out first (commit order), before anything this batch commits."""
        while self.to_resume:
            state = self.held.get(self.to_resume.pop())
            if state is None:
                continue
            state.move(Phase.RUNNING)
            self.dispatcher.resume(state.engine)

    # ------------------------------------------------------------------ revoke / lost

    def _broker_answers(self) -> bool:
        """True when the cluster answers a metadata request for the raw topic within REVOKE_PROBE_S.
        Asked through the producer: a consumer call nested in the consumer's own rebalance callback
        loses confluent-kafka's call state, and its next callback aborts the process."""
        try:
            self.dispatcher.producer.list_topics(self.cfg.raw_topic, timeout=REVOKE_PROBE_S)
        except Exception:  # KafkaException(_TIMED_OUT, _TRANSPORT, ...): treated alike
            return False
        return True

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.last_rebalance = time.monotonic()
        self.delivery.quiesce()  # the last batch's offsets are committed (or not) before they go
        revoked = [tp.partition for tp in partitions if tp.partition in self.held]
        for p in revoked:
            self.held[p].move(Phase.REVOKING)
        # Finish what is in flight, so the committed low watermark is as far as it can be.
        self.dispatcher.drain(timeout_s=30)
        offsets = []
        for p in revoked:
            state = self.held.pop(p)
            state.engine.checkpoint(spill_all=True)  # the next owner may restore this store
            offsets.append(TopicPartition(self.cfg.raw_topic, p, state.engine.low_watermark()))
            self.dispatcher.drop_partition(state.engine)
            state.move(Phase.CLOSED)
            log.info("partition.revoked", partition=p, low_watermark=offsets[-1].offset)
        if offsets and not self.delivery.commits_offsets_itself:
            # exactly_once: input offsets are committed inside the batches' Kafka transactions only
            # (delivery.py); the last committed batch already holds these.
            pass
        elif offsets and self.offsets.outputs_durable():
            if not self._broker_answers():
                # A synchronous commit to a hung broker never returns (librdkafka gives it no
                # timeout, and a stop cannot cut a wait inside the consumer's close). The next owner
                # re-reads from the last committed offsets: at-least-once, deduplicated by event_id.
                log.warning("partition.revoke_commit_skipped", reason=f"no metadata answer in {REVOKE_PROBE_S:g}s")
            else:
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except Exception as exc:  # the group may already have moved on; the store still has it
                    log.warning("partition.revoke_commit_failed", error=str(exc))
        elif offsets:
            # Outcome records or dead letters are not acknowledged yet (e.g. the broker is hung):
            # the next owner re-reads from the older watermark rather than past unrecorded outcomes.
            log.warning(
                "partition.revoke_commit_skipped",
                unacked_outcomes=self.dispatcher.sink.outcomes_unacked,
                unacked_dead_letters=self.dispatcher.sink.dlq_unacked,
            )
        consumer.incremental_unassign(partitions)
        if self.fetch is not None:
            self.fetch.unroute([tp.partition for tp in partitions])
        self.on_change()

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.last_rebalance = time.monotonic()
        self.delivery.quiesce()
        for tp in partitions:
            state = self.held.pop(tp.partition, None)
            if state is not None:
                self.dispatcher.drop_partition(state.engine)
                log.warning("partition.lost", partition=tp.partition)
        consumer.incremental_unassign(partitions)
        if self.fetch is not None:
            self.fetch.unroute([tp.partition for tp in partitions])
        self.on_change()

    def checkpoint_all(self, spill_all: bool = False) -> None:
        """spill_all at a stop: staged transactions go to the store too, so a restart re-reads nothing."""
        for state in self.held.values():
            state.engine.checkpoint(spill_all)

    def low_watermarks(self) -> dict[int, int]:
        return {p: state.engine.low_watermark() for p, state in self.held.items()}
