"""Spark stage benchmark: changes/s from txbuffer.changes (format("kafka") + from_avro) into the Delta
change log and the MERGEd current-state tables.

`bench_spark(bootstrap, n)` produces n synthetic ChangeEvents (10 tables, 100k keys, mostly
updates, 5% deletes, 2% at-least-once duplicates) to a fresh 4-partition topic on Apache Kafka,
then runs the job on a local[2] session with the given batch size (maxOffsetsPerTrigger) and
trigger.

    .venv/bin/python -m bench.spark_bench --changes 1000000 --batch 250000 --trigger available-now

The result also says where the time went: per batch the inspect, change-log and per-table MERGE
seconds and Spark jobs (`writes`), per state table Delta's own MERGE metrics from its history
(execution, scan and rewrite ms, files added and removed) and its file count (`merges`), and
whether every record was read (`source_records` = Kafka log ends, `distinct_events`, the change
log's rows).
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


def synthetic_changes(
    n: int,
    seed: int = 0,
    tables: int = 10,
    keys: int = 100_000,
    counts: dict | None = None,
    commit_ms: int = 1000,
):
    """n Kafka records; `counts` gets "redeliveries" (records that repeat an earlier one). Commit
    times are `commit_ms` apart (1000: a million changes span 11.6 days of commit dates)."""
    from processor.testing.spark_synth import BASE_TS_MS, change_event, kafka_record

    rng = random.Random(seed)
    emitted = []
    scn = 1000
    for _i in range(n):
        if emitted and rng.random() < 0.02:
            if counts is not None:
                counts["redeliveries"] = counts.get("redeliveries", 0) + 1
            yield rng.choice(emitted[-1000:])  # a redelivery: the sink must drop it
            continue
        scn += 1
        t, k = rng.randrange(tables), rng.randrange(keys)
        table, key = f"bench.t{t}", {"id": k}
        if rng.random() < 0.05:
            ev = change_event(table, key, "d", scn, 1, ts_ms=BASE_TS_MS + commit_ms * scn)
        else:
            ev = change_event(
                table,
                key,
                "u",
                scn,
                1,
                after={"id": k, "qty": rng.randrange(1000), "price": rng.random() * 100, "name": f"item-{k}"},
                ts_ms=BASE_TS_MS + commit_ms * scn,
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
    merge_threads: int = 4,
    conf: dict[str, str] | None = None,
    stage: str = "full",
    commit_ms: int = 1000,
    fold_every: int = 1,
    keep_changelog: str | None = None,
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
    from processor.spark.readback import read_changelog, row_counts

    topic = f"bench-changes-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: partitions})
    t0 = time.monotonic()
    counts: dict[str, int] = {}
    records = synthetic_changes(n_changes, tables=tables, counts=counts, commit_ms=commit_ms)
    produce_all(make_producer(bootstrap), topic, ((k, v, None) for k, v in records))
    produce_s = time.monotonic() - t0
    source_records = log_end_total(bootstrap, topic)
    work = tempfile.mkdtemp(prefix="txbuffer-spark-bench-")
    t1 = time.monotonic()
    # The benchmark is the launcher: it picks the master and parallelism, as spark-submit would.
    conf = {
        "spark.master": master,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # 4g rather than 2g: the fold's MERGEs of millions of changes spend a third less in GC (f4_4M_4g*, docs/lakehouse.md)
        "spark.driver.memory": "4g",
        **(conf or {}),
    }
    spark = spark_session(app="txbuffer-bench", conf=conf)
    startup_s = time.monotonic() - t1
    cpu0 = jvm_cpu_seconds(spark)
    sampler = JvmCpuSampler(spark)
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
            merge_threads=merge_threads,
            stage=stage,
            fold_every=fold_every,
        )
        query_cpu_s = jvm_cpu_seconds(spark) - cpu0
        sampler.stop()
        wrote = stage in ("changelog", "full")  # the cut stages before them write no lake
        rows = sum(row_counts(f"{work}/lake").values()) if stage == "full" else 0
        changelog_rows = read_changelog(f"{work}/lake", ["event_id"]).num_rows if wrote else 0
        merges = merge_history(spark, f"file://{work}/lake") if stage == "full" else {}
    finally:
        sampler.stop()
        spark.stop()
        if keep_changelog and os.path.isdir(f"{work}/lake/changelog"):  # for refold()
            shutil.rmtree(keep_changelog, ignore_errors=True)
            shutil.copytree(f"{work}/lake/changelog", keep_changelog)
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "records": n_changes,
        "source_records": source_records,  # the topic's log ends: what the producer landed
        "distinct_events": n_changes - counts.get("redeliveries", 0),
        "changelog_rows": changelog_rows,  # each distinct event once
        "input_rows": summary["input_rows"],  # records the Kafka source read, redeliveries included
        "batches": summary["batches"],
        "batch_seconds": summary.get("batch_seconds"),
        "batch_durations_ms": summary.get("batch_durations"),  # addBatch = the Delta writes
        "query_seconds": summary["seconds"],
        "changes_per_s": round(summary["input_rows"] / summary["seconds"], 1),
        # CPU the Spark JVM spent in the query (driver and executor threads): less swayed by the other
        # work on a shared machine than the wall-clock rate.
        "query_cpu_seconds": round(query_cpu_s, 1),
        "cpu_us_per_change": round(1e6 * query_cpu_s / max(1, summary["input_rows"]), 1),
        # Per batch with rows: the JVM's CPU during the batch per input record. The first batch carries
        # the JVM's warm-up (the JIT compiles Spark, Delta, Parquet and Kafka code as it first runs).
        "batch_cpu_us_per_change": sampler.per_batch(summary.get("batch_durations") or []),
        "batch_jit_us_per_change": sampler.per_batch(summary.get("batch_durations") or [], jit=True),
        # The query's JVM CPU by thread group (s): executor tasks, JIT compilers, GC, the rest.
        "jvm_thread_cpu_s": sampler.by_group(),
        "records_per_s": round(summary["input_rows"] / summary["seconds"], 1),
        "spark_startup_seconds": round(startup_s, 2),
        "produce_seconds": round(produce_s, 2),
        "current_state_rows": rows,
        "tables": tables,
        "max_offsets_per_trigger": max_offsets_per_trigger,
        "trigger": trigger,
        "merge_threads": merge_threads,
        "stage": stage,
        "commit_ms": commit_ms,
        "fold_every": fold_every,
        "conf": conf or {},
        "writes": summary.get("writes"),
        "merges": merges,
        "master": master,
        "kafka_path": "native" if summary["native"] else "python",
        "load_average": [round(x, 2) for x in os.getloadavg()],  # a shared machine skews every figure
    }
    log.info("bench.spark", **{k: v for k, v in result.items() if k not in ("writes", "merges")})
    return result


def jvm_cpu_seconds(spark) -> float:
    """CPU time (user + system) of the Spark JVM so far, every thread: driver and local executor."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class JvmCpuSampler:
    """Samples the Spark JVM's CPU twice a second while the query runs (a daemon thread): the
    total, to split it by micro-batch, and each thread's, to split it by what the thread does."""

    GROUPS = (("jit", "CompilerThre"), ("gc", "GC Thread"), ("gc", "G1 "), ("tasks", "Executor task"))

    def __init__(self, spark, interval_s: float = 0.5):
        import threading

        self.pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        self.tick = os.sysconf("SC_CLK_TCK")
        self.samples: list[tuple[float, float, float]] = []  # (epoch s, JVM CPU s, its JIT compilers' CPU s)
        self.start_threads = self._threads()
        self.last_threads = dict(self.start_threads)
        self._stop = threading.Event()
        self._interval = interval_s
        self._thread = threading.Thread(target=self._run, name="jvm-cpu-sampler", daemon=True)
        self._thread.start()

    def _threads(self) -> dict[str, tuple[str, float]]:
        out = {}
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # the thread ended
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            out[tid] = (comm, (int(fields[11]) + int(fields[12])) / self.tick)
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                now, cpu = time.time(), (int(fields[11]) + int(fields[12])) / self.tick
                self.last_threads.update(self._threads())
                jit = sum(c for comm, c in self.last_threads.values() if "CompilerThre" in comm)
                self.samples.append((now, cpu, jit))
            except OSError:
                return
            self._stop.wait(self._interval)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()

    def cpu_at(self, t: float, jit: bool = False) -> float | None:
        """The JVM's CPU seconds (or its JIT compilers') at epoch t, interpolated between the samples around it."""
        before = [s for s in self.samples if s[0] <= t]
        after = [s for s in self.samples if s[0] >= t]
        if not before or not after:
            return None
        i = 2 if jit else 1
        (t0, c0), (t1, c1) = (before[-1][0], before[-1][i]), (after[0][0], after[0][i])
        return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)

    def per_batch(self, batches: list[dict], jit: bool = False) -> list[float | None]:
        """JVM CPU µs per input record of each batch with rows (job.batch_durations)."""
        from datetime import datetime

        out: list[float | None] = []
        for b in batches:
            if not b.get("rows") or not b.get("started"):
                continue
            start = datetime.fromisoformat(b["started"].replace("Z", "+00:00")).timestamp()
            end = start + b.get("triggerExecution", 0) / 1000
            c0, c1 = self.cpu_at(start, jit), self.cpu_at(end, jit)
            out.append(None if c0 is None or c1 is None else round(1e6 * (c1 - c0) / b["rows"], 1))
        return out

    def by_group(self) -> dict[str, float]:
        groups: dict[str, float] = {}
        for tid, (comm, cpu) in self.last_threads.items():
            used = cpu - self.start_threads.get(tid, (comm, 0.0))[1]
            group = next((g for g, part in self.GROUPS if part in comm), "other")
            groups[group] = round(groups.get(group, 0.0) + used, 1)
        return groups


