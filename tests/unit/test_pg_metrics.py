"""The capture's Prometheus collector, over the counters a capture keeps (no server needed)."""

from collections import Counter
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from processor.sources.pg_metrics import CaptureCollector, SlotProbe


def samples(collector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def capture(**stats):
    return SimpleNamespace(
        mapper=SimpleNamespace(stats=Counter(stats)),
        events=42,
        snapshot_rows=7,
        sessions=2,
        acked_lsn=0x1_0000_0100,
        acked_commit_lsn=0x1_0000_00F0,
    )


def test_rows_by_op_messages_by_type_and_the_capture_positions():
    m = samples(CaptureCollector(capture(Insert=5, Update=3, Begin=2, Commit=2, toast_carried=4, ddl=1)))
    assert {op: m[("txbuffer_capture_rows_total", (("op", op),))] for op in ("insert", "update", "delete")} == {
        "insert": 5,
        "update": 3,
        "delete": 0,
    }
    assert m[("txbuffer_capture_messages_total", (("type", "Begin"),))] == 2
    assert not any(name == "txbuffer_capture_messages_total" and labels == (("type", "ddl"),) for name, labels in m)
    assert m[("txbuffer_capture_toast_values_total", (("outcome", "carried"),))] == 4
    assert m[("txbuffer_capture_raw_events_total", ())] == 42
    assert m[("txbuffer_capture_sessions_total", ())] == 2
    assert m[("txbuffer_capture_acked_lsn", ())] == 0x1_0000_0100
    assert not any(name.startswith("txbuffer_capture_slot") for name, _ in m)  # no probe, no slot gauges


def test_a_server_that_does_not_answer_reports_slot_up_0_and_no_positions():
    # Nothing listens on port 9 of the loopback: the probe's connection is refused at once.
    probe = SlotProbe("host=127.0.0.1 port=9 dbname=postgres user=postgres connect_timeout=2", "s")
    m = samples(CaptureCollector(capture(), probe))
    assert m[("txbuffer_capture_slot_up", ())] == 0
    assert ("txbuffer_capture_lag_bytes", ()) not in m
    assert m[("txbuffer_capture_raw_events_total", ())] == 42  # the capture's own figures still come
