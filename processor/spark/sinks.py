"""The two sinks of the Spark stage, both written from one foreachBatch call per micro-batch.

Layout under the output directory (local filesystem):

    changelog/table=<t>/batch-<B>-<n>.parquet   append-only change log, one file set per batch
    changelog/_commits/<B>                      marker: batch B is in the change log
    state/<quoted t>/v<B>/part-*.parquet        current-state snapshot of table t as of batch B
    state/<quoted t>/_CURRENT                   JSON pointer {table, version, batch, truncated_at}

Exactly-once. Spark replays a batch with the same id and the same rows after a crash (the offsets
are in the checkpoint and event_id deduplication state is versioned by batch), so each write only
has to be idempotent per batch id:
  * change log: a batch whose marker exists is skipped; otherwise its leftovers are deleted and it
    is written again. Files reach their final names by rename, then the marker is written.
  * current state: a table whose pointer already names batch B is skipped. Otherwise the snapshot
    is rebuilt into a new version directory and the pointer is swapped by an atomic rename, so a
    reader always sees one complete snapshot.

Current-state rows keep the `(commit_scn, seq)` of the change that produced them, and deletes stay
as tombstones (`deleted = true`), so a change that arrives after a later commit of the same key
loses to it: the later commit wins whatever the arrival order. A truncate records its position in
the pointer; older changes are dropped when they arrive.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import structlog

log = structlog.get_logger(__name__)

STATE_COLUMNS = ["key", "after", "deleted", "commit_scn", "seq", "event_id", "commit_ts_ms"]
ROW_OPS = ("c", "u", "d")


def local_path(path: str | os.PathLike) -> Path:
    text = str(path)
    return Path(text[len("file:") :] if text.startswith("file:") else text)


def table_dir(state_root: Path, table: str) -> Path:
    return state_root / quote(table, safe="._-")


def _write_json_atomic(path: Path, payload: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_pointer(state_root: Path, table: str) -> dict | None:
    path = table_dir(state_root, table) / "_CURRENT"
    if not path.exists():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class BatchWriter:
    """foreachBatch target: `query.foreachBatch(BatchWriter(output))`."""

    def __init__(self, output: str | os.PathLike, keep_versions: int = 2):
        self.root = local_path(output)
        self.changelog = self.root / "changelog"
        self.state = self.root / "state"
        self.keep_versions = keep_versions

    def __call__(self, df: Any, batch_id: int) -> None:
        # Two writes read the batch: cache it so the source and the dedup state run once.
        df = df.persist()
        try:
            n = self.write_changelog(df, batch_id)
            tables = self.apply_state(df, batch_id)
            log.info("spark.batch.written", batch=batch_id, changes=n, tables=tables)
        finally:
            df.unpersist()

    # ---- change log -------------------------------------------------------------------------
    def write_changelog(self, df: Any, batch_id: int) -> int | None:
        marker = self.changelog / "_commits" / str(batch_id)
        if marker.exists():
            log.info("spark.changelog.replayed_batch_skipped", batch=batch_id)
            return None
        prefix = f"batch-{batch_id:012d}-"
        for stale in self.changelog.glob(f"table=*/{prefix}*"):
            stale.unlink()  # leftovers of an attempt that died before its marker
        staging = self.changelog / "_staging" / str(batch_id)
        shutil.rmtree(staging, ignore_errors=True)
        df.write.mode("overwrite").partitionBy("table").parquet(str(staging))
        n = 0
        for part_dir in sorted(staging.glob("table=*")):
            dest = self.changelog / part_dir.name
            dest.mkdir(parents=True, exist_ok=True)
            for i, f in enumerate(sorted(part_dir.glob("*.parquet"))):
                os.replace(f, dest / f"{prefix}{i:05d}.parquet")
                n += 1
        marker.parent.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(marker, {"batch": batch_id, "files": n})
        shutil.rmtree(staging, ignore_errors=True)
        return df.count()

    # ---- current state ----------------------------------------------------------------------
    def apply_state(self, df: Any, batch_id: int) -> list[str]:
        from pyspark.sql import functions as F
        from pyspark.sql.window import Window

        rows = df.where(F.col("table").isNotNull() & F.col("op").isin(*ROW_OPS, "t"))
        summary = (
            rows.groupBy("table")
            .agg(F.max(F.when(F.col("op") == "t", F.struct("commit_scn", "seq"))).alias("trunc"))
            .collect()
        )
        pending: dict[str, dict | None] = {}
        for r in summary:
            ptr = read_pointer(self.state, r["table"])
            if ptr is not None and ptr["batch"] >= batch_id:
                continue  # replay of a batch this table already absorbed
            old = tuple(ptr["truncated_at"]) if ptr and ptr["truncated_at"] else None
            new = (r["trunc"]["commit_scn"], r["trunc"]["seq"]) if r["trunc"] else None
            pending[r["table"]] = {"ptr": ptr, "trunc": max(filter(None, (old, new)), default=None)}
        if not pending:
            return []
        names = sorted(pending)
        tid = {t: i for i, t in enumerate(names)}
        tid_col = F.create_map(*[x for t in names for x in (F.lit(t), F.lit(tid[t]))])

        incoming = rows.where(F.col("table").isin(*names) & F.col("op").isin(*ROW_OPS)).select(
            tid_col[F.col("table")].alias("tid"),
            "key",
            F.when(F.col("op") == "d", F.lit(None)).otherwise(F.col("after")).alias("after"),
            (F.col("op") == "d").alias("deleted"),
            "commit_scn",
            "seq",
            "event_id",
            "commit_ts_ms",
        )
        parts = [incoming]
        for t in names:
            ptr = pending[t]["ptr"]
            if ptr is not None:
                snap = self.spark_read_state(df.sparkSession, table_dir(self.state, t) / ptr["version"])
                parts.append(snap.select(F.lit(tid[t]).alias("tid"), *STATE_COLUMNS))
        merged = parts[0]
        for p in parts[1:]:
            merged = merged.unionByName(p)
        # Drop what a truncate wiped: anything at or before its (commit_scn, seq).
        for t in names:
            trunc = pending[t]["trunc"]
            if trunc:
                before_trunc = (F.col("commit_scn") < trunc[0]) | (
                    (F.col("commit_scn") == trunc[0]) & (F.col("seq") <= trunc[1])
                )
                merged = merged.where(~((F.col("tid") == tid[t]) & before_trunc))
        latest = Window.partitionBy("tid", "key").orderBy(F.desc("commit_scn"), F.desc("seq"), F.desc("event_id"))
        winners = merged.withColumn("_rn", F.row_number().over(latest)).where("_rn = 1").drop("_rn")

        staging = self.state / "_staging" / str(batch_id)
        shutil.rmtree(staging, ignore_errors=True)
        winners.write.mode("overwrite").partitionBy("tid").parquet(str(staging))
        version = f"v{batch_id:012d}"
        for t in names:
            tdir = table_dir(self.state, t)
            tdir.mkdir(parents=True, exist_ok=True)
            dest = tdir / version
            shutil.rmtree(dest, ignore_errors=True)
            src = staging / f"tid={tid[t]}"
            if src.exists():
                os.replace(src, dest)
            else:
                dest.mkdir()  # every row truncated away: an empty snapshot
            trunc = pending[t]["trunc"]
            _write_json_atomic(
                tdir / "_CURRENT",
                {"table": t, "version": version, "batch": batch_id, "truncated_at": list(trunc) if trunc else None},
            )
            self._prune(tdir, version)
        shutil.rmtree(staging, ignore_errors=True)
        return names

    @staticmethod
    def spark_read_state(spark: Any, path: Path) -> Any:
        from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

        schema = StructType(
            [
                StructField("key", StringType()),
                StructField("after", StringType()),
                StructField("deleted", BooleanType()),
                StructField("commit_scn", LongType()),
                StructField("seq", LongType()),
                StructField("event_id", StringType()),
                StructField("commit_ts_ms", LongType()),
            ]
        )
        return spark.read.schema(schema).parquet(str(path))

    def _prune(self, tdir: Path, current: str) -> None:
        """Keep the newest versions only; an older reader may still be on the previous one."""
        versions = sorted(p for p in tdir.glob("v*") if p.is_dir() and p.name != current)
        for old in versions[: max(0, len(versions) - (self.keep_versions - 1))]:
            shutil.rmtree(old, ignore_errors=True)
