"""`txbuffer run --workers N` on Apache Kafka: N members of one group, each with its own state dir."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psutil
import pytest

from processor.core.events import raw_event
from processor.core.partitioning import partition_of
from processor.kafka.rawtopic import RawTopicWriter
from processor.testing.verify import verify

from .processor_kit import Topics, config, run_args, write_workload
from .test_processor import assert_exact

pytestmark = pytest.mark.integration


def test_two_workers_share_the_partitions_and_emit_exactly(broker, tmp_path):
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    write_workload(broker.bootstrap, topics.raw, expected, events=20_000, seed=3)
    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    done = subprocess.run(
        [*run_args(cfg), "--available-now", "--workers", "2"], capture_output=True, timeout=300, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["worker-0", "worker-1"]
    finished = [line for line in done.stderr.splitlines() if '"run.available_now_done"' in line]
    assert len(finished) == 2  # both members ran to the end offsets
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)
    assert report.duplicates_before_dedup == 0


def test_a_worker_that_dies_stops_the_others_and_its_code_is_the_exit_code(broker, tmp_path):
    topics = Topics.fresh()
    write_workload(broker.bootstrap, topics.raw, tmp_path / "expected", events=2_000, seed=4)
    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    supervisor = subprocess.Popen(
        [*run_args(cfg), "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )  # no --available-now: the workers would run forever
    try:
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline and len(workers) < 2:
            workers = psutil.Process(supervisor.pid).children()
            time.sleep(0.2)
        assert len(workers) == 2
        time.sleep(3)
        workers[0].send_signal(signal.SIGKILL)
        rc = supervisor.wait(60)
        assert rc == 128 + signal.SIGKILL
        assert not workers[1].is_running() or workers[1].status() == psutil.STATUS_ZOMBIE
    finally:
        if supervisor.poll() is None:
            supervisor.kill()


def test_a_member_taking_over_partitions_at_their_available_now_target_rebuilds_nothing(broker, tmp_path):
    """The last member of an --available-now group run takes over the partitions of those that
    finished first. At their targets there is nothing to read: no completed-index rebuild from the
    outputs (seconds per partition), the partitions are paused, and nothing more is emitted."""
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    write_workload(broker.bootstrap, topics.raw, expected, events=5_000, seed=5)
    first = config(broker.bootstrap, topics, tmp_path / "first")
    done = subprocess.run([*run_args(first), "--available-now"], capture_output=True, timeout=300, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_exact(verify(broker.bootstrap, expected, topics.changes, topics.transactions))

    # One partition gets a record past the first run's end: the BEGIN of a transaction left open, so
    # nothing new is emitted. Without it every partition is committed at its target, and a member
    # whose first poll ends before its assignment arrives (a loaded machine) is rightly done holding
    # nothing: it would never take a partition over. With it, the member waits for its assignment.
    writer, xid = RawTopicWriter(broker.bootstrap, topics.raw, create=False), "open-after-the-first-run"
    writer.write(raw_event(xid, "BEGIN", 0, 10**9))
    writer.flush()
    reading = partition_of(xid, writer.partitions)
    at_target = sorted(set(range(writer.partitions)) - {reading})

    # A member with no local store, as a worker that takes over a finished member's partitions.
    second = config(broker.bootstrap, topics, tmp_path / "second")
    again = subprocess.run([*run_args(second), "--available-now"], capture_output=True, timeout=300, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    events = [json.loads(line) for line in again.stderr.splitlines() if line.startswith("{")]
    paused = [p for e in events if e["event"] == "partition.nothing_to_read" for p in e["partitions"]]
    assert sorted(paused) == at_target
    rebuilt = [int(p) for e in events if e["event"] == "index.rebuilt" for p in e["found"]]
    assert rebuilt == [reading]  # only the partition with a record to read
    assert [e["source"] for e in events if e["event"] == "partition.assigned"] == ["rebuild-empty"] * 4
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)
    assert report.duplicates_before_dedup == 0  # the second run emitted nothing
