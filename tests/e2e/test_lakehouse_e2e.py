"""Lakehouse end to end: PostgreSQL live capture -> txbuffer -> Spark (format("kafka") + from_avro)
-> Delta Lake. The Spark driver is SIGKILLed twice mid-stream and restarted on the same checkpoint.
Read back with delta-rs (no JVM): every current-state table equals its PostgreSQL table row for row
with types, the change log holds each event_id once, and time travel returns the earlier state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from processor.spark.readback import read_changelog, read_table_rows, state_tables, table_version
from processor.testing.lake_checks import compare_state
from tests.integration.processor_kit import Topics, config, read_with_headers, start_processor
from tests.integration.test_postgres_capture import (
    TABLES,
    commit_sentinel,
    db_tables,
    new_database,
    read_raw,
    setup_schema,
    sql,
    start_capture,
    stop,
    wait_streaming,
    worker,
)

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

# Four Spark drivers, each a cold JVM; the limit leaves room for a 2-core machine shared with other work.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
]

ROOT = Path(__file__).resolve().parents[2]
# The test is the launcher. A driver that lives for a batch or two spends its CPU starting up: the
# client JIT (C1 only) and the serial collector leave more of a shared machine's cores to the work.
SPARK_CONF = [
    "--master",
    "local[2]",
    "--conf",
    "spark.sql.shuffle.partitions=2",
    "--conf",
    "spark.ui.enabled=false",
    "--conf",
    "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
]


def capture_and_process(dsn, broker, topics, tmp_path, tag: str, workload) -> None:
    """Live capture while `workload` runs, up to a sentinel commit; then the processor to the end."""
    log = tmp_path / f"capture-{tag}.log"
    capture = start_capture(dsn, broker.bootstrap, topics.raw, log, tmp_path / "capture-state")
    try:
        wait_streaming(log, 1)
        workload()
        read_raw(broker.bootstrap, topics.raw, commit_sentinel(dsn))
    finally:
        stop(capture)
    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    proc = start_processor(cfg, "--available-now", log_path=tmp_path / f"processor-{tag}.log")
    assert proc.wait(300) == 0, (tmp_path / f"processor-{tag}.log").read_text()[-3000:]
    assert read_with_headers(broker.bootstrap, topics.dlq, timeout_s=10) == []


def spark_driver(broker, topic: str, ck: Path, lake: Path, log: Path, per_batch: int | None = None) -> subprocess.Popen:
    """`txbuffer spark` (available-now) on the native Kafka path, as its own process group."""
    cmd = [sys.executable, "-m", "processor.cli", "--log-format", "json", "spark", "--bootstrap", broker.bootstrap]
    cmd += ["--topic", topic, "--checkpoint", str(ck), "--output", lake.as_uri(), "--source", "native"]
    if per_batch is not None:
        cmd += ["--max-offsets-per-trigger", str(per_batch)]
    return subprocess.Popen(
        cmd + SPARK_CONF,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the driver's JVM is in its process group
    )


def changelog_commits(lake: Path) -> int:
    return len(list((lake / "changelog" / "_delta_log").glob("*.json")))


def run_to_end(broker, topic: str, ck: Path, lake: Path, log: Path) -> dict:
    """A restarted driver that lands everything on the topic and exits; its job summary."""
    proc = spark_driver(broker, topic, ck, lake, log)
    try:
        assert proc.wait(900) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    result = [line for line in log.read_text().splitlines() if line.startswith('{"job"')][-1]
    return json.loads(result)["job"]


def kill_after_next_commit(proc: subprocess.Popen, lake: Path, log: Path, timeout_s: float = 900) -> None:
    start, deadline = changelog_commits(lake), time.monotonic() + timeout_s
    try:
        while changelog_commits(lake) <= start:
            assert proc.poll() is None, f"the Spark driver exited before the kill: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "no micro-batch committed in time"
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_postgres_to_delta_with_driver_kills_equals_the_database(postgres, broker, tmp_path):
    dsn = new_database(postgres, "lake")
    setup_schema(dsn, preexisting=0)
    topics = Topics.fresh()
    stats, errors = Counter(), []

    def workload():
        threads = [threading.Thread(target=worker, args=(dsn, w, 8, stats, errors)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors

    capture_and_process(dsn, broker, topics, tmp_path, "1", workload)
    changes = read_with_headers(broker.bootstrap, topics.changes, timeout_s=30)
    assert len(changes) > 200, f"too small a workload to kill mid-stream: {len(changes)} changes"
    per_batch = len(changes) // 5  # the kills land after the first and second of about five batches

    lake, ck, log = tmp_path / "lake", tmp_path / "spark-ck", tmp_path / "spark.log"
    for _ in range(2):  # SIGKILL the driver (and its JVM) twice, each time right after a micro-batch
        kill_after_next_commit(spark_driver(broker, topics.changes, ck, lake, log, per_batch), lake, log)
    assert 0 < read_changelog(lake, ["event_id"]).num_rows < len(changes), "the kills did not land mid-stream"
    summary = run_to_end(broker, topics.changes, ck, lake, tmp_path / "spark-end.log")
    assert summary["native"] and summary["dropped_by_watermark"] == 0 and summary["input_rows"] > 0

    # Second reader (delta-rs): state equals PostgreSQL with types; each event_id exactly once.
    want = db_tables(dsn)
    assert compare_state(lake, as_expected(want)) == {}
    ids = read_changelog(lake, ["event_id"]).column("event_id").to_pylist()
    emitted = {ev for ev in (_event_id(v) for _, _, _, v, _ in changes if v is not None)}
    assert len(ids) == len(set(ids)) and set(ids) == emitted

    # Time travel: one more transaction, then the previous version still reads the earlier state.
    acct = state_tables(lake)["public.acct"]
    earlier_version, earlier = table_version(acct), read_table_rows(acct)
    victim = min(want["public.acct"].values(), key=lambda r: r["id"])["id"]

    def last_change():
        sql(dsn, f"UPDATE acct SET note = 'time-travel' WHERE id > {victim}", f"DELETE FROM acct WHERE id = {victim}")

    capture_and_process(dsn, broker, topics, tmp_path, "2", last_change)
    assert run_to_end(broker, topics.changes, ck, lake, tmp_path / "spark-time-travel.log")["input_rows"] > 0
    now = db_tables(dsn)
    assert compare_state(lake, as_expected(now)) == {}
    assert table_version(acct) > earlier_version
    assert read_table_rows(acct, version=earlier_version) == earlier
    assert compare_state_rows(earlier, want["public.acct"])


def as_expected(tables: dict) -> dict:
    return {t: [({"id": r["id"]}, r) for r in tables[t].values()] for t in TABLES}


def compare_state_rows(rows: dict, db_rows: dict) -> bool:
    from processor.spark.readback import key_string
    from processor.testing.lake_checks import same_row

    want = {key_string({"id": r["id"]}): {k: v for k, v in r.items() if v is not None} for r in db_rows.values()}
    return set(rows) == set(want) and all(same_row(want[k], rows[k]) for k in want)


def _event_id(value: bytes) -> str:
    from processor.core.events import decode_change

    return decode_change(value)["event_id"]
