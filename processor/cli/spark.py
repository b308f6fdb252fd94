"""`txbuffer spark`: run the Spark stage (changes topic -> change log + current-state tables)."""

from __future__ import annotations

import json
import os


def register(sub) -> None:
    p = sub.add_parser("spark", help="run the Spark Structured Streaming job over txbuffer.changes")
    default_bootstrap = os.environ.get("TXBUFFER_BOOTSTRAP")  # the processor's setting, as in compose and k8s
    p.add_argument(
        "--bootstrap",
        required=default_bootstrap is None,
        default=default_bootstrap,
        help="Kafka bootstrap servers (default: $TXBUFFER_BOOTSTRAP)",
    )
    p.add_argument("--topic", default="txbuffer.changes")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (offsets and dedup state)")
    p.add_argument("--output", required=True, help="output directory: changelog/ and state/")
    p.add_argument(
        "--trigger",
        choices=["available-now", "continuous-interval"],
        default="available-now",
        help="available-now: process what exists at start and exit; continuous-interval: run forever",
    )
    p.add_argument("--interval", default="10 seconds", help="micro-batch interval for continuous-interval")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None, help="records per micro-batch (default: all)")
    p.add_argument("--starting-offsets", default="earliest", help="earliest | latest | JSON, for a new checkpoint")
    p.add_argument(
        "--packages",
        default=None,
        help="extra Maven packages, e.g. org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 for format('kafka')",
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument(
        "--expected-dir",
        default=None,
        help="a generator's expected-output directory: verify the current-state tables against it",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.spark.job import run_job, spark_session
    from processor.spark.readback import row_counts
    from processor.testing.lake_checks import compare_with_summary

    spark = spark_session(master=args.master, packages=args.packages, shuffle_partitions=args.shuffle_partitions)
    trigger = "available-now" if args.trigger == "available-now" else f"processingTime={args.interval}"
    try:
        summary = run_job(
            args.bootstrap,
            args.topic,
            args.checkpoint,
            args.output,
            trigger=trigger,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            packages=args.packages,
            starting_offsets=args.starting_offsets,
            spark=spark,
        )
    finally:
        spark.stop()
    counts = row_counts(args.output)
    for table, n in sorted(counts.items()):
        print(f"{table}\t{n} rows")
    result = {"job": summary, "row_counts": counts}
    status = 0
    if args.expected_dir:
        diffs = compare_with_summary(args.output, args.expected_dir)
        result["matches_expected"] = not diffs
        if diffs:
            result["differences"] = {t: {k: v[:5] for k, v in d.items()} for t, d in diffs.items()}
            status = 1
        print(
            "current state matches the generator's final state"
            if not diffs
            else f"current state DIFFERS from the generator's final state in {sorted(diffs)}"
        )
    print(json.dumps(result, default=str))
    return status
