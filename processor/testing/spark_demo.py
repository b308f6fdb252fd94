"""The Spark stage of `txbuffer demo`: land txbuffer.changes, then compare with the expected final state."""

from __future__ import annotations

from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def run_spark_stage(
    bootstrap: str, workdir: Path, expected_dir: Path, topic: str = "txbuffer.changes"
) -> tuple[bool, list[str]]:
    """Returns (ok, report lines): per-table row counts and whether they equal the generator's final state."""
    from processor.spark.job import run_job, spark_session
    from processor.spark.readback import read_changelog, row_counts
    from processor.testing.lake_checks import compare_with_summary

    out, ck = workdir / "spark" / "output", workdir / "spark" / "checkpoint"
    spark = spark_session(app="txbuffer-demo")
    try:
        summary = run_job(bootstrap, topic, str(ck), str(out), spark=spark)
    finally:
        spark.stop()
    counts = row_counts(out)
    diffs = compare_with_summary(out, expected_dir)
    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    unique = len(ids) == len(set(ids))
    lines = [
        f"  spark:      {summary['input_rows']} records in {summary['seconds']:.1f} s, {summary['batches']} "
        f"batches; change log {len(ids)} events ({'each event_id once' if unique else 'DUPLICATE event_ids'})"
    ]
    lines += [f"    {table:<24} {n:>8} rows" for table, n in sorted(counts.items())]
    if diffs:
        lines.append(f"    current state DIFFERS from the expected final state: {sorted(diffs)}")
        for table, d in sorted(diffs.items()):
            log.warning("spark.demo.state_differs", table=table, **{k: v[:5] for k, v in d.items()})
    else:
        lines.append("    current-state tables equal the generator's expected final state")
    return (not diffs and unique), lines
