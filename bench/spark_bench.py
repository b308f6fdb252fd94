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
log's rows). Each run also reports the JVM's peak resident memory (`jvm_peak_rss_mb`).

A streaming stage runs for days: its throughput is the steady rate of a warm JVM. With
`--warmup-changes N` (`bench_spark(warmup_changes=N)`) the bench first produces N changes and runs
them through the query (its fold included), then produces the measured changes and runs the same
query again in the same JVM from the same checkpoint and lake (available-now, as a scheduled job
restarts): only that second run is timed. The top-level rate and CPU fields (`changes_per_s`,
`cpu_us_per_change`, `query_seconds`, the per-batch figures) are the measured run's; `warmup` holds
the same fields for the warm-up run and `whole_run` the rate and CPU over both runs (what the
top-level fields meant before; without a warm-up they are equal). The correctness figures are
checked for each run (`checks`): every record read, each distinct event once in the change log and,
for the full stage, the state rows the generator's own model expects.

    .venv/bin/python -m bench.spark_bench --warmup-changes 2000000 --changes 4000000 --batch 1000000 --fold-every 4
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import tempfile
import time
import uuid
from typing import Any

import structlog

from bench.measure import thread_cpu_s

log = structlog.get_logger(__name__)


def synthetic_changes(
    n: int,
    seed: int = 0,
    tables: int = 10,
    keys: int = 100_000,
    counts: dict | None = None,
    commit_ms: int = 1000,
    present: bytearray | None = None,
):
    """n Kafka records; `counts` gets "redeliveries" (records that repeat an earlier one). Commit
    times are `commit_ms` apart (1000: a million changes span 11.6 days of commit dates).
    `present` (tables * keys bytes), when given, is the expected current state as the records go:
    1 where the key's newest change is an update, 0 where it is a delete or never written (a
    redelivery repeats an older change, which newest-wins ignores)."""
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
        deleted = rng.random() < 0.05
        if present is not None:
            present[t * keys + k] = 0 if deleted else 1
        if deleted:
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
    warmup_changes: int = 0,
    spark: Any = None,
) -> dict:
    """Native Kafka source -> from_avro -> dedup -> Delta change log + MERGE into current state.

    `changes_per_s` = the measured records / the query's run time (JVM start-up and producing
    excluded, reported separately). The batch size is max_offsets_per_trigger; the trigger is
    available-now or processingTime=<interval>. `warmup_changes` > 0: that many changes first run
    through the same query, JVM, checkpoint and lake, untimed (module docstring). `spark`: a running
    session to use (and leave running); by default the bench starts its own with its launcher confs.
    """
    from processor.kafka.admin import ensure_topics
    from processor.spark.job import spark_session

    if warmup_changes < 0 or n_changes < 1:
        raise ValueError("the measured changes must be at least 1 and the warm-up's at least 0")
    topic = f"bench-changes-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: partitions})
    counts: dict[str, int] = {}
    keys = 100_000
    present = bytearray(tables * keys) if stage == "full" else None
    records = synthetic_changes(
        warmup_changes + n_changes, tables=tables, keys=keys, counts=counts, commit_ms=commit_ms, present=present
    )
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
    own_session = spark is None
    if own_session:
        spark = spark_session(app="txbuffer-bench", conf=conf)
    startup_s = time.monotonic() - t1
    run = BenchRun(
        bootstrap, topic, work, spark, records, counts, present, max_offsets_per_trigger, trigger, native,
        merge_threads, stage, fold_every,
    )  # fmt: skip
    try:
        warm = run.phase("warmup", warmup_changes) if warmup_changes else None
        measured = run.phase("measured", n_changes)
        merges = merge_history(spark, f"file://{work}/lake") if stage == "full" else {}
    finally:
        if own_session:
            spark.stop()
        if keep_changelog and os.path.isdir(f"{work}/lake/changelog"):  # for refold()
            shutil.rmtree(keep_changelog, ignore_errors=True)
            shutil.copytree(f"{work}/lake/changelog", keep_changelog)
        shutil.rmtree(work, ignore_errors=True)
    phases = [p for p in (warm, measured) if p is not None]
    whole_s = sum(p["query_seconds"] for p in phases)
    whole_cpu = sum(p["query_cpu_seconds"] for p in phases)
    whole_rows = sum(p["input_rows"] for p in phases)
    groups: dict[str, float] = {}
    for p in phases:
        for g, cpu in p["jvm_thread_cpu_s"].items():
            groups[g] = round(groups.get(g, 0.0) + cpu, 1)
    failures = {p["phase"]: p["failed_checks"] for p in phases if p["failed_checks"]}
    result = {
        # The measured run (everything after the warm-up): what the rate and CPU fields below cover.
        "records": n_changes,
        "warmup_changes": warmup_changes,
        **{k: v for k, v in measured.items() if k not in ("phase", "failed_checks")},
        "warmup": warm,  # the same fields for the warm-up run (None without one)
        # Both runs together: the rate and CPU a bench without a warm-up reports (JVM warm-up included).
        "whole_run": {
            "records": warmup_changes + n_changes,
            "input_rows": whole_rows,
            "query_seconds": round(whole_s, 3),
            "changes_per_s": round(whole_rows / whole_s, 1) if whole_s else None,
            "query_cpu_seconds": round(whole_cpu, 1),
            "cpu_us_per_change": round(1e6 * whole_cpu / max(1, whole_rows), 1),
            "jvm_thread_cpu_s": groups,
        },
        # Correctness of each run: every record read, each distinct event once in the change log,
        # the expected state rows. {} when every check held.
        "failed_checks": failures,
        "spark_startup_seconds": round(startup_s, 2),
        "tables": tables,
        "max_offsets_per_trigger": max_offsets_per_trigger,
        "trigger": trigger,
        "merge_threads": merge_threads,
        "stage": stage,
        "commit_ms": commit_ms,
        "fold_every": fold_every,
        "conf": conf if own_session else {},
        "merges": merges,
        "master": master if own_session else spark.sparkContext.master,
        "load_average": [round(x, 2) for x in os.getloadavg()],  # a shared machine skews every figure
    }
    log.info("bench.spark", **{k: v for k, v in result.items() if k not in ("writes", "merges", "warmup")})
    return result


