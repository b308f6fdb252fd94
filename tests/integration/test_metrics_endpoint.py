"""The Prometheus endpoint, scraped over HTTP while a real Runner consumes from the broker."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid

from prometheus_client.parser import text_string_to_metric_families

from processor.core import events as ev
from processor.kafka.rawtopic import RawTopicWriter
from processor.runtime.config import ProcessorConfig
from processor.runtime.metrics import Metrics
from processor.runtime.runner import Runner
from processor.runtime.status import from_url
from tests.enginekit import R, ins


def by_partition(text: str, name: str) -> dict[int, float]:
    return {
        int(s.labels["partition"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and "partition" in s.labels
    }


def scalar(text: str, name: str) -> float | None:
    return next((s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name), None)


def write_workload(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    """'a' commits (2 changes); 'b' stays open (BEGIN + 3 changes). Returns xid -> (partition, first offset)."""
    first: dict[str, tuple[int, int]] = {}

    def delivered(err, msg):
        assert err is None, err
        first.setdefault(msg.key().decode(), (msg.partition(), msg.offset()))

    writer = RawTopicWriter(bootstrap, topic, partitions=2, on_delivery=delivered)
    for e in (R("a", ev.BEGIN, 0, 1), ins("a", 1, 1), ins("a", 2, 2), R("a", ev.COMMIT, 3, 5)):
        writer.write(e)
    writer.flush()  # 'a' lands first, so 'b' starts after it when both share a partition
    for e in (R("b", ev.BEGIN, 0, 6), ins("b", 1, 3), ins("b", 2, 4), ins("b", 3, 5)):
        writer.write(e)
    writer.flush()
    return first


def test_metrics_endpoint_reports_open_transaction_during_a_run(broker, tmp_path):
    run_id = uuid.uuid4().hex[:8]
    raw = f"raw-{run_id}"
    first = write_workload(broker.bootstrap, raw)
    b_partition, b_first = first["b"]
    cfg = ProcessorConfig(
        bootstrap=broker.bootstrap,
        raw_topic=raw,
        changes_topic=f"changes-{run_id}",
        transactions_topic=f"txns-{run_id}",
        dlq_topic=f"dlq-{run_id}",
        group=f"g-{run_id}",
        state_dir=tmp_path / "state",
        commit_interval_ms=100,
    )
    metrics = Metrics()
    port = metrics.start_server("127.0.0.1", 0)
    url = f"http://127.0.0.1:{port}/metrics"
    runner = Runner(cfg, metrics=metrics)
    seen: dict = {}

    def scrape_until_settled():
        # Runs beside the loop (the Runner owns the main thread: it installs signal handlers).
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    text = resp.read().decode()
                # Settled = 'b' open and 'a' finished (its END acknowledged, its events dropped).
                if (
                    sum(by_partition(text, "txbuffer_open_transactions").values()) == 1
                    and scalar(text, "txbuffer_changes_emitted_total") == 2
                    and scalar(text, "txbuffer_transactions_emitted_total") == 1
                ):
                    seen["text"] = text
                    seen["status"] = from_url(url)
                    return
                time.sleep(0.5)
        finally:
            runner.stop_requested = True

    scraper = threading.Thread(target=scrape_until_settled, daemon=True)
    scraper.start()
    try:
        runner.run()
    finally:
        scraper.join(10)
        metrics.stop_server()

    assert "text" in seen, "the endpoint never showed the open transaction and the emitted one"
    text = seen["text"]
    assert by_partition(text, "txbuffer_open_transactions")[b_partition] == 1
    assert sum(by_partition(text, "txbuffer_buffered_events").values()) == 3
    assert by_partition(text, "txbuffer_buffered_bytes")[b_partition] > 0
    assert by_partition(text, "txbuffer_low_watermark_offset")[b_partition] == b_first
    assert by_partition(text, "txbuffer_oldest_open_transaction_events")[b_partition] == 3
    assert by_partition(text, "txbuffer_next_offset")[b_partition] == b_first + 4
    assert scalar(text, "txbuffer_transactions_emitted_total") == 1
    assert sum(by_partition(text, "txbuffer_transactions_committed_total").values()) == 1
    assert scalar(text, "process_resident_memory_bytes") > 0

    status = seen["status"]
    row = next(p for p in status.partitions if p.partition == b_partition)
    assert (row.open_txns, row.low_watermark, row.oldest_open_events) == (1, b_first, 3)
    assert status.totals["changes_emitted"] == 2 and status.totals["open_txns"] == 1
