"""`txbuffer capture postgres --metrics-port`: the capture process's Prometheus endpoint, scraped while
it streams from a real PostgreSQL 15 cluster onto a real broker."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import free_port
from .test_postgres_capture import new_database, slot_position, sql, start_capture, stop, wait_streaming

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_capture_metrics_count_rows_and_show_the_slot_as_the_server_sees_it(postgres, broker, tmp_path):
    dsn = new_database(postgres, "metrics")
    sql(dsn, "CREATE TABLE m (id int PRIMARY KEY, v text)")
    topic, log, port = f"raw-{uuid.uuid4().hex[:8]}", tmp_path / "capture.log", free_port()
    capture = start_capture(dsn, broker.bootstrap, topic, log, tmp_path / "state", "--metrics-port", str(port))
    slot = dict(kv.split("=", 1) for kv in dsn.split())["dbname"]
    try:
        wait_streaming(log, 1)
        sql(
            dsn,
            "INSERT INTO m SELECT g, 'v' || g FROM generate_series(1, 300) g",
            "UPDATE m SET v = 'w' WHERE id <= 100",
            "DELETE FROM m WHERE id > 250",
        )
        target = int(sql(dsn, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])
        deadline = time.monotonic() + 60
        while True:
            m = scrape(port)
            # The server applies a confirmation when it reads the standby status update: wait for both.
            done = min(
                m[("txbuffer_capture_acked_lsn", ())], m.get(("txbuffer_capture_slot_confirmed_flush_lsn", ()), 0)
            )
            if done >= target or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        confirmed, retained = slot_position(postgres, slot)
    finally:
        assert stop(capture) == 0
    assert m[("txbuffer_capture_acked_lsn", ())] >= target, "the capture never confirmed the workload"
    rows = {op: m[("txbuffer_capture_rows_total", (("op", op),))] for op in ("insert", "update", "delete")}
    assert rows == {"insert": 300, "update": 100, "delete": 50}
    assert m[("txbuffer_capture_raw_events_total", ())] >= 450 + 2 * 3  # the rows and 3 BEGIN/COMMIT pairs
    assert m[("txbuffer_capture_sessions_total", ())] == 1
    assert m[("txbuffer_capture_slot_up", ())] == 1 and m[("txbuffer_capture_slot_active", ())] == 1
    # The slot gauges are the server's own view: after the scrape the slot has moved at most forward.
    assert target <= m[("txbuffer_capture_slot_confirmed_flush_lsn", ())] <= confirmed
    assert m[("txbuffer_capture_server_wal_lsn", ())] >= m[("txbuffer_capture_slot_confirmed_flush_lsn", ())]
    lag = m[("txbuffer_capture_server_wal_lsn", ())] - m[("txbuffer_capture_slot_confirmed_flush_lsn", ())]
    assert m[("txbuffer_capture_lag_bytes", ())] == lag
    assert m[("txbuffer_capture_slot_retained_wal_bytes", ())] >= 0 and retained >= 0
    assert m[("process_resident_memory_bytes", ())] > 0
