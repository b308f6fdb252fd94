"""Prometheus metrics of the processor, fed from Runner.snapshot().

The snapshot holds point-in-time gauges and per-engine cumulative counts. Engine counts start
again from zero when a partition is re-assigned (a fresh engine), and a sum over partitions drops
when one is revoked, so counters here advance by the per-partition delta between snapshots and
never decrease: that is what Prometheus' rate() and increase() expect.
"""

from __future__ import annotations

import threading
import time

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, start_http_server

from processor.runtime import broker_contact

log = structlog.get_logger(__name__)

NS = "txbuffer"

# Engine Stats field -> (metric name, help). Each becomes a per-partition counter.
STAT_COUNTERS = {
    "events": ("events_consumed", "raw events applied"),
    "changes": ("changes_buffered", "changes buffered"),
    "committed": ("transactions_committed", "transactions committed"),
    "rolled_back": ("transactions_rolled_back", "transactions rolled back"),
    "filtered_txns": ("transactions_filtered", "transactions dropped by user/client filters"),
    "filtered_changes": ("changes_filtered", "changes dropped by filters"),
    "late_events": ("late_events", "late or duplicate events of finished transactions"),
    "restarts": ("transaction_restarts", "transactions restarted by a repeated BEGIN"),
    "undone": ("changes_undone", "changes undone by partial rollback"),
    "dead_letters": ("dead_letters", "records written to the DLQ"),
    "abandoned": (
        "transactions_abandoned",
        "transactions never emitted: abandoned by the retention policy, or incomplete at the source",
    ),
    "incomplete": ("transactions_incomplete", "transactions dead-lettered whole: a source lost one of their events"),
}

# Snapshot partition field -> (gauge name, help).
PARTITION_GAUGES = {
    "lag": ("consumer_lag", "raw-topic records not yet consumed"),
    "open_txns": ("open_transactions", "open transactions"),
    "pending_txns": ("pending_transactions", "committed transactions whose outputs are not yet acknowledged"),
    "oldest_open_events": ("oldest_open_transaction_events", "buffered events of the oldest open transaction"),
    "buffered_events": ("buffered_events", "events buffered in the store"),
    "buffered_bytes": ("buffered_bytes", "bytes of events buffered in the store"),
    "low_watermark": ("low_watermark_offset", "committed input offset (first offset of the oldest unfinished txn)"),
    "next_offset": ("next_offset", "next raw offset to apply"),
    "watermark": ("watermark_scn", "highest COMMIT/HEARTBEAT scn seen"),
    "oldest_open_first_offset": ("oldest_open_transaction_first_offset", "first offset of the oldest open transaction"),
}


