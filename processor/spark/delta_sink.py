"""Delta Lake sinks of the Spark stage, written from one foreachBatch call per micro-batch.

Layout under the output URI (any Hadoop FileSystem URI: file://, s3a://, abfss://, hdfs://):

    <output>/changelog        append-only change log, partitioned by `table` and `commit_date`
    <output>/state/<table>    current state of one source table: typed columns, MERGEd by primary key
    <output>/_deletes         tombstones: position of every delete (or truncate), appended per batch

Exactly once. Spark replays a micro-batch with the same id and the same rows after a crash, so:
  * the change-log append carries txnAppId/txnVersion = (<app id>, batch id): Delta skips a
    version it already holds for that app id;
  * each MERGE runs with the same pair as session confs (Delta's idempotent DML) and is also
    idempotent by content: it only applies a change newer than the row's position.
Duplicates from the processor (at-least-once delivery) are dropped before this by event_id within
the commit-time watermark (processor.spark.job).

Concurrency. The per-table MERGEs of a batch run from a thread pool (`merge_threads`), each in its
own clone of the batch's session: the txnAppId/txnVersion confs are session-wide, so a session is
never shared by two writes at once. The change-log append runs beside them on the batch's session
(its txn pair is a writer option). Every table is its own Delta log, so the commits are
independent; the batch ends only when every write has ended, and fails if any failed.

Newest wins. Every current-state row keeps the (commit_scn, seq) of the change that wrote it, and
MERGE applies a change only when it is newer. A delete removes the row and leaves its position in
_deletes, so an older insert or update that arrives after the delete stays out; a truncate leaves a
table-wide tombstone. Tombstones older than the retention (commit time) are pruned now and then.
"""

from __future__ import annotations

import json
import queue
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from typing import Any
from urllib.parse import quote

import structlog
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from processor.spark.decode import MEMBERS
from processor.spark.row_types import (
    COMMIT_SCN,
    COMMIT_TS_MS,
    EVENT_ID,
    META_COLUMNS,
    OP,
    SEQ,
    SQL_TYPES,
    branch_of_spark_type,
    column_branch,
    key_json_expr,
    quoted,
    resolve,
    table_properties,
    value_expr,
)

log = structlog.get_logger(__name__)

ROW_OPS = ("c", "u", "d", "r")  # r: a snapshot row, an upsert like c
TABLE_WIDE = "*"  # tombstone key of a truncate
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
# IN lists longer than this become an InSet (Spark's default 10); 0 for a fold's reads (batch_sets).
INSET_THRESHOLD = "spark.sql.optimizer.inSetConversionThreshold"
MAX_FOLD_SET = 256  # folds of more batches filter by their range
BATCH_COLUMN = "_txb_batch"  # the change log's micro-batch id, written when the state is folded (fold_every > 1)
# What a fold reads back from the change log: what the MERGEs and inspect() use.
FOLD_COLUMNS = ("table", "op", "key", "after", "event_id", "seq", "commit_scn", "commit_ts_ms")


def join_uri(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def state_uri(output: str, table: str) -> str:
    return join_uri(output, "state", quote(table, safe="._-"))


def is_delta_table(spark: Any, uri: str) -> bool:
    return bool(spark._jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, uri))


def release(df: Any) -> None:
    """Free what persist() or localCheckpoint() holds for `df`: the checkpoint's blocks stay until
    the JVM's garbage collector reaches the RDD otherwise, for a stream many batches later."""
    df.unpersist()
    logical = df._jdf.queryExecution().logical()
    if logical.nodeName() == "LogicalRDD":
        logical.rdd().unpersist(False)


@contextmanager
def batch_sets(spark: Any) -> Iterator[None]:
    """Within: an IN list of any length becomes an InSet (DeltaSinks.fold_source)."""
    previous = spark.conf.get(INSET_THRESHOLD, None)
    spark.conf.set(INSET_THRESHOLD, "0")
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(INSET_THRESHOLD)
        else:
            spark.conf.set(INSET_THRESHOLD, previous)


