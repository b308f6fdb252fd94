"""processor/runtime/liveness.py: an instance without partitions says so, and available-now gives up."""

from __future__ import annotations

import pytest
import structlog

from processor.runtime.liveness import AssignmentWatch, AvailableNowTimeout


def test_unassigned_time_warns_past_the_limit_and_again_each_interval():
    watch = AssignmentWatch("g", "raw", warn_after_ms=10_000)
    t0 = watch.since
    with structlog.testing.capture_logs() as logs:
        watch.update(False, t0 + 5)
        watch.update(False, t0 + 10.5)
        watch.update(False, t0 + 15)
        watch.update(False, t0 + 21)
    warnings = [entry for entry in logs if entry["event"] == "group.unassigned"]
    assert [w["unassigned_s"] for w in warnings] == [10.5, 21.0]
    assert warnings[0]["group"] == "g" and warnings[0]["log_level"] == "warning"
    assert watch.unassigned_s(t0 + 21) == 21


def test_holding_a_partition_resets_the_clock_and_reports_zero():
    watch = AssignmentWatch("g", "raw", warn_after_ms=1_000)
    t0 = watch.since
    with structlog.testing.capture_logs() as logs:
        watch.update(False, t0 + 2)
        watch.update(True, t0 + 3)
    assert watch.unassigned_s(t0 + 4) == 0 and watch.figures() == {"unassigned_s": 0.0, "unassigned_warning": 0}
    assert [e["event"] for e in logs] == ["group.unassigned", "group.assigned_again"]
    watch.update(False, t0 + 10)  # lost everything again: counts from here
    assert watch.unassigned_s(t0 + 10.5) == 0.5


def test_figures_flag_an_instance_unassigned_past_the_warning():
    watch = AssignmentWatch("g", "raw", warn_after_ms=0)
    figures = watch.figures()
    assert figures["unassigned_warning"] == 1 and figures["unassigned_s"] >= 0


def test_available_now_fails_with_a_clear_error_after_its_timeout():
    watch = AssignmentWatch("g", "raw", warn_after_ms=1_000, fail_after_ms=5_000)
    t0 = watch.since
    watch.update(False, t0 + 4.9)
    with pytest.raises(AvailableNowTimeout, match="no partition of 'raw' assigned to this instance for 5 s"):
        watch.update(False, t0 + 5)


def test_without_a_timeout_it_only_warns():
    watch = AssignmentWatch("g", "raw", warn_after_ms=1_000, fail_after_ms=0)
    watch.update(False, watch.since + 3600)  # no exception


def test_metrics_and_status_show_an_instance_without_partitions():
    from prometheus_client import generate_latest

    from processor.runtime import status
    from processor.runtime.metrics import Metrics

    m = Metrics()
    m.update({"partitions": {}, "unassigned_s": 42.0, "unassigned_warning": 1})
    text = generate_latest(m.registry).decode()
    assert "txbuffer_unassigned_seconds 42.0" in text and "txbuffer_unassigned_warning 1.0" in text
    report = status.from_metrics_text(text, source="test")
    assert report.totals["unassigned_s"] == 42.0
    assert "WARNING: this instance has held no partition for 42.0s" in status.render(report)