class BenchRun:
    """The bench's topic, lake and checkpoint: each phase produces its changes, runs the query
    (available-now: from where the last phase ended) and checks the lake afterwards."""

    def __init__(
        self, bootstrap, topic, work, spark, records, counts, present, batch, trigger, native, merge_threads, stage,
        fold_every,
    ):  # fmt: skip
        self.bootstrap, self.topic, self.work, self.spark = bootstrap, topic, work, spark
        self.records, self.counts, self.present = records, counts, present
        self.batch, self.trigger, self.native = batch, trigger, native
        self.merge_threads, self.stage, self.fold_every = merge_threads, stage, fold_every
        self.produced = 0  # records produced so far (every phase)
        self.distinct = 0  # distinct events so far

    def phase(self, name: str, n: int) -> dict:
        from processor.kafka.client_config import make_producer
        from processor.kafka.produce import produce_all
        from processor.spark.job import run_job

        t0 = time.monotonic()
        redelivered = self.counts.get("redeliveries", 0)
        batch = itertools.islice(self.records, n)
        produce_all(make_producer(self.bootstrap), self.topic, ((k, v, None) for k, v in batch))
        produce_s = time.monotonic() - t0
        self.produced += n
        self.distinct += n - (self.counts.get("redeliveries", 0) - redelivered)
        source_records = log_end_total(self.bootstrap, self.topic)
        cpu0 = jvm_cpu_seconds(self.spark)
        sampler = JvmCpuSampler(self.spark)
        try:
            summary = run_job(
                self.bootstrap,
                self.topic,
                f"{self.work}/ck",
                f"file://{self.work}/lake",
                trigger=self.trigger,
                spark=self.spark,
                native=self.native,
                max_offsets_per_trigger=self.batch,
                timeout_s=None if self.trigger == "available-now" else 3600,
                until_rows=None if self.trigger == "available-now" else n,
                merge_threads=self.merge_threads,
                stage=self.stage,
                fold_every=self.fold_every,
            )
            query_cpu_s = jvm_cpu_seconds(self.spark) - cpu0
        finally:
            sampler.stop()
        figures = self.check(source_records, summary["input_rows"], n)
        durations = summary.get("batch_durations") or []
        return {
            "phase": name,
            "produce_seconds": round(produce_s, 2),
            **figures,
            "input_rows": summary["input_rows"],  # records the Kafka source read, redeliveries included
            "batches": summary["batches"],
            "batch_seconds": summary.get("batch_seconds"),
            "batch_durations_ms": summary.get("batch_durations"),  # addBatch = the Delta writes
            "query_seconds": summary["seconds"],
            "changes_per_s": round(summary["input_rows"] / summary["seconds"], 1),
            "records_per_s": round(summary["input_rows"] / summary["seconds"], 1),
            # CPU the Spark JVM spent in the query (driver and executor threads): less swayed by the
            # other work on a shared machine than the wall-clock rate.
            "query_cpu_seconds": round(query_cpu_s, 1),
            "cpu_us_per_change": round(1e6 * query_cpu_s / max(1, summary["input_rows"]), 1),
            # Per batch with rows: the JVM's CPU during the batch per input record. The first batches
            # of a JVM carry its warm-up (the JIT compiles Spark, Delta, Parquet and Kafka code).
            "batch_cpu_us_per_change": sampler.per_batch(durations),
            "batch_jit_us_per_change": sampler.per_batch(durations, jit=True),
            # The run's JVM CPU by thread group (s): executor tasks, JIT compilers, GC, the rest.
            "jvm_thread_cpu_s": sampler.by_group(),
            # The JVM's peak resident memory so far (VmHWM: heap, metaspace, code cache, RocksDB,
            # Parquet buffers): what a larger batch or fold costs in memory.
            "jvm_peak_rss_mb": jvm_peak_rss_mb(self.spark),
            "writes": summary.get("writes"),
            "kafka_path": "native" if summary["native"] else "python",
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }

    def check(self, source_records: int, input_rows: int, n: int) -> dict:
        """The lake after a phase against what was produced so far."""
        import pyarrow.compute as pc

        from processor.spark.readback import read_changelog, row_counts

        wrote = self.stage in ("changelog", "full")  # the cut stages before them write no lake
        ids = read_changelog(f"{self.work}/lake", ["event_id"]).column("event_id") if wrote else None
        figures = {
            # Lake-wide, every phase so far: the topic's log ends, the distinct events produced, the
            # change log's rows and distinct event ids, the current state's rows and the expected.
            "source_records": source_records,
            "distinct_events": self.distinct,
            "changelog_rows": len(ids) if ids is not None else 0,
            "changelog_distinct_events": pc.count_distinct(ids).as_py() if ids is not None else 0,
            "current_state_rows": sum(row_counts(f"{self.work}/lake").values()) if self.stage == "full" else 0,
            "expected_state_rows": self.present.count(1) if self.present is not None else None,
        }
        return {
            **figures,
            "failed_checks": phase_failures(
                figures, produced=self.produced, phase_records=n, input_rows=input_rows, stage=self.stage
            ),
        }


