"""Prometheus metrics of `txbuffer capture postgres` (`--metrics-port`).

Read at scrape time, so the replication loop does no metrics work: the capture's own counters
(row changes decoded, raw events written, the LSN it confirmed) and, through a connection of the
collector's own, the slot as the server sees it (confirmed_flush_lsn, restart_lsn, the WAL it
retains, the server's current WAL position). Rows per second are `rate(txbuffer_capture_rows_total[1m])`;
how far the capture trails the database is `txbuffer_capture_lag_bytes`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = structlog.get_logger(__name__)

NS = "txbuffer_capture"
ROW_MESSAGES = {"Insert": "insert", "Update": "update", "Delete": "delete", "Truncate": "truncate"}
SLOT_QUERY = """
SELECT pg_current_wal_lsn() - '0/0', confirmed_flush_lsn - '0/0', restart_lsn - '0/0',
       pg_current_wal_lsn() - restart_lsn, active
  FROM pg_replication_slots WHERE slot_name = %s
"""


class SlotProbe:
    """The slot's positions as the server reports them, on a connection of its own (scrapes run on
    the HTTP server's thread; the capture's connections belong to its loop)."""

    def __init__(self, dsn: str, slot: str):
        self.dsn, self.slot = dsn, slot
        self._conn: Any = None
        self._lock = threading.Lock()

    def read(self) -> tuple[int, int, int, int, bool] | None:
        """(current WAL LSN, confirmed_flush_lsn, restart_lsn, retained bytes, active), None when
        the slot is missing; raises psycopg2.Error when the server cannot be asked."""
        import psycopg2

        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg2.connect(self.dsn, connect_timeout=5, application_name="txbuffer-metrics")
                    self._conn.autocommit = True
                with self._conn.cursor() as cur:
                    cur.execute("SET statement_timeout = '5s'")
                    cur.execute(SLOT_QUERY, (self.slot,))
                    row = cur.fetchone()
            except psycopg2.Error:
                self.close()
                raise
        if row is None:
            return None
        current, confirmed, restart, retained, active = row
        return int(current), int(confirmed or 0), int(restart or 0), int(retained or 0), bool(active)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None


class CaptureCollector(Collector):
    """Yields the capture's metrics on each scrape. `capture` is a PostgresCapture (or anything with
    its `events`, `snapshot_rows`, `sessions`, `acked_lsn`, `acked_commit_lsn` and `mapper.stats`)."""

    def __init__(self, capture: Any, probe: SlotProbe | None = None):
        self.capture = capture
        self.probe = probe

    def collect(self) -> Iterator[Any]:
        c = self.capture
        stats = dict(c.mapper.stats)  # one C-level copy: the loop keeps counting while we read
        rows = CounterMetricFamily(f"{NS}_rows", "row changes decoded from the WAL", labels=["op"])
        for message, op in ROW_MESSAGES.items():
            rows.add_metric([op], stats.get(message, 0))
        yield rows
        messages = CounterMetricFamily(f"{NS}_messages", "pgoutput messages decoded", labels=["type"])
        for message, n in sorted(stats.items()):
            if message[:1].isupper():  # message type names; lower-case keys are the mapper's own counts
                messages.add_metric([message], n)
        yield messages
        yield CounterMetricFamily(f"{NS}_raw_events", "raw events written to the raw topic", value=c.events)
        yield CounterMetricFamily(f"{NS}_snapshot_rows", "rows read by the initial snapshot", value=c.snapshot_rows)
        yield CounterMetricFamily(
            f"{NS}_sessions", "replication sessions opened (more than 1: reconnects)", value=c.sessions
        )
        toast = CounterMetricFamily(f"{NS}_toast_values", "unchanged TOAST values", labels=["outcome"])
        toast.add_metric(["carried"], stats.get("toast_carried", 0))
        toast.add_metric(["placeholder"], stats.get("toast_placeholder", 0))
        yield toast
        yield GaugeMetricFamily(
            f"{NS}_acked_lsn", "LSN confirmed to the server after Kafka acknowledged the events", value=c.acked_lsn
        )
        yield GaugeMetricFamily(
            f"{NS}_acked_commit_lsn", "newest commit LSN whose events Kafka acknowledged", value=c.acked_commit_lsn
        )
        yield from self._slot()

    def _slot(self) -> Iterator[Any]:
        if self.probe is None:
            return
        import psycopg2

        up = GaugeMetricFamily(f"{NS}_slot_up", "1 when the server answered and the slot exists")
        try:
            found = self.probe.read()
        except psycopg2.Error as exc:
            log.warning("capture.metrics_probe_failed", error=str(exc).strip())
            found = None
        up.add_metric([], 0 if found is None else 1)
        yield up
        if found is None:
            return
        current, confirmed, restart, retained, active = found
        yield GaugeMetricFamily(f"{NS}_server_wal_lsn", "the server's current WAL LSN", value=current)
        yield GaugeMetricFamily(f"{NS}_slot_confirmed_flush_lsn", "the slot's confirmed_flush_lsn", value=confirmed)
        yield GaugeMetricFamily(f"{NS}_slot_restart_lsn", "the slot's restart_lsn", value=restart)
        yield GaugeMetricFamily(f"{NS}_slot_retained_wal_bytes", "WAL the slot keeps on the server", value=retained)
        yield GaugeMetricFamily(f"{NS}_slot_active", "1 while a session streams from the slot", value=int(active))
        yield GaugeMetricFamily(
            f"{NS}_lag_bytes", "WAL written by the server and not yet confirmed", value=max(0, current - confirmed)
        )


class CaptureMetrics:
    """The capture's registry and its /metrics server."""

    def __init__(self, capture: Any, dsn: str | None, slot: str, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        ProcessCollector(registry=self.registry)  # resident memory, CPU seconds, open fds
        self.probe = SlotProbe(dsn, slot) if dsn is not None else None
        self.registry.register(CaptureCollector(capture, self.probe))
        self.server: Any = None

    def start_server(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve /metrics on host:port (0 = a free port); return the port actually bound."""
        self.server, _thread = start_http_server(port, addr=host, registry=self.registry)
        actual = self.server.server_address[1]
        log.info("metrics.listening", url=f"http://{host}:{actual}/metrics")
        return actual

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.probe is not None:
            self.probe.close()
