"""Spark stage benchmark: changes/s from txbuffer.changes (format("kafka") + from_avro) into the Delta
change log and the MERGEd current-state tables.

`bench_spark(bootstrap, n)` produces n synthetic ChangeEvents (10 tables, 100k keys, mostly
updates, 5% deletes, 2% at-least-once duplicates) to a fresh 4-partition topic on Apache Kafka,
then runs the job on a local[2] session with the given batch size (maxOffsetsPerTrigger) and
trigger.

    .venv/bin/python -m bench.spark_bench --changes 1000000 --batch 250000 --trigger available-now
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
import uuid

import structlog

log = structlog.get_logger(__name__)


def synthetic_changes(n: int, seed: int = 0, tables: int = 10, keys: int = 100_000):
    from processor.testing.spark_synth import change_event, kafka_record

    rng = random.Random(seed)
    emitted = []
    scn = 1000
    for _i in range(n):
        if emitted and rng.random() < 0.02:
            yield rng.choice(emitted[-1000:])  # a redelivery: the sink must drop it
            continue
        scn += 1
        t, k = rng.randrange(tables), rng.randrange(keys)
        table, key = f"bench.t{t}", {"id": k}
        if rng.random() < 0.05:
            ev = change_event(table, key, "d", scn, 1)
        else:
            ev = change_event(
                table,
                key,
                "u",
                scn,
                1,
                after={"id": k, "qty": rng.randrange(1000), "price": rng.random() * 100, "name": f"item-{k}"},
            )
        rec = kafka_record(ev)
        emitted.append(rec)
        if len(emitted) > 5000:
            del emitted[:4000]
        yield rec


def bench_spark(
    bootstrap: str,
    n_changes: int = 1_000_000,
    max_offsets_per_trigger: int = 250_000,
    partitions: int = 4,
    trigger: str = "available-now",
    tables: int = 10,
    master: str = "local[2]",
    native: bool = True,
) -> dict:
    """Native Kafka source -> from_avro -> dedup -> Delta change log + MERGE into current state.

    `changes_per_s` = input records / the query's run time (JVM start-up and producing excluded,
    reported separately). The batch size is max_offsets_per_trigger; the trigger is available-now
    or processingTime=<interval>.
    """
    from processor.kafka.admin import ensure_topics
    from processor.kafka.client_config import make_producer
    from processor.kafka.produce import produce_all
    from processor.spark.job import run_job, spark_session
    from processor.spark.readback import row_counts

    topic = f"bench-changes-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: partitions})
    t0 = time.monotonic()
    produce_all(make_producer(bootstrap), topic, ((k, v, None) for k, v in synthetic_changes(n_changes, tables=tables)))
    produce_s = time.monotonic() - t0
    work = tempfile.mkdtemp(prefix="txbuffer-spark-bench-")
    t1 = time.monotonic()
    # The benchmark is the launcher: it picks the master and parallelism, as spark-submit would.
    conf = {
        "spark.master": master,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "2g",
    }
    spark = spark_session(app="txbuffer-bench", conf=conf)
    startup_s = time.monotonic() - t1
    try:
        summary = run_job(
            bootstrap,
            topic,
            f"{work}/ck",
            f"file://{work}/lake",
            trigger=trigger,
            spark=spark,
            native=native,
            max_offsets_per_trigger=max_offsets_per_trigger,
            timeout_s=None if trigger == "available-now" else 3600,
            until_rows=None if trigger == "available-now" else n_changes,
        )
        rows = sum(row_counts(f"{work}/lake").values())
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "records": n_changes,
        "input_rows": summary["input_rows"],
        "batches": summary["batches"],
        "batch_seconds": summary.get("batch_seconds"),
        "batch_durations_ms": summary.get("batch_durations"),  # addBatch = the Delta writes
        "query_seconds": summary["seconds"],
        "changes_per_s": round(summary["input_rows"] / summary["seconds"], 1),
        "records_per_s": round(summary["input_rows"] / summary["seconds"], 1),
        "spark_startup_seconds": round(startup_s, 2),
        "produce_seconds": round(produce_s, 2),
        "current_state_rows": rows,
        "tables": tables,
        "max_offsets_per_trigger": max_offsets_per_trigger,
        "trigger": trigger,
        "master": master,
        "kafka_path": "native" if summary["native"] else "python",
        "load_average": [round(x, 2) for x in os.getloadavg()],  # a shared machine skews every figure
    }
    log.info("bench.spark", **result)
    return result


if __name__ == "__main__":
    import argparse
    import json

    from processor.kafka.embedded import EmbeddedKafka

    p = argparse.ArgumentParser(description="Spark stage: native Kafka -> Delta MERGE, changes/s")
    p.add_argument("--changes", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    p.add_argument("--trigger", default="available-now", help="available-now | processingTime=<interval>")
    p.add_argument("--tables", type=int, default=10)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--python-source", action="store_true", help="the fallback Python Kafka source")
    a = p.parse_args()
    with EmbeddedKafka() as broker:
        out = bench_spark(
            broker.bootstrap,
            a.changes,
            a.batch,
            trigger=a.trigger,
            tables=a.tables,
            master=a.master,
            native=not a.python_source,
        )
        print(json.dumps(out))
