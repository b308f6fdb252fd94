"""The Spark stage of `txbuffer demo`: land txbuffer.changes in Delta Lake, then verify the tables.

Verified with delta-rs (a reader independent of Spark): every current-state table equals the
generator's expected final state, and the change log holds each event_id once.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

# The demo is its own launcher: a small local session unless the environment says otherwise.
DEMO_CONF = {
    "spark.master": os.environ.get("MASTER", "local[2]"),
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def run_spark_stage(
    bootstrap: str, workdir: Path, expected_dir: Path, topic: str = "txbuffer.changes"
) -> tuple[bool, list[str]]:
    """Returns (ok, report lines): per-table row counts and whether they equal the generator's final state."""
    from processor.spark.job import run_job, spark_session
    from processor.spark.readback import read_changelog, row_counts
    from processor.testing.lake_checks import compare_with_summary

    out, ck = (workdir / "spark" / "lake").resolve(), workdir / "spark" / "checkpoint"
    spark = spark_session(app="txbuffer-demo", conf=DEMO_CONF)
    try:
        summary = run_job(bootstrap, topic, str(ck), out.as_uri(), spark=spark)
    finally:
        spark.stop()
    counts = row_counts(out)
    diffs = compare_with_summary(out, expected_dir)
    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    unique = len(ids) == len(set(ids))
    path = "format('kafka') + from_avro" if summary["native"] else "Python Kafka source"
    lines = [
        f"  spark:      {summary['input_rows']} records in {summary['seconds']:.1f} s, {summary['batches']} "
        f"batches via {path}; Delta change log {len(ids)} events "
        f"({'each event_id once' if unique else 'DUPLICATE event_ids'})",
        f"    lake:     {out.as_uri()} (read back with deltalake)",
    ]
    lines += [f"    {table:<24} {n:>8} rows" for table, n in sorted(counts.items())]
    if diffs:
        lines.append(f"    Delta current state DIFFERS from the expected final state: {sorted(diffs)}")
        for table, d in sorted(diffs.items()):
            log.warning("spark.demo.state_differs", table=table, **{k: v[:5] for k, v in d.items()})
    else:
        lines.append("    Delta current-state tables verified: equal to the generator's expected final state")
    return (not diffs and unique), lines
