"""`txbuffer spark`: run the Spark stage (changes topic -> Delta change log + current-state tables).

Spark settings come from the launcher, never from code: spark-submit flags or PYSPARK_SUBMIT_ARGS,
$SPARK_CONF_DIR/spark-defaults.conf, MASTER, a --properties-file, and --conf flags (last wins).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("spark", help="run the Spark Structured Streaming job over txbuffer.changes into Delta Lake")
    default_bootstrap = os.environ.get("TXBUFFER_BOOTSTRAP")  # the processor's setting, as in compose and k8s
    p.add_argument(
        "--bootstrap",
        required=default_bootstrap is None,
        default=default_bootstrap,
        help="Kafka bootstrap servers (default: $TXBUFFER_BOOTSTRAP)",
    )
    p.add_argument("--topic", default="txbuffer.changes")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint location (offsets and dedup state), a URI")
    p.add_argument(
        "--output", required=True, help="lake root, a Hadoop FileSystem URI (file:///data/lake, s3a://bucket/lake)"
    )
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
        "--dedup-horizon",
        default="1 hour",
        help="event_id dedup window on commit time (Spark watermark delay); older redeliveries are not caught",
    )
    p.add_argument(
        "--source",
        choices=["auto", "native", "python"],
        default="auto",
        help="Kafka path: native format('kafka') + from_avro when the jars are present (auto), or the Python source",
    )
    p.add_argument(
        "--merge-threads",
        type=positive_int,
        default=4,
        help="current-state tables a micro-batch MERGEs at once (1: one after another; default 4)",
    )
    p.add_argument(
        "--fold-every",
        type=positive_int,
        default=None,
        help="MERGE the current-state tables every N micro-batches from the change log, which every batch "
        "appends (docs/lakehouse.md: the tables lag by up to N batches); default 1, or spark.txbuffer.state.foldEvery",
    )
    p.add_argument("--master", default=None, help="Spark master URL; default: the launcher's (spark-submit, MASTER)")
    p.add_argument("--properties-file", default=None, help="Spark properties file (key value per line)")
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting, repeatable (as spark-submit)"
    )
    p.add_argument(
        "--expected-dir",
        default=None,
        help="a generator's expected-output directory: verify the current-state tables against it",
    )
    p.set_defaults(func=run)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def spark_conf(args) -> dict[str, str]:
    conf: dict[str, str] = {}
    if args.properties_file:
        for line in Path(args.properties_file).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, value = (re.split(r"\s*=\s*|\s+", line, maxsplit=1) + [""])[:2]
                conf[key] = value
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key] = value
    if args.master:
        conf["spark.master"] = args.master
    return conf


def as_uri(path: str) -> str:
    """Plain local paths become file: URIs; anything with a scheme is passed through."""
    return path if "://" in path or path.startswith("file:") else Path(path).resolve().as_uri()


def run(args) -> int:
    from processor.spark.job import run_job, spark_session
    from processor.spark.readback import row_counts
    from processor.testing.lake_checks import compare_with_summary

    spark = spark_session(conf=spark_conf(args))
    trigger = "available-now" if args.trigger == "available-now" else f"processingTime={args.interval}"
    output = as_uri(args.output)
    try:
        summary = run_job(
            args.bootstrap,
            args.topic,
            args.checkpoint,
            output,
            trigger=trigger,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            starting_offsets=args.starting_offsets,
            spark=spark,
            native=None if args.source == "auto" else args.source == "native",
            dedup_horizon=args.dedup_horizon,
            merge_threads=args.merge_threads,
            fold_every=args.fold_every,
        )
    finally:
        spark.stop()
    result: dict = {"job": summary}
    status = 0
    if output.startswith("file:"):  # the JVM-free readback lists local directories
        counts = row_counts(output)
        for table, n in sorted(counts.items()):
            print(f"{table}\t{n} rows")
        result["row_counts"] = counts
    if args.expected_dir:
        diffs = compare_with_summary(output, args.expected_dir)
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