def _newer(s: str, t: str) -> str:
    return f"({s}.{COMMIT_SCN} > {t}.{COMMIT_SCN} OR ({s}.{COMMIT_SCN} = {t}.{COMMIT_SCN} AND {s}.{SEQ} > {t}.{SEQ}))"


@dataclass
class BatchShape:
    """What one aggregate over the micro-batch tells the sinks (one Spark job, which also fills the cache)."""

    rows: int = 0
    columns: dict[str, dict[str, tuple[bool, set[str]]]] = field(
        default_factory=dict
    )  # table -> col -> (is key, branches)
    truncates: dict[str, tuple] = field(default_factory=dict)  # table -> newest (commit_scn, seq, commit_ts_ms)
    with_deletes: set[str] = field(default_factory=set)
    max_ts: int | None = None


class DeltaSinks:
    """foreachBatch target: `query.foreachBatch(DeltaSinks(output, app_id))`."""

    def __init__(
        self,
        output: str,
        app_id: str,
        tombstone_retention_ms: int = 7 * 24 * 3600 * 1000,
        prune_every_batches: int = 50,
        merge_threads: int = 4,
        state: bool = True,
        fold_every: int = 1,
    ):
        self.state = state  # False (bench.spark_bench --stage changelog): the change log only, no MERGEs
        # > 1: the current state is folded from the change log every `fold_every` batches (fold())
        self.fold_every = max(1, fold_every)
        self.folds = join_uri(output.rstrip("/"), "_folds")
        self._last_folded: int | None = None
        self.output = output.rstrip("/")
        self.app_id = app_id
        self.changelog = join_uri(self.output, "changelog")
        self.deletes = join_uri(self.output, "_deletes")
        self.tombstone_retention_ms = tombstone_retention_ms
        self.prune_every = prune_every_batches
        self._tables: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._deletes_exist = False
        self._persisted: list[Any] = []
        self.merge_threads = max(1, merge_threads)
        self._sessions: tuple[Any, queue.SimpleQueue] | None = None  # (batch session, its clones)
        self.last_timings: dict[str, Any] = {}
        self.written: list[dict] = []  # per written batch (the last 100): where its time went, for the bench

    def __call__(self, df: Any, batch_id: int) -> None:
        # Every write below reads the batch: run the Kafka source, from_avro and the dedup state once.
        # Concurrent writes get it as a local checkpoint, a plan of its own rows: every query over a
        # plan analyzes that plan's expression objects again, and some of them are not safe from
        # two threads at once. from_avro's options are a CreateMap whose map builder is a field;
        # two MERGEs checking it together failed with DUPLICATED_MAP_KEY 'mode' (CI, stop 21).
        if self.state and self.fold_every > 1:
            self._append_and_fold(df, batch_id)
            return
        df = df.localCheckpoint() if self.merge_threads > 1 else df.persist()
        try:
            started = time.monotonic()
            shape = self.inspect(df)  # the batch's one action before the writes; it fills the cache
            if not shape.rows:
                return
            inspected = time.monotonic()
            if not self.state:
                self.append_changelog(df, batch_id)
                tables, logged = [], time.monotonic()
            elif self.merge_threads == 1:
                self.append_changelog(df, batch_id)
                logged = time.monotonic()
                tables = self.merge_state(df, shape, batch_id)
            else:  # the change log is appended while the MERGEs run
                tables = self.merge_state(df, shape, batch_id, beside=lambda: self.append_changelog(df, batch_id))
                logged = inspected
            timings = self.last_timings
            written = {
                "batch": batch_id,
                "rows": shape.rows,
                "inspect_s": round(inspected - started, 2),
                "changelog_s": round(timings.pop("changelog_s", logged - inspected), 2),
                "state_s": round(time.monotonic() - logged, 2),
                **timings,
            }
            self.written = [*self.written[-99:], written]
            log.info("spark.batch.written", tables=tables, **written)
        finally:
            release(df)

    # ---- folding the current state from the change log ---------------------------------------
    def _append_and_fold(self, df: Any, batch_id: int) -> None:
        """fold_every > 1: the batch goes to the change log only (one write straight from the
        stream's plan: no cache, no inspect), and every fold_every-th batch folds what the change
        log gathered since the last fold into the current state."""
        started = time.monotonic()
        self.append_changelog(df, batch_id)
        written: dict[str, Any] = {"batch": batch_id, "changelog_s": round(time.monotonic() - started, 2)}
        if batch_id % self.fold_every == self.fold_every - 1:
            written.update(self.fold(df.sparkSession, batch_id))
        self.written = [*self.written[-99:], written]
        log.info("spark.batch.written", **written)

    def last_folded(self, spark: Any) -> int:
        """The last batch id whose changes are folded into the current state (-1: none)."""
        if self._last_folded is None:
            if is_delta_table(spark, self.folds):
                newest = spark.read.format("delta").load(self.folds).agg(F.max(BATCH_COLUMN)).collect()[0][0]
                self._last_folded = -1 if newest is None else int(newest)
            else:
                self._last_folded = -1
        return self._last_folded

    def fold(self, spark: Any, upto: int) -> dict[str, Any]:
        """MERGE the change log's batches after the last fold, up to batch `upto`, into the current
        state, exactly as one micro-batch of all their changes would be (newest per key, tombstones,
        truncates, schema evolution), with `upto` as the transaction version; then record the fold.

        A crash before the fold is recorded repeats it on the replay: the tables it had committed
        skip it by their transaction ids, and re-applying a change is not newer than itself. The
        next fold starts after the recorded one, so no change is folded by none."""
        last = self.last_folded(spark)
        if last >= upto:
            return {}
        src = self.fold_source(spark, last, upto)
        # Not cached: each table's MERGE source reads only its own partition of the change log (the
        # filter on `table` prunes the partitions, the one on the batch id skips the files of other
        # batches), so the fold decodes its changes once in all. A cache of every table's changes
        # (a local checkpoint) was written once and then scanned whole by each of the ten tables:
        # twice the CPU (docs/lakehouse.md, session 27). The plan holds no from_avro, so the
        # concurrent MERGEs may analyse it at once.
        started = time.monotonic()
        with batch_sets(spark):  # the pool's clones have it from _clones()
            shape = self.inspect(src)
        inspected = time.monotonic()
        tables = self.merge_state(src, shape, upto) if shape.rows else []
        merged = time.monotonic()
        self.record_fold(spark, last + 1, upto, shape.rows)
        return {
            "folded": [last + 1, upto],
            "rows": shape.rows,
            "tables": tables,
            "inspect_s": round(inspected - started, 2),
            "state_s": round(merged - inspected, 2),
            **(self.last_timings if shape.rows else {}),
        }

    def fold_source(self, spark: Any, last: int, upto: int) -> Any:
        """The change log's rows of the batches after `last` up to `upto` (FOLD_COLUMNS).

        The batch ids as a set, not as a range: Spark writes a long literal into the generated code
        of each stage that filters on it (`_txb_batch > 3L`), so each fold compiled the scans of its
        inspect and its ten sources anew (Janino, then the JIT from the interpreter up). An InSet
        of longs refers to its values instead, so the code, and the classes compiled for it, are
        the same fold after fold; in a session with `batch_sets` the optimizer makes one of the
        list however short it is. Delta's file skipping still reads only these batches' files
        (tests/integration/test_spark_levers.py)."""
        batches = (
            F.col(BATCH_COLUMN).isin(*range(last + 1, upto + 1))
            if upto - last <= MAX_FOLD_SET
            else (F.col(BATCH_COLUMN) > last) & (F.col(BATCH_COLUMN) <= upto)  # a first fold of a long history
        )
        return spark.read.format("delta").load(self.changelog).where(batches).select(*FOLD_COLUMNS)

    def record_fold(self, spark: Any, first: int, upto: int, rows: int) -> None:
        """Append (upto, first, rows) to _folds: the batches up to `upto` are in the current state."""
        (
            spark.createDataFrame([(upto, first, rows)], f"{BATCH_COLUMN} long, from_batch long, rows long")
            .write.format("delta")
            .mode("append")
            .option("txnAppId", f"{self.app_id}:folds")
            .option("txnVersion", upto)
            .save(self.folds)
        )
        self._last_folded = upto

    # ---- change log -------------------------------------------------------------------------
    def append_changelog(self, df: Any, batch_id: int) -> None:
        day_ms = 86_400_000
        writer = df.withColumn(
            "commit_date", F.date_from_unix_date(F.floor(F.col("commit_ts_ms") / day_ms).cast("int"))
        )
        if self.state and self.fold_every > 1:
            # The batch id leads the row, so the file statistics of the change log hold it and a fold
            # reads only the files of the batches it folds.
            writer = writer.select(F.lit(batch_id).cast("long").alias(BATCH_COLUMN), "*")
        out = writer.write.format("delta").mode("append")
        if self.state and self.fold_every > 1:  # a change log written before without the column
            out = out.option("mergeSchema", "true")
        (
            out.partitionBy("table", "commit_date")
            .option("txnAppId", f"{self.app_id}:changelog")
            .option("txnVersion", batch_id)
            .save(self.changelog)
        )

    # ---- current state ----------------------------------------------------------------------
    def merge_state(self, df: Any, shape: BatchShape, batch_id: int, beside: Any = None) -> list[str]:
        """MERGE every table of the batch (`merge_threads` at a time), then append its tombstones.
        `beside`, when given, runs on this thread meanwhile (the change-log append)."""
        spark = df.sparkSession
        rows = df.where(F.col("table").isNotNull() & F.col("op").isin(*ROW_OPS, "t"))
        tables = sorted(set(shape.columns) | set(shape.truncates))
        timings: dict[str, Any] = {"merge_s": {}, "merge_jobs": {}}
        views: list[str] = []
        try:
            # The tombstones of the batch's tables, read once for all their MERGEs (cached).
            known = self.read_tombstones(spark, tables) if self.has_deletes(spark) else None
            if self.merge_threads == 1:
                tombstones = [self._merge_one(spark, rows, known, t, shape, batch_id, timings) for t in tables]
            else:
                tombstones = self._merge_concurrently(
                    spark, rows, known, tables, shape, batch_id, timings, views, beside
                )
            tombstones = [t for t in tombstones if t is not None]
            if tombstones:
                started = time.monotonic()
                self.record_tombstones(spark, reduce(lambda a, b: a.unionByName(b), tombstones), batch_id)
                timings["tombstones_s"] = round(time.monotonic() - started, 2)
        finally:
            for cached in self._persisted:
                release(cached)
            self._persisted.clear()
            for view in views:
                spark.catalog.dropGlobalTempView(view)
        if shape.max_ts is not None and batch_id % self.prune_every == 0 and self.has_deletes(spark):
            cutoff = shape.max_ts - self.tombstone_retention_ms
            spark.sql(f"DELETE FROM delta.`{self.deletes}` WHERE {COMMIT_TS_MS} < {cutoff}")
        self.last_timings = timings
        return tables

    def _merge_one(
        self, spark: Any, rows: Any, known: Any, table: str, shape: BatchShape, batch_id: int, timings: dict
    ) -> Any | None:
        """MERGE one table in `spark` (timed, its Spark jobs counted); its tombstones or None."""
        sc = spark.sparkContext
        tag = f"txbuffer-merge-{uuid.uuid4().hex[:12]}"
        sc._jsc.sc().addJobTag(tag)
        started = time.monotonic()
        try:
            truncate = shape.truncates.get(table)
            tomb = self.merge_table(spark, rows, table, shape.columns.get(table, {}), truncate, batch_id, known)
        finally:
            timings["merge_s"][table] = round(time.monotonic() - started, 2)
            timings["merge_jobs"][table] = len(sc._jsc.sc().statusTracker().getJobIdsForTag(tag))
            sc._jsc.sc().removeJobTag(tag)
        if tomb is not None and (table in shape.with_deletes or truncate is not None):
            return tomb
        return None

    def _merge_concurrently(
        self,
        spark: Any,
        rows: Any,
        known: Any,
        tables: list[str],
        shape: BatchShape,
        batch_id: int,
        timings: dict,
        views: list[str],
        beside: Any,
    ) -> list[Any]:
        """One task per table on a pool of cloned sessions; the batch's rows reach them as a global
        temporary view of the cached batch (the cache is shared by all sessions of the context)."""
        sc = spark.sparkContext
        # Jobs started from the pool's threads join the stream's job group, so stopping the query
        # cancels them too.
        inherited = {k: sc.getLocalProperty(k) for k in ("spark.jobGroup.id", "spark.job.interruptOnCancel")}
        view, known_view = f"txbuffer_batch_{uuid.uuid4().hex}", f"txbuffer_known_{uuid.uuid4().hex}"
        rows.createOrReplaceGlobalTempView(view)
        views.append(view)
        if known is not None:
            known.createOrReplaceGlobalTempView(known_view)
            views.append(known_view)
        sessions = self._clones(spark)
        db = spark.conf.get("spark.sql.globalTempDatabase", "global_temp")

        def task(table: str) -> tuple[Any, str | None]:
            for key, value in inherited.items():
                if value is not None:
                    sc.setLocalProperty(key, value)
            session = sessions.get()
            try:
                mine = None if known is None else session.table(f"{db}.{known_view}")
                tomb = self._merge_one(session, session.table(f"{db}.{view}"), mine, table, shape, batch_id, timings)
                if tomb is None:
                    return None, None
                # Computed here, where the persisted MERGE source is this session's: read through a
                # view from the batch's session, the plan would not match that cache and would
                # redo the source (window and anti-join) for every table.
                tomb = tomb.localCheckpoint()
                self._persisted.append(tomb)
                name = f"txbuffer_tomb_{uuid.uuid4().hex}"
                tomb.createOrReplaceGlobalTempView(name)
                return tomb, name
            finally:
                sessions.put(session)

        with ThreadPoolExecutor(self.merge_threads, thread_name_prefix="txbuffer-merge") as pool:
            futures = [pool.submit(task, t) for t in tables]
            failure: BaseException | None = None
            if beside is not None:
                started = time.monotonic()
                try:
                    beside()
                except BaseException as exc:  # still wait for the MERGEs: none may outlive the batch
                    failure = exc
                timings["changelog_s"] = time.monotonic() - started
            results = []
            for f in futures:  # every task ends before the batch does, also when one failed
                try:
                    results.append(f.result())
                except BaseException as exc:
                    failure = failure or exc
        views.extend(name for _, name in results if name)
        if failure is not None:
            raise failure
        return [spark.table(f"{db}.{name}") for _, name in results if name]

    def _clones(self, spark: Any) -> queue.SimpleQueue:
        """merge_threads clones of the batch's session (its confs, Delta's extension), made once
        per session; a session is never used by two tasks at once."""
        from pyspark.sql import SparkSession

        if self._sessions is None or not self._sessions[0].equals(spark._jsparkSession):
            clones: queue.SimpleQueue = queue.SimpleQueue()
            for _ in range(self.merge_threads):
                clone = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
                clone.conf.set(INSET_THRESHOLD, "0")  # a fold's batch ids as an InSet (fold())
                clones.put(clone)
            self._sessions = (spark._jsparkSession, clones)
        return self._sessions[1]

    @staticmethod
    def inspect(df: Any) -> BatchShape:
        """Per table: {column: (is_key, branches seen)}, the newest truncate position, whether it has
        deletes; the batch's row count and max commit time. One collect() of two small aggregates."""
        rows = df.where(F.col("table").isNotNull() & F.col("op").isin(*ROW_OPS, "t"))
        exploded = rows.select("table", F.lit(True).alias("is_key"), F.explode("key").alias("col", "v")).unionByName(
            rows.select("table", F.lit(False).alias("is_key"), F.explode("after").alias("col", "v"))
        )
        seen = [F.max(F.col("v").getField(member).isNotNull()).alias(branch) for branch, (member, _) in MEMBERS.items()]
        per_column = exploded.groupBy("table", "col").agg(F.max("is_key").alias("is_key"), *seen)
        row_op = F.col("table").isNotNull() & F.col("op").isin(*ROW_OPS, "t")
        per_table = df.groupBy("table").agg(
            F.count(F.lit(1)).alias("n"),
            F.max(F.when(row_op & (F.col("op") == "t"), F.struct("commit_scn", "seq", "commit_ts_ms"))).alias("trunc"),
            F.max("commit_ts_ms").alias("max_ts"),
            F.max(row_op & (F.col("op") == "d")).alias("has_deletes"),
        )
        both = per_column.unionByName(per_table, allowMissingColumns=True)
        shape = BatchShape()
        for r in both.collect():
            if r["n"] is None:  # a per-column row
                branches = {b for b in MEMBERS if r[b]}
                shape.columns.setdefault(r["table"], {})[r["col"]] = (bool(r["is_key"]), branches)
                continue
            shape.rows += r["n"]
            if r["trunc"] is not None:
                shape.truncates[r["table"]] = tuple(r["trunc"])
            if r["has_deletes"]:
                shape.with_deletes.add(r["table"])
            if r["max_ts"] is not None:
                shape.max_ts = r["max_ts"] if shape.max_ts is None else max(shape.max_ts, r["max_ts"])
        return shape

    def merge_table(
        self,
        spark: Any,
        rows: Any,
        table: str,
        seen: dict,
        truncate: tuple | None,
        batch_id: int,
        known: Any = None,
    ) -> Any | None:
        """MERGE one source table's newest changes; returns this batch's tombstones for it."""
        uri = state_uri(self.output, table)
        exists, pk, current = self.describe(spark, uri)
        pk = pk or sorted(c for c, (is_key, _) in seen.items() if is_key)
        if not pk and not exists:
            if truncate is None:
                # Nothing identifies a row: the changes stay in the change log only, and say so.
                log.error("spark.state.no_primary_key", table=table, note="kept in the change log only")
                return None
            return self.truncate_tombstone(spark, table, truncate)
        wanted = dict(current)
        for col, (_, branches) in seen.items():
            typed = {b for b in branches}
            if typed:
                wanted[col] = resolve(table, col, current.get(col), column_branch(table, col, typed))
        new_columns = {c: b for c, b in wanted.items() if c not in current}
        if not exists:
            self.create_table(spark, uri, table, pk, wanted)
        elif new_columns:
            added = ", ".join(f"{quoted(c)} {SQL_TYPES[b]}" for c, b in new_columns.items())
            spark.sql(f"ALTER TABLE delta.`{uri}` ADD COLUMNS ({added})")
            log.info("spark.state.schema_evolved", table=table, added=sorted(new_columns))
        self._tables[uri] = (pk, dict(wanted))

        if truncate is not None:
            scn, seq, _ = truncate
            older = f"({COMMIT_SCN} < {scn} OR ({COMMIT_SCN} = {scn} AND {SEQ} < {seq}))"
            spark.sql(f"DELETE FROM delta.`{uri}` WHERE {older}")

        changes = rows.where((F.col("table") == table) & F.col("op").isin(*ROW_OPS))
        if truncate is not None:  # changes of this batch that the truncate wiped
            scn, seq, _ = truncate
            changes = changes.where((F.col("commit_scn") > scn) | ((F.col("commit_scn") == scn) & (F.col("seq") > seq)))
        src = changes.select(
            *[value_expr(F.col("key" if c in pk else "after"), c, b).alias(c) for c, b in wanted.items()],
            F.col("commit_scn").alias(COMMIT_SCN),
            F.col("seq").alias(SEQ),
            F.col("event_id").alias(EVENT_ID),
            F.col("commit_ts_ms").alias(COMMIT_TS_MS),
            F.col("op").alias(OP),
        )
        newest = Window.partitionBy(*[quoted(c) for c in pk]).orderBy(F.desc(COMMIT_SCN), F.desc(SEQ))
        src = src.withColumn("_rn", F.row_number().over(newest)).where("_rn = 1").drop("_rn")
        src = src.withColumn("_key", key_json_expr(pk))
        if self.has_deletes(spark):
            src = self.drop_superseded(spark, src, table, known)
        src = src.persist()  # read by the MERGE and again for the tombstones
        self._persisted.append(src)
        self.merge(spark, uri, src, pk, list(wanted), batch_id)

        tomb = src.where(F.col(OP) == "d").select(F.lit(table).alias("table"), "_key", COMMIT_SCN, SEQ, COMMIT_TS_MS)
        tomb = tomb.withColumnRenamed("_key", "key")
        return tomb if truncate is None else tomb.unionByName(self.truncate_tombstone(spark, table, truncate))

    @staticmethod
    def truncate_tombstone(spark: Any, table: str, truncate: tuple) -> Any:
        scn, seq, ts = truncate
        return spark.createDataFrame(
            [(table, TABLE_WIDE, scn, seq, ts)],
            f"table string, key string, {COMMIT_SCN} long, {SEQ} long, {COMMIT_TS_MS} long",
        )

    def describe(self, spark: Any, uri: str) -> tuple[bool, list[str], dict[str, str]]:
        """(exists, primary key, {column: branch}) of a state table; cached, as this query is its only
        writer. A restarted driver reads it from the Delta log once."""
        if uri in self._tables:
            pk, columns = self._tables[uri]
            return True, pk, dict(columns)
        if not is_delta_table(spark, uri):
            return False, [], {}
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]
        pk = json.loads(detail["properties"].get("txbuffer.primaryKey", "[]"))
        columns = {
            f.name: branch_of_spark_type(f.dataType.simpleString())
            for f in spark.read.format("delta").load(uri).schema.fields
            if f.name not in META_COLUMNS
        }
        return True, pk, columns

    def has_deletes(self, spark: Any) -> bool:
        if not self._deletes_exist:
            self._deletes_exist = is_delta_table(spark, self.deletes)
        return self._deletes_exist

    def read_tombstones(self, spark: Any, tables: list[str]) -> Any:
        """The tombstones of `tables` (their partitions of _deletes), cached until the batch ends."""
        known = spark.read.format("delta").load(self.deletes).where(F.col("table").isin(*tables)).persist()
        self._persisted.append(known)
        return known

    def drop_superseded(self, spark: Any, src: Any, table: str, known: Any = None) -> Any:
        """Drop changes at or before a delete of the same key, or a truncate of the table."""
        if known is None:
            known = spark.read.format("delta").load(self.deletes)
        tombs = known.where(F.col("table") == table)  # one partition
        tombs = tombs.select(F.col("key").alias("_tkey"), F.col(COMMIT_SCN).alias("_tscn"), F.col(SEQ).alias("_tseq"))
        at_or_after = (F.col("_tscn") > F.col(COMMIT_SCN)) | (
            (F.col("_tscn") == F.col(COMMIT_SCN)) & (F.col("_tseq") >= F.col(SEQ))
        )
        keyed = tombs.where(F.col("_tkey") != TABLE_WIDE)
        src = src.join(keyed, (src["_key"] == keyed["_tkey"]) & at_or_after, "left_anti")
        wide = tombs.where(F.col("_tkey") == TABLE_WIDE).agg(F.max(F.struct("_tscn", "_tseq")).alias("_w"))
        after_wide = (
            F.col("_w").isNull()
            | (F.col(COMMIT_SCN) > F.col("_w._tscn"))
            | ((F.col(COMMIT_SCN) == F.col("_w._tscn")) & (F.col(SEQ) > F.col("_w._tseq")))
        )
        return src.crossJoin(wide).where(after_wide).drop("_w")

    @staticmethod
    def create_table(spark: Any, uri: str, table: str, pk: list[str], columns: dict[str, str]) -> None:
        cols = [f"{quoted(c)} {SQL_TYPES[b]}" for c, b in columns.items()]
        cols += [f"{c} {t}" for c, t in META_COLUMNS.items()]
        props = ", ".join(f"'{k}' = '{v}'" for k, v in table_properties(table, pk).items())
        spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{uri}` ({', '.join(cols)}) USING delta TBLPROPERTIES ({props})")
        log.info("spark.state.table_created", table=table, uri=uri, primary_key=pk)

    def merge(self, spark: Any, uri: str, src: Any, pk: list[str], columns: list[str], batch_id: int) -> None:
        on = " AND ".join(f"t.{quoted(c)} <=> s.{quoted(c)}" for c in pk)
        all_cols = [quoted(c) for c in columns] + list(META_COLUMNS)
        sets = ", ".join(f"t.{c} = s.{c}" for c in all_cols)
        statement = (
            f"MERGE INTO delta.`{uri}` AS t USING {{src}} AS s ON {on} "
            f"WHEN MATCHED AND s.{OP} = 'd' AND {_newer('s', 't')} THEN DELETE "
            f"WHEN MATCHED AND {_newer('s', 't')} THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND s.{OP} <> 'd' THEN INSERT ({', '.join(all_cols)}) "
            f"VALUES ({', '.join('s.' + c for c in all_cols)})"
        )
        # src is persisted (merge_table), so Delta's own copy of the source, a localCheckpoint job
        # per MERGE, would only repeat it.
        materialize = {MATERIALIZE_SOURCE: "none"}
        self._idempotent(spark, f"{self.app_id}:state", batch_id, lambda: spark.sql(statement, src=src), **materialize)

    def record_tombstones(self, spark: Any, tombs: Any, batch_id: int) -> None:
        """Append this batch's deletes and truncates: an append is one write, where a MERGE scans the
        table twice; drop_superseded reads every tombstone of a key, not only the newest."""
        if not self.has_deletes(spark):
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS delta.`{self.deletes}` (table STRING, key STRING, {COMMIT_SCN} BIGINT, "
                f"{SEQ} BIGINT, {COMMIT_TS_MS} BIGINT) USING delta PARTITIONED BY (table)"
            )
            self._deletes_exist = True
        (
            tombs.select("table", "key", COMMIT_SCN, SEQ, COMMIT_TS_MS)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", f"{self.app_id}:deletes")
            .option("txnVersion", batch_id)
            .save(self.deletes)
        )

    @staticmethod
    def _idempotent(spark: Any, app_id: str, version: int, write: Any, **confs: str) -> None:
        """Run one Delta DML with (app id, batch id): a replayed batch is skipped by Delta itself."""
        settings = {TXN_APP_ID: app_id, TXN_VERSION: str(version), **confs}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            write()
        finally:
            for key in settings:
                spark.conf.unset(key)