def refold(changelog: str, repeat: int = 3, merge_threads: int = 4, conf: dict[str, str] | None = None) -> list[dict]:
    """Fold a kept change log (`--keep-changelog`, written with `--fold-every` > 1) into empty
    current-state tables `repeat` times in one JVM, each time from a fresh copy: the fold alone,
    without the Kafka source and the change-log batches around it. Per fold: wall and JVM CPU
    seconds, CPU µs per folded change, the CPU by thread group and the fold's own timings (inspect,
    MERGEs and tombstones, per table). The first fold carries the JVM's warm-up."""
    from pyspark.sql import functions as F

    from processor.spark.delta_sink import BATCH_COLUMN, DeltaSinks
    from processor.spark.job import spark_session
    from processor.spark.readback import row_counts

    conf = {
        "spark.master": "local[2]",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "4g",
        **(conf or {}),
    }
    spark = spark_session(app="txbuffer-refold", conf=conf)
    results = []
    try:
        upto = spark.read.format("delta").load(f"file://{changelog}").agg(F.max(BATCH_COLUMN)).collect()[0][0]
        for _ in range(repeat):
            work = tempfile.mkdtemp(prefix="txbuffer-refold-")
            try:
                shutil.copytree(changelog, f"{work}/changelog")
                sinks = DeltaSinks(f"file://{work}", "refold", merge_threads=merge_threads, fold_every=2)
                cpu0, t0 = jvm_cpu_seconds(spark), time.monotonic()
                sampler = JvmCpuSampler(spark)
                out = sinks.fold(spark, upto)
                sampler.stop()
                cpu, wall = jvm_cpu_seconds(spark) - cpu0, time.monotonic() - t0
                results.append(
                    {
                        "wall_s": round(wall, 1),
                        "cpu_s": round(cpu, 1),
                        "cpu_us_per_change": round(1e6 * cpu / max(1, out.get("rows", 0)), 1),
                        "jvm_thread_cpu_s": sampler.by_group(),
                        "state_rows": sum(row_counts(work).values()),
                        "load_average": round(os.getloadavg()[0], 2),
                        **out,
                    }
                )
                log.info("bench.refold", **results[-1])
            finally:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        spark.stop()
    return results


