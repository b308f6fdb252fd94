"""Throughput levers of the Spark stage that change what is written or how it is read: a lake whose
tables carry deletion vectors reads back without the rows those vectors delete."""

from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F

from processor.spark.delta_sink import ROW_OPS, DeltaSinks
from processor.spark.readback import read_changelog, read_state, row_counts, state_tables
from processor.testing.lake_checks import compare_state

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

DV_DEFAULT = "spark.databricks.delta.properties.defaults.enableDeletionVectors"


def frame(spark, rows: list[tuple]):
    """Decoded changes of table app.dv: (key, op, commit_scn, value)."""
    from processor.testing.spark_synth import decoded_change, decoded_frame

    return decoded_frame(spark, [decoded_change("app.dv", *r) for r in rows])


def test_tables_with_deletion_vectors_read_back_without_the_deleted_rows(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable

    out = tmp_path / "out"
    spark.conf.set(DV_DEFAULT, "true")  # every table this session creates gets deletion vectors
    try:
        sinks = DeltaSinks(out.as_uri(), "dv-test", merge_threads=1)
        sinks(frame(spark, [(k, "c", 10, f"v{k}") for k in range(1, 9)]), 0)
        sinks(frame(spark, [(2, "d", 20, None), (5, "d", 20, None), (3, "u", 20, "new")]), 1)
    finally:
        spark.conf.unset(DV_DEFAULT)

    table = DeltaTable(str(state_tables(out)["app.dv"]))
    assert "deletionVectors" in (table.protocol().reader_features or [])
    # The MERGE marked rows deleted in the old file instead of rewriting it: the case a plain
    # parquet read of the add actions gets wrong.
    assert pa.table(table.deletion_vectors()).num_rows >= 1
    expected = {f'{{"id":{k}}}': {"id": k, "v": f"v{k}"} for k in (1, 4, 6, 7, 8)}
    expected['{"id":3}'] = {"id": 3, "v": "new"}
    assert read_state(out) == {"app.dv": expected}
    assert row_counts(out) == {"app.dv": 6}
    assert read_changelog(out, ["event_id"]).num_rows == 11


# ---- folding the current state every N batches (fold_every) ------------------------------------


def fold_workload(seed: int) -> list[list[dict]]:
    """Four batches of the two-table workload (updates, deletes, re-inserts), the newer commits
    first, so that within a fold and across folds a later change lands before an earlier one."""
    import random

    from tests.integration.test_spark_sinks import workload

    rng = random.Random(seed)
    events = workload(80, seed=seed)
    newer = [ev for ev in events if ev["source"]["commit_scn"] >= 1400]
    older = [ev for ev in events if ev["source"]["commit_scn"] < 1400][::-1]
    rng.shuffle(newer)
    half_n, half_o = len(newer) // 2, len(older) // 2
    return [newer[:half_n], newer[half_n:], older[:half_o], older[half_o:]]


def avro_frame(spark, batch: list[dict]):
    from processor.spark.decode import decode_native
    from processor.testing.spark_synth import kafka_record

    records = [(bytearray(kafka_record(ev)[1]), 0, i, None) for i, ev in enumerate(batch)]
    return decode_native(
        spark.createDataFrame(records, "value binary, partition int, offset long, timestamp timestamp")
    )


def lake_versions(out) -> dict:
    from deltalake import DeltaTable

    paths = {"changelog": out / "changelog", "_deletes": out / "_deletes", "_folds": out / "_folds"}
    paths.update(state_tables(out))
    return {name: DeltaTable(str(p)).version() for name, p in paths.items() if (p / "_delta_log").exists()}


def test_folding_every_two_batches_keeps_newest_wins_tombstones_and_exactly_once(spark, tmp_path):
    """fold_every=2: batches 0 and 2 reach the change log only, batches 1 and 3 fold what gathered
    into the current state (newer commits first, deletes before the inserts they delete, within
    and across folds). A fold that crashed before it was recorded is redone on the replay without
    a new version of any table it had committed; a replayed fold batch changes nothing."""
    from tests.integration.test_spark_sinks import reference

    batches = fold_workload(seed=31)
    out = tmp_path / "out"

    class CrashOnce(DeltaSinks):
        crashed = False

        def record_fold(self, spark, first, upto, rows):
            if upto == 3 and not CrashOnce.crashed:
                CrashOnce.crashed = True
                raise RuntimeError("driver killed after the MERGEs, before the fold was recorded")
            super().record_fold(spark, first, upto, rows)

    sinks = CrashOnce(out.as_uri(), "fold-test", merge_threads=4, fold_every=2)
    sinks(avro_frame(spark, batches[0]), 0)
    assert state_tables(out) == {}  # not folded yet: the change log only
    assert read_changelog(out, ["event_id"]).num_rows == len(batches[0])
    sinks(avro_frame(spark, batches[1]), 1)
    assert compare_state(out, reference(batches[0] + batches[1])) == {}
    folded = lake_versions(out)
    DeltaSinks(out.as_uri(), "fold-test", fold_every=2)(avro_frame(spark, batches[1]), 1)  # a replay
    assert lake_versions(out) == folded

    sinks(avro_frame(spark, batches[2]), 2)
    assert compare_state(out, reference(batches[0] + batches[1])) == {}  # batch 2 waits for the next fold
    with pytest.raises(RuntimeError, match="before the fold was recorded"):
        sinks(avro_frame(spark, batches[3]), 3)
    assert compare_state(out, reference([ev for b in batches for ev in b])) == {}
    merged = {k: v for k, v in lake_versions(out).items() if k != "_folds"}

    restarted = DeltaSinks(out.as_uri(), "fold-test", merge_threads=4, fold_every=2)
    restarted(avro_frame(spark, batches[3]), 3)  # Spark replays batch 3 on the restarted driver
    after = lake_versions(out)
    assert {k: v for k, v in after.items() if k != "_folds"} == merged  # every write skipped
    assert after["_folds"] == folded["_folds"] + 1  # the fold is recorded now
    assert restarted.fold(spark, 3) == {}  # and nothing is left to fold
    assert compare_state(out, reference([ev for b in batches for ev in b])) == {}
    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    assert sorted(ids) == sorted(ev["event_id"] for b in batches for ev in b)


def test_a_fold_reads_only_the_change_log_files_of_its_batches(spark, tmp_path):
    """A fold reads the change log straight (no cache of the whole fold), table by table: the
    partition filter and the batch id's file statistics keep it to the files of the batches it
    folds, so a fold costs what its own changes cost, not the change log's history. The files of
    the batches folded before are moved away: a fold that opened one would fail."""
    import json

    from tests.integration.test_spark_sinks import reference

    batches = fold_workload(seed=37)
    out = tmp_path / "out"
    sinks = DeltaSinks(out.as_uri(), "fold-skip", merge_threads=4, fold_every=2)
    sinks(avro_frame(spark, batches[0]), 0)
    sinks(avro_frame(spark, batches[1]), 1)
    assert compare_state(out, reference(batches[0] + batches[1])) == {}
    folded_files = []
    for entry in sorted((out / "changelog" / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and json.loads(add["stats"])["maxValues"]["_txb_batch"] <= 1:
                folded_files.append(out / "changelog" / add["path"])
    assert len(folded_files) >= 4  # both tables, both batches
    for f in folded_files:
        f.rename(tmp_path / f"gone-{f.name}")
    sinks(avro_frame(spark, batches[2]), 2)
    sinks(avro_frame(spark, batches[3]), 3)
    assert compare_state(out, reference([ev for b in batches for ev in b])) == {}


def test_consecutive_folds_read_the_change_log_through_the_same_generated_code(spark, tmp_path):
    """A fold names its batches by a set that the generated code refers to, not by literals
    written into it: the second fold's read of the change log runs on the classes compiled for
    the first (Spark's cache of generated code), where a range filter put each fold's bounds into
    new classes that Janino and then the JIT compiled again. (Planning is left out of the count:
    Delta's file skipping compiles its own small query over the log's file statistics, with the
    bounds, per fold.) Each read still returns its own batches only."""
    from processor.spark.delta_sink import batch_sets

    batches = fold_workload(seed=43)
    out = tmp_path / "out"
    sinks = DeltaSinks(out.as_uri(), "fold-code", merge_threads=4, fold_every=100)  # appends only
    for i, batch in enumerate(batches):
        sinks(avro_frame(spark, batch), i)
    compiled = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    counts = []
    for last, upto in ((-1, 1), (1, 3)):
        with batch_sets(spark):
            read = sinks.fold_source(spark, last, upto).where(F.col("op").isin(*ROW_OPS))
            read._jdf.queryExecution().executedPlan()  # planned: the file skipping has run
            before = compiled.getCount()
            ids = sorted(r["event_id"] for r in read.collect())
        counts.append(compiled.getCount() - before)
        assert ids == sorted(ev["event_id"] for b in batches[last + 1 : upto + 1] for ev in b)
    assert counts[0] > 0 and counts[1] == 0, counts


def test_run_job_folds_every_three_batches_and_at_the_end(spark, broker, changes_topic, tmp_path):
    """Through Kafka, with redeliveries: the state MERGEd every three micro-batches, and what the
    last fold left is folded before run_job returns."""
    import random

    from processor.spark.job import run_job
    from tests.integration.test_spark_sinks import produce, reference, workload

    events = workload(60, seed=41)
    rng = random.Random(4)
    redelivered = events + rng.sample(events, 25)
    produce(broker.bootstrap, changes_topic, redelivered, partition_of=lambda ev: rng.randrange(3))
    out = tmp_path / "out"
    summary = run_job(
        broker.bootstrap,
        changes_topic,
        str(tmp_path / "ck"),
        out.as_uri(),
        spark=spark,
        max_offsets_per_trigger=40,
        dedup_horizon="1000 days",
        fold_every=3,
    )
    assert summary["input_rows"] == len(redelivered) and summary["fold_every"] == 3
    assert compare_state(out, reference(events)) == {}
    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    assert sorted(ids) == sorted(ev["event_id"] for ev in events)
    from deltalake import DeltaTable

    # The folds cover every batch once, in order, up to the last one the query ran.
    folds = sorted(
        (f["from_batch"], f["_txb_batch"]) for f in DeltaTable(str(out / "_folds")).to_pyarrow_table().to_pylist()
    )
    last = max(b["batch"] for b in summary["batch_durations"])
    assert [f for f, _ in folds] == [0] + [upto + 1 for _, upto in folds[:-1]] and folds[-1][1] == last
    assert len(folds) >= 2  # at least one fold in the stream and the one at the end


def test_the_session_does_not_count_the_dedup_state_rows_unless_the_launcher_asks(spark):
    """trackTotalNumberOfRows costs a RocksDB read before every write of the event_id dedup; the
    session turns it off as a default (the tests' launcher leaves it unset)."""
    assert spark.conf.get("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows") == "false"


# ---- the driver JVM's collector (session default, yields to the launcher) ------------------------


def collectors(spark) -> set[str]:
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return {bean.getName() for bean in beans}


def test_the_driver_jvm_runs_the_parallel_collector_when_the_launcher_chose_none(spark):
    import os
    import re

    chosen = " ".join(os.environ.get(k, "") for k in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"))
    if re.search(r"-XX:\+Use\w*GC", chosen + os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
        pytest.skip("this environment chooses the collector itself")
    # The tests' session (conftest) is launched without Java options: the session default applies.
    assert spark.sparkContext.getConf().get("spark.driver.defaultJavaOptions") == "-XX:+UseParallelGC"
    assert collectors(spark) == {"PS Scavenge", "PS MarkSweep"}


def test_a_launcher_collector_wins_over_the_default(tmp_path):
    import json
    import subprocess
    import sys

    script = (
        "import json\n"
        "from processor.spark.session import spark_session\n"
        "s = spark_session(app='gc-choice', connectors=False, conf={'spark.master': 'local[1]',"
        " 'spark.ui.enabled': 'false', 'spark.driver.extraJavaOptions': '-XX:+UseSerialGC'})\n"
        "beans = s.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()\n"
        "print(json.dumps({'gc': sorted(b.getName() for b in beans),"
        " 'default': s.sparkContext.getConf().get('spark.driver.defaultJavaOptions', None)}))\n"
        "s.stop()\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "JAVA_TOOL_OPTIONS")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"gc": ["Copy", "MarkSweepCompact"], "default": None}


def test_the_generated_code_cache_of_the_session_holds_a_folds_classes(spark):
    """The static default reaches the JVM: the SQL conf Spark's CodeGenerator sizes its cache by."""
    from processor.spark.session import CODEGEN_CACHE

    if CODEGEN_CACHE in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        pytest.skip("this environment sizes the cache itself")
    assert spark.sparkContext.getConf().get(CODEGEN_CACHE) == "2000"
    assert spark.conf.get(CODEGEN_CACHE) == "2000"
