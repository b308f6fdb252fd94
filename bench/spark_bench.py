"""Spark stage benchmark: records/s from txbuffer.changes to the change log and current-state tables.

`bench_spark(bootstrap, n)` produces n synthetic ChangeEvents (10 tables, 100k keys, mostly
updates, 5% deletes, 2% at-least-once duplicates) to a fresh 4-partition topic, then runs the job
with the available-now trigger on a local[2] session. `records_per_s` counts input records over
the query's run time (JVM start-up and producing excluded; both are reported separately).
"""

from __future__ import annotations

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
    bootstrap: str, n_changes: int = 1_000_000, max_offsets_per_trigger: int = 250_000, partitions: int = 4
) -> dict:
    from processor.kafka.clients import ensure_topics, make_producer, produce_all
    from processor.spark.job import run_job, spark_session
    from processor.spark.readback import row_counts

    topic = f"bench-changes-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: partitions})
    t0 = time.monotonic()
    produce_all(make_producer(bootstrap), topic, ((k, v, None) for k, v in synthetic_changes(n_changes)))
    produce_s = time.monotonic() - t0
    work = tempfile.mkdtemp(prefix="txbuffer-spark-bench-")
    t1 = time.monotonic()
    spark = spark_session(app="txbuffer-bench")
    startup_s = time.monotonic() - t1
    try:
        summary = run_job(
            bootstrap, topic, f"{work}/ck", f"{work}/out", spark=spark, max_offsets_per_trigger=max_offsets_per_trigger
        )
        rows = sum(row_counts(f"{work}/out").values())
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "records": n_changes,
        "input_rows": summary["input_rows"],
        "batches": summary["batches"],
        "query_seconds": summary["seconds"],
        "records_per_s": round(n_changes / summary["seconds"], 1),
        "spark_startup_seconds": round(startup_s, 2),
        "produce_seconds": round(produce_s, 2),
        "current_state_rows": rows,
        "max_offsets_per_trigger": max_offsets_per_trigger,
        "master": "local[2]",
    }
    log.info("bench.spark", **result)
    return result


if __name__ == "__main__":
    import json
    import sys

    from processor.kafka.embedded import EmbeddedKafka

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with EmbeddedKafka() as broker:
        print(json.dumps(bench_spark(broker.bootstrap, n)))