def log_end_total(bootstrap: str, topic: str) -> int:
    """Records in the topic (sum of log end offsets; the topic is fresh, so its starts are 0)."""
    from processor.spark.kafka_source import KafkaClient

    client = KafkaClient(bootstrap)
    try:
        return sum(client.log_ends(client.partitions([topic])).values())
    finally:
        client.close()


def merge_history(spark, lake: str) -> dict:
    """Per state table: its file count and Delta's metrics of each MERGE (from DESCRIBE HISTORY)."""
    from processor.spark.readback import local_path

    keys = (
        "executionTimeMs",
        "scanTimeMs",
        "rewriteTimeMs",
        "numTargetFilesAdded",
        "numTargetFilesRemoved",
        "numTargetRowsUpdated",
        "numTargetRowsInserted",
        "numTargetRowsDeleted",
        "numSourceRows",
    )
    out = {}
    for d in sorted((local_path(lake) / "state").glob("*/_delta_log")):
        uri = f"file://{d.parent}"
        history = spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").where("operation = 'MERGE'").orderBy("version")
        merges = [{k: int(r["operationMetrics"].get(k, 0)) for k in keys} for r in history.collect()]
        files = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]["numFiles"]
        out[d.parent.name] = {"files": files, "merges": merges}
    return out


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
    p.add_argument("--merge-threads", type=int, default=4, help="tables MERGEd at once (1: one after another)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark conf (repeatable)")
    p.add_argument(
        "--stage",
        default="full",
        choices=("decode", "dedup", "changelog", "full"),
        help="cut the pipeline: decode | + dedup | + cache, inspect, change log | + MERGEs (full)",
    )
    p.add_argument(
        "--commit-ms",
        type=int,
        default=1000,
        help="commit time between changes (ms): the change log's commit_date partitions and the dedup window",
    )
    p.add_argument(
        "--fold-every",
        type=int,
        default=1,
        help="MERGE the current state every N batches from the change log (1: every batch)",
    )
    p.add_argument("--keep-changelog", metavar="DIR", help="copy the run's change log to DIR (for --refold)")
    p.add_argument(
        "--refold",
        metavar="DIR",
        help="no Kafka run: fold the change log kept in DIR into empty state --repeat times in one JVM",
    )
    p.add_argument("--repeat", type=int, default=3, help="folds of --refold")
    a = p.parse_args()
    if a.refold:
        print(
            json.dumps(
                refold(a.refold, a.repeat, merge_threads=a.merge_threads, conf=dict(c.split("=", 1) for c in a.conf))
            )
        )
        raise SystemExit(0)
    with EmbeddedKafka() as broker:
        out = bench_spark(
            broker.bootstrap,
            a.changes,
            a.batch,
            trigger=a.trigger,
            tables=a.tables,
            master=a.master,
            native=not a.python_source,
            merge_threads=a.merge_threads,
            conf=dict(c.split("=", 1) for c in a.conf),
            stage=a.stage,
            commit_ms=a.commit_ms,
            fold_every=a.fold_every,
            keep_changelog=a.keep_changelog,
        )
        print(json.dumps(out))
