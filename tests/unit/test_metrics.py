"""processor/metrics.py: Runner.snapshot() figures become Prometheus gauges and monotonic counters."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from processor.runtime.metrics import Metrics


def stats(**kw) -> dict:
    base = dict(
        events=0,
        changes=0,
        committed=0,
        rolled_back=0,
        filtered_txns=0,
        filtered_changes=0,
        late_events=0,
        restarts=0,
        undone=0,
        dead_letters=0,
        abandoned=0,
    )
    base.update(kw)
    return base


def part(**kw) -> dict:
    base = dict(
        phase="running",
        next_offset=0,
        low_watermark=0,
        open_txns=0,
        pending_txns=0,
        watermark=-1,
        buffered_events=0,
        buffered_bytes=0,
        oldest_open_first_offset=None,
        oldest_open_events=0,
        stats=stats(),
    )
    base.update(kw)
    return base


def snap(partitions: dict, changes=0, txns=0, **extra) -> dict:
    return {
        "open_txns": sum(p["open_txns"] for p in partitions.values()),
        "buffered_events": sum(p["buffered_events"] for p in partitions.values()),
        "buffered_bytes": sum(p["buffered_bytes"] for p in partitions.values()),
        "changes_emitted": changes,
        "transactions_emitted": txns,
        "partitions": partitions,
        **extra,
    }


def samples(m: Metrics) -> dict:
    text = generate_latest(m.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: Metrics, name: str, partition: int | None = None, **labels):
    if partition is not None:
        labels["partition"] = str(partition)
    return samples(m).get((name, tuple(sorted(labels.items()))))


def test_update_sets_per_partition_gauges_from_the_snapshot():
    m = Metrics()
    m.update(
        snap(
            {
                0: part(
                    next_offset=120,
                    low_watermark=40,
                    open_txns=3,
                    pending_txns=1,
                    watermark=999,
                    buffered_events=57,
                    buffered_bytes=4096,
                    oldest_open_first_offset=40,
                    oldest_open_events=21,
                    oldest_open_age_ms=12500,
                    lag=8,
                ),
                1: part(next_offset=7, low_watermark=7),
            }
        )
    )
    assert value(m, "txbuffer_open_transactions", 0) == 3
    assert value(m, "txbuffer_pending_transactions", 0) == 1
    assert value(m, "txbuffer_buffered_events", 0) == 57
    assert value(m, "txbuffer_buffered_bytes", 0) == 4096
    assert value(m, "txbuffer_low_watermark_offset", 0) == 40
    assert value(m, "txbuffer_next_offset", 0) == 120
    assert value(m, "txbuffer_watermark_scn", 0) == 999
    assert value(m, "txbuffer_oldest_open_transaction_events", 0) == 21
    assert value(m, "txbuffer_oldest_open_transaction_age_seconds", 0) == 12.5
    assert value(m, "txbuffer_consumer_lag", 0) == 8
    assert value(m, "txbuffer_partition_phase", 0, phase="running") == 1
    assert value(m, "txbuffer_low_watermark_offset", 1) == 7
    assert value(m, "txbuffer_open_transactions", 1) == 0


def test_absent_optional_figures_export_no_series():
    m = Metrics()
    m.update(snap({0: part(open_txns=1)}))
    assert value(m, "txbuffer_consumer_lag", 0) is None
    assert value(m, "txbuffer_oldest_open_transaction_age_seconds", 0) is None
    assert value(m, "txbuffer_oldest_open_transaction_first_offset", 0) is None


def test_cumulative_counts_become_counters_that_never_decrease():
    m = Metrics()
    m.update(
        snap(
            {
                0: part(stats=stats(events=10, committed=2, dead_letters=1, late_events=3, rolled_back=1)),
                1: part(stats=stats(events=5, committed=1)),
            },
            changes=20,
            txns=3,
        )
    )
    assert value(m, "txbuffer_transactions_committed_total", 0) == 2
    assert value(m, "txbuffer_dead_letters_total", 0) == 1
    assert value(m, "txbuffer_late_events_total", 0) == 3
    assert value(m, "txbuffer_transactions_rolled_back_total", 0) == 1
    assert value(m, "txbuffer_changes_emitted_total") == 20
    assert value(m, "txbuffer_transactions_emitted_total") == 3

    # Partition 1 is revoked: its gauges go, its counter keeps its value; totals keep growing.
    m.update(snap({0: part(stats=stats(events=15, committed=4, dead_letters=1))}, changes=31, txns=5))
    assert value(m, "txbuffer_transactions_committed_total", 0) == 4
    assert value(m, "txbuffer_transactions_committed_total", 1) == 1
    assert value(m, "txbuffer_open_transactions", 1) is None
    assert value(m, "txbuffer_partition_phase", 1, phase="running") is None
    assert value(m, "txbuffer_changes_emitted_total") == 31

    # Partition 0 comes back as a fresh engine (stats from zero): its new counts add on.
    m.update(snap({0: part(stats=stats(events=2, committed=1))}, changes=33, txns=6))
    assert value(m, "txbuffer_transactions_committed_total", 0) == 5
    assert value(m, "txbuffer_events_consumed_total", 0) == 17


def test_phase_change_replaces_the_phase_series():
    m = Metrics()
    m.update(snap({0: part(phase="restoring")}))
    m.update(snap({0: part(phase="running")}))
    assert value(m, "txbuffer_partition_phase", 0, phase="running") == 1
    assert value(m, "txbuffer_partition_phase", 0, phase="restoring") is None


def test_lost_state_rebuild_progress_and_held_transactions():
    m = Metrics()
    m.lost_state(2, 150)
    m.lost_state(2, 10)
    m.rebuild_progress(1, 250, 1000)
    m.update(snap({}, held_txns=4, oldest_held_age_ms=1500))
    assert value(m, "txbuffer_lost_state_events_total", 2) == 160
    assert value(m, "txbuffer_lost_state_last_events", 2) == 10
    assert value(m, "txbuffer_dead_letters_total", 2) == 2
    assert value(m, "txbuffer_rebuild_progress_ratio", 1) == 0.25
    assert value(m, "txbuffer_rebuild_remaining", 1) == 750
    assert value(m, "txbuffer_held_transactions") == 4
    assert value(m, "txbuffer_oldest_held_age_seconds") == 1.5


def test_process_memory_is_exported():
    assert value(Metrics(), "process_resident_memory_bytes") > 0


def test_separate_instances_do_not_share_a_registry():
    a, b = Metrics(), Metrics()
    a.update(snap({0: part(open_txns=5)}))
    assert value(b, "txbuffer_open_transactions", 0) is None


def test_start_server_on_port_zero_serves_the_registry():
    m = Metrics()
    port = m.start_server("127.0.0.1", 0)
    try:
        assert port > 0
        m.update(snap({3: part(open_txns=2, low_watermark=11)}))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert 'txbuffer_open_transactions{partition="3"} 2.0' in text
        assert 'txbuffer_low_watermark_offset{partition="3"} 11.0' in text
    finally:
        m.stop_server()