class Metrics:
    """All processor metrics in one registry. update() is called from the processor loop;
    scrapes run on the HTTP server's thread (prometheus_client values are thread-safe)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_resident_memory_bytes, cpu, open fds (Linux)
        self.gauges = {
            key: Gauge(f"{NS}_{name}", doc, ["partition"], registry=r) for key, (name, doc) in PARTITION_GAUGES.items()
        }
        self.oldest_open_age = Gauge(
            f"{NS}_oldest_open_transaction_age_seconds", "age of the oldest open transaction", ["partition"], registry=r
        )
        self.phase = Gauge(
            f"{NS}_partition_phase", "1 for the partition's lifecycle phase", ["partition", "phase"], registry=r
        )
        self.stat_counters = {
            key: Counter(f"{NS}_{name}", doc, ["partition"], registry=r) for key, (name, doc) in STAT_COUNTERS.items()
        }
        self.changes_emitted = Counter(f"{NS}_changes_emitted", "change records emitted", registry=r)
        self.transactions_emitted = Counter(f"{NS}_transactions_emitted", "transactions emitted", registry=r)
        self.held = Gauge(f"{NS}_held_transactions", "global ordering: committed transactions held", registry=r)
        self.oldest_held_age = Gauge(
            f"{NS}_oldest_held_age_seconds", "global ordering: age of the oldest held transaction", registry=r
        )
        self.lost_events = Counter(
            f"{NS}_lost_state_events", "events deleted from the raw topic unread", ["partition"], registry=r
        )
        self.lost_last = Gauge(
            f"{NS}_lost_state_last_events", "events lost in the latest lost-state incident", ["partition"], registry=r
        )
        self.rebuild_ratio = Gauge(f"{NS}_rebuild_progress_ratio", "rebuild progress, 0..1", ["partition"], registry=r)
        self.rebuild_remaining = Gauge(
            f"{NS}_rebuild_remaining", "rebuild work left (records)", ["partition"], registry=r
        )
        self.last_update = Gauge(
            f"{NS}_last_update_timestamp_seconds", "when the figures were last updated", registry=r
        )
        self.broker_contact_age = Gauge(
            f"{NS}_broker_contact_age_seconds",
            "seconds since the broker last acknowledged an offset commit (grows during an outage)",
            registry=r,
        )
        self.broker_contact_age.set_function(broker_contact.age_s)
        self.unassigned = Gauge(
            f"{NS}_unassigned_seconds",
            "seconds this instance has held no raw partition (0 while it holds one); > unassigned_warn_ms warns",
            registry=r,
        )
        self.unassigned_warning = Gauge(
            f"{NS}_unassigned_warning",
            "1 when this instance has held no partition longer than unassigned_warn_ms",
            registry=r,
        )
        self.eos_aborts = Counter(
            f"{NS}_eos_aborts",
            "exactly_once batches whose Kafka transaction a rebalance aborted, recovered in process",
            ["error"],
            registry=r,
        )
        self.eos_backoff_seconds = Counter(
            f"{NS}_eos_recovery_backoff_seconds",
            "exactly_once: seconds waited before restores that followed another recovery with no committed batch",
            registry=r,
        )
        self.eos_recoveries_in_a_row = Gauge(
            f"{NS}_eos_recoveries_in_a_row",
            "exactly_once: recoveries since the last committed batch (above 1: the group keeps moving)",
            registry=r,
        )
        self._lock = threading.Lock()
        self._seen_stats: dict[str, dict[str, int]] = {}
        self._seen_emitted = {"changes_emitted": 0, "transactions_emitted": 0}
        self._partitions: set[str] = set()
        self._phases: dict[str, str] = {}

    # ------------------------------------------------------------------ server

    def start_server(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve /metrics on host:port (0 = a free port); return the port actually bound."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.server = server
        actual = server.server_address[1]
        log.info("metrics.listening", url=f"http://{host}:{actual}/metrics")
        return actual

    def stop_server(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
            self.server = None

    # ------------------------------------------------------------------ feeds

    def update(self, snapshot: dict) -> None:
        """Set every figure from Runner.snapshot(); partitions no longer owned drop their gauges."""
        with self._lock:
            parts = {str(p): fig for p, fig in snapshot.get("partitions", {}).items()}
            for gone in self._partitions - parts.keys():
                self._forget(gone)
            self._partitions = set(parts)
            for p, fig in parts.items():
                self._partition(p, fig)
            for key, counter in (
                ("changes_emitted", self.changes_emitted),
                ("transactions_emitted", self.transactions_emitted),
            ):
                if key in snapshot:
                    counter.inc(_delta(self._seen_emitted[key], snapshot[key]))
                    self._seen_emitted[key] = snapshot[key]
            if "held_txns" in snapshot:
                self.held.set(snapshot["held_txns"])
            if snapshot.get("oldest_held_age_ms") is not None:
                self.oldest_held_age.set(snapshot["oldest_held_age_ms"] / 1000)
            elif "held_txns" in snapshot:
                self.oldest_held_age.set(0)
            if "unassigned_s" in snapshot:
                self.unassigned.set(snapshot["unassigned_s"])
                self.unassigned_warning.set(snapshot.get("unassigned_warning", 0))
            self.last_update.set(time.time())

    def _partition(self, p: str, fig: dict) -> None:
        for key, gauge in self.gauges.items():
            value = fig.get(key)
            if value is None:
                _remove(gauge, p)
            else:
                gauge.labels(p).set(value)
        age = fig.get("oldest_open_age_ms")
        if age is None:
            _remove(self.oldest_open_age, p)
        else:
            self.oldest_open_age.labels(p).set(age / 1000)
        phase = fig.get("phase")
        if phase is not None and self._phases.get(p) != phase:
            if p in self._phases:
                _remove(self.phase, p, self._phases[p])
            self.phase.labels(p, phase).set(1)
            self._phases[p] = phase
        stats = fig.get("stats") or {}
        seen = self._seen_stats.setdefault(p, {})
        # Engine counts only grow; a smaller `events` means a fresh engine, whose counts are all new.
        fresh = stats.get("events", 0) < seen.get("events", 0)
        for key, counter in self.stat_counters.items():
            if key in stats:
                counter.labels(p).inc(stats[key] if fresh else _delta(seen.get(key, 0), stats[key]))
                seen[key] = stats[key]

    def _forget(self, p: str) -> None:
        """A revoked partition: its gauges vanish, its counters stay (they never go back)."""
        for gauge in (*self.gauges.values(), self.oldest_open_age):
            _remove(gauge, p)
        if p in self._phases:
            _remove(self.phase, p, self._phases.pop(p))
        self._seen_stats.pop(p, None)

    def lost_state(self, partition: int, lost_events: int) -> None:
        """The committed low watermark was below the log start: lost_events were deleted unread."""
        p = str(partition)
        self.lost_events.labels(p).inc(lost_events)
        self.lost_last.labels(p).set(lost_events)
        self.stat_counters["dead_letters"].labels(p).inc()  # the runner dead-letters the incident

    def rebuild_progress(self, partition: int, done: int, total: int) -> None:
        p = str(partition)
        self.rebuild_ratio.labels(p).set(min(1.0, done / total) if total > 0 else 1.0)
        self.rebuild_remaining.labels(p).set(max(0, total - done))

    def eos_abort(self, error: str) -> None:
        """A rebalance aborted a batch's transaction (error: the Kafka error name); it was rewound."""
        self.eos_aborts.labels(error).inc()

    def eos_backoff(self, in_a_row: int, seconds: float) -> None:
        """A recovery is about to wait `seconds` (0 for the first in a row) before its restore."""
        self.eos_recoveries_in_a_row.set(in_a_row)
        if seconds:
            self.eos_backoff_seconds.inc(seconds)


def _delta(previous: int, current: int) -> int:
    """How much a cumulative count grew; a smaller value means it restarted from zero."""
    return current - previous if current >= previous else current


def _remove(metric, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