def phase_failures(figures: dict, produced: int, phase_records: int, input_rows: int, stage: str) -> list[str]:
    """What a phase got wrong: the topic holds every record produced so far, the query read this
    phase's records, the change log holds each distinct event once, and the current state the rows
    the generator's model expects."""
    failed = []
    if figures["source_records"] != produced:
        failed.append(f"the topic holds {figures['source_records']} records, {produced} were produced")
    if input_rows != phase_records:
        failed.append(f"the query read {input_rows} records of the {phase_records} this run produced")
    if stage in ("changelog", "full"):
        if figures["changelog_rows"] != figures["distinct_events"]:
            failed.append(
                f"the change log holds {figures['changelog_rows']} rows, {figures['distinct_events']} distinct events were produced"
            )
        if figures["changelog_distinct_events"] != figures["changelog_rows"]:
            failed.append(
                f"the change log holds {figures['changelog_rows']} rows but {figures['changelog_distinct_events']} distinct event ids"
            )
    if stage == "full" and figures["current_state_rows"] != figures["expected_state_rows"]:
        failed.append(
            f"the current state holds {figures['current_state_rows']} rows, {figures['expected_state_rows']} expected"
        )
    return failed


def jvm_cpu_seconds(spark) -> float:
    """CPU time (user + system) of the Spark JVM so far, every thread: driver and local executor."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def jvm_peak_rss_mb(spark) -> int | None:
    """The Spark JVM's peak resident set so far (VmHWM of /proc/<pid>/status), in MiB."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024  # kB
    except OSError:
        pass
    return None


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
        return thread_cpu_s(self.pid)

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
    p.add_argument(
        "--warmup-changes",
        type=int,
        default=0,
        help="first run this many changes through the same query and JVM, untimed (the steady rate of a warm JVM)",
    )
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
            warmup_changes=a.warmup_changes,
        )
        print(json.dumps(out))
        if out["failed_checks"]:
            raise SystemExit(f"correctness checks failed: {out['failed_checks']}")
