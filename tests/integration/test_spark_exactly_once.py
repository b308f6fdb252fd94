"""The Spark stage under SIGKILL: the driver dies twice mid-stream, restarts on the same checkpoint,
and the Delta change log still holds each event_id exactly once (read back with delta-rs)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from processor.spark.job import run_job
from processor.spark.readback import read_changelog
from processor.testing.lake_checks import compare_state
from tests.integration.test_spark_sinks import produce, reference, workload

# Spark on a shared 2-core machine: micro-batches of a few rows can take minutes.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]

JOB_SCRIPT = textwrap.dedent("""
    import sys
    from processor.runtime.logs import configure_logging
    from processor.spark.job import run_job, spark_session
    configure_logging("json", "INFO")
    # A driver that lives for a batch or two spends its CPU starting up: C1 only and the serial
    # collector leave more of a shared machine's cores to the work (as test_lakehouse_e2e's drivers).
    spark = spark_session(conf={"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2",
                                "spark.ui.enabled": "false", "spark.driver.memory": "1g",
                                "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    run_job(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], max_offsets_per_trigger=int(sys.argv[5]),
            spark=spark, dedup_horizon="1000 days")
""")


def changelog_versions(out: Path) -> int:
    return len(list((out / "changelog" / "_delta_log").glob("*.json")))


def start_driver(broker, topic: str, ck: Path, out: Path, per_batch: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", JOB_SCRIPT, broker.bootstrap, topic, str(ck), out.as_uri(), str(per_batch)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the JVM is in the same process group: killpg takes both
    )


def kill_after_next_commit(proc: subprocess.Popen, out: Path, timeout_s: float = 1500) -> None:
    """SIGKILL the driver (and its JVM) right after one more change-log commit: later batches are
    planned or half-written."""
    start = changelog_versions(out)
    deadline = time.monotonic() + timeout_s
    try:
        while changelog_versions(out) <= start:
            assert proc.poll() is None, "the job exited before it was killed"
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_change_log_has_each_event_id_once_after_the_driver_is_killed_twice(spark, broker, changes_topic, tmp_path):
    events = workload(300, seed=3)
    redelivered = random.Random(5).sample(events, 80)
    produce(broker.bootstrap, changes_topic, events + redelivered)
    unique = {ev["event_id"] for ev in events}
    out, ck = tmp_path / "lake", tmp_path / "ck"

    for _ in range(2):
        kill_after_next_commit(start_driver(broker, changes_topic, ck, out, 200), out)
        partial = read_changelog(out, ["event_id"]).num_rows
        assert 0 < partial < len(unique), "the kill did not land mid-stream"

    run_job(
        broker.bootstrap,
        changes_topic,
        str(ck),
        out.as_uri(),
        spark=spark,
        max_offsets_per_trigger=200,
        dedup_horizon="1000 days",
    )

    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    assert sorted(ids) == sorted(unique)
    assert compare_state(out, reference(events)) == {}
