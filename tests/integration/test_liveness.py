"""No silent hangs on a real broker: an --available-now instance that can never get a partition
(the only one is held by another member) says so in its logs and metrics, then fails with a clear
error and a non-zero exit after available_now_timeout_ms instead of polling forever."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from processor.core import events as ev
from processor.kafka.embedded import free_port
from processor.kafka.rawtopic import RawTopicWriter

from .processor_kit import Topics, config, run_args, start_processor

pytestmark = pytest.mark.integration


def _log_events(path, name: str) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            out.append(json.loads(line))
    return out


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return ""


def test_available_now_without_a_partition_warns_then_fails_after_its_timeout(broker, tmp_path):
    topics = Topics.fresh()
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    # t1 stays open, so the holder's committed low watermark stays below the end: nothing proves to the
    # waiter that the input is done elsewhere.
    w.write(ev.raw_event("t1", ev.BEGIN, 0, 1))
    w.write(ev.raw_event("t1", ev.INSERT, 1, 2, table="s.t", key={"id": 1}, after={"id": 1}))
    w.flush()
    holder_log, waiter_log = tmp_path / "holder.log", tmp_path / "waiter.log"
    holder = start_processor(config(broker.bootstrap, topics, tmp_path / "state-a"), log_path=holder_log)
    waiter = None
    try:
        deadline = time.monotonic() + 90
        while not _log_events(holder_log, "partition.assigned"):
            assert holder.poll() is None and time.monotonic() < deadline, holder_log.read_text()[-2000:]
            time.sleep(0.5)
        port = free_port()
        args = run_args(config(broker.bootstrap, topics, tmp_path / "state-b")) + [
            "--available-now",
            "--available-now-timeout-ms",
            "15000",
            "--unassigned-warn-ms",
            "2000",
            "--metrics-port",
            str(port),
        ]
        started = time.monotonic()
        with open(waiter_log, "ab") as out:
            waiter = subprocess.Popen(args, stdout=out, stderr=out)
        warned_in_metrics = False
        while waiter.poll() is None and time.monotonic() - started < 120:
            warned_in_metrics = warned_in_metrics or "txbuffer_unassigned_warning 1.0" in _scrape(port)
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        assert waiter.poll() is not None, "the --available-now instance is still waiting after 120 s"
        assert waiter.returncode == 6, waiter_log.read_text()[-2000:]  # EXIT_AVAILABLE_NOW_TIMEOUT
        assert 15 <= elapsed < 90, elapsed
        timeouts = _log_events(waiter_log, "run.available_now_timeout")
        assert timeouts and "no partition of" in timeouts[-1]["reason"], waiter_log.read_text()[-2000:]
        assert _log_events(waiter_log, "group.unassigned"), "no warning logged before the timeout"
        assert warned_in_metrics, "txbuffer_unassigned_warning never reached 1 on the metrics endpoint"
        assert "AvailableNowTimeout" in waiter_log.read_text()
        assert holder.poll() is None  # the member holding the partition is unaffected
    finally:
        for proc in (waiter, holder):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def test_available_now_without_a_partition_finishes_when_others_committed_everything(broker, tmp_path):
    """More members than partitions: the input that existed at start is done (another member
    committed its low watermark at the end), so the instance that never got a partition exits 0
    instead of waiting for an assignment it does not need."""
    topics = Topics.fresh()
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    w.write(ev.raw_event("t1", ev.INSERT, 1, 1, table="s.t", key={"id": 1}, after={"id": 1}))
    w.write(ev.raw_event("t1", ev.COMMIT, 2, 2))
    w.flush()
    holder_log, waiter_log = tmp_path / "holder.log", tmp_path / "waiter.log"
    holder = start_processor(config(broker.bootstrap, topics, tmp_path / "state-a"), log_path=holder_log)
    try:
        deadline = time.monotonic() + 90
        while not _log_events(holder_log, "partition.assigned"):
            assert holder.poll() is None and time.monotonic() < deadline, holder_log.read_text()[-2000:]
            time.sleep(0.5)
        args = run_args(config(broker.bootstrap, topics, tmp_path / "state-b")) + [
            "--available-now",
            "--available-now-timeout-ms",
            "60000",
        ]
        with open(waiter_log, "ab") as out:
            code = subprocess.run(args, stdout=out, stderr=out, timeout=120).returncode
        assert code == 0, waiter_log.read_text()[-2000:]
        assert not _log_events(waiter_log, "partition.assigned")
        assert _log_events(waiter_log, "run.available_now_done")
    finally:
        holder.terminate()
        try:
            holder.wait(30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait(10)
