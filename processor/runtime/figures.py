"""The processor's figures: the run summary and the point-in-time snapshot that feeds logs,
Prometheus metrics and `txbuffer status`."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from processor.core.engine import PartitionEngine
from processor.runtime.partitions import PartitionState


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
