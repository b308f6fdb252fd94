"""The processor's figures: the run summary and the point-in-time snapshot that feeds logs,
Prometheus metrics and `txbuffer status`."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from processor.core.engine import PartitionEngine
from processor.runtime.partitions import PartitionState


class PhaseClock:
    """Wall and CPU seconds of the loop's phases (poll, apply, release, settle, checkpoint,
    housekeeping), so a slow run says whether it computed or waited: a phase whose wall time is well
    above its CPU time waited (the broker, a flush) or was preempted (a loaded machine). Also each
    phase's longest lap: one stall holds every COMMIT behind it, which is what a latency p99 shows
    and a total hides. Two clock reads per phase and batch; logged as run.phases when the run ends.

    And the last STALLS_KEPT stalls: laps of any phase but poll (whose wait for records is idle
    time) longer than STALL_S, with their CPU time and wall-clock end, so a latency tail can be put
    beside the broker's own log (a GC pause, a segment roll) or told to be the loop's own work."""

    __slots__ = ("stalls", "totals")

    STALL_S = 0.05
    STALLS_KEPT = 100

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}
        self.stalls: deque[tuple[str, float, float, float]] = deque(maxlen=self.STALLS_KEPT)

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def lap(self, phase: str, since: tuple[float, float]) -> tuple[float, float]:
        """Adds the time since `since` to phase; returns now, the start of the next phase."""
        now = time.perf_counter(), time.thread_time()
        total = self.totals.get(phase)
        if total is None:
            total = self.totals[phase] = [0.0, 0.0, 0.0, 0]
        wall, cpu = now[0] - since[0], now[1] - since[1]
        total[0] += wall
        total[1] += cpu
        if wall > total[2]:
            total[2] = wall
        total[3] += 1
        if wall > self.STALL_S and phase != "poll":
            self.stalls.append((phase, wall, cpu, time.time()))
        return now

    def stall_list(self) -> list[dict[str, float | str]]:
        """The stalls kept, oldest first: phase, wall and CPU ms, and when the lap ended (epoch s)."""
        return [
            {"phase": p, "wall_ms": round(w * 1000, 1), "cpu_ms": round(c * 1000, 1), "at": round(at, 3)}
            for p, w, c, at in self.stalls
        ]

    def seconds(self) -> dict[str, dict[str, float]]:
        """Each phase's wall and CPU seconds, longest lap, and laps (how often the loop ran it)."""
        return {
            p: {"wall_s": round(w, 3), "cpu_s": round(c, 3), "longest_ms": round(longest * 1000, 1), "laps": int(laps)}
            for p, (w, c, longest, laps) in self.totals.items()
        }


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
    # at_least_once: flushes that settled a batch's outputs, and batches whose settlement a backlog
    # deferred (kafka/delivery.py); 0 under exactly_once.
    settling_flushes: int = 0
    deferred_settlements: int = 0
    seconds: float = 0.0
    restores: dict = field(default_factory=dict)
    phases: PhaseClock = field(default_factory=PhaseClock)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def sample_peaks(self, engines: list[PartitionEngine]) -> None:
        self.peak_buffered_bytes = max(self.peak_buffered_bytes, sum(e.buffered_bytes() for e in engines))
        self.peak_open_txns = max(self.peak_open_txns, sum(len(e.open) for e in engines))

    def add_engine_counts(self, engines: list[PartitionEngine]) -> None:
        for engine in engines:
            s = engine.stats
            self.committed += s.committed
            self.rolled_back += s.rolled_back
            self.dead_letters += s.dead_letters
            self.late_events += s.late_events
            self.filtered_txns += s.filtered_txns


def partition_figures(state: PartitionState, consumer: Consumer, topic: str) -> dict:
    e = state.engine
    oldest = e.oldest_open()
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, state.partition), cached=True) or (0, -1)
    return {
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
        "stats": {name: getattr(e.stats, name) for name in e.stats.__slots__},
    }


def snapshot(held: dict[int, PartitionState], consumer: Consumer, topic: str, ordering: str, **extra: object) -> dict:
    parts = {p: partition_figures(state, consumer, topic) for p, state in held.items()}
    return {
        "ordering": ordering,
        "open_txns": sum(v["open_txns"] for v in parts.values()),
        "buffered_events": sum(v["buffered_events"] for v in parts.values()),
        "buffered_bytes": sum(v["buffered_bytes"] for v in parts.values()),
        **extra,
        "partitions": parts,
    }
