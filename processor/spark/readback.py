"""Read the Spark stage's output back without Spark (pyarrow only): for `make demo` and tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from processor.spark.decode import row_from_json
from processor.spark.sinks import local_path


def _tables(state_root: Path) -> dict[str, Path]:
    out = {}
    for ptr in sorted(state_root.glob("*/_CURRENT")):
        with open(ptr, encoding="utf-8") as f:
            meta = json.load(f)
        out[meta["table"]] = ptr.parent / meta["version"]
    return out


def read_state(output: str | os.PathLike) -> dict[str, dict[str, dict | None]]:
    """Current state: table -> canonical key JSON -> row (typed values). Deleted rows are absent."""
    import pyarrow.parquet as pq

    result: dict[str, dict[str, dict | None]] = {}
    for table, version in _tables(local_path(output) / "state").items():
        rows: dict[str, dict | None] = {}
        for f in sorted(version.glob("*.parquet")):
            t = pq.read_table(f, columns=["key", "after", "deleted"])
            for key, after, deleted in zip(*(t.column(c).to_pylist() for c in ("key", "after", "deleted"))):
                if not deleted:
                    rows[key] = row_from_json(after)
        result[table] = rows
    return result


def row_counts(output: str | os.PathLike) -> dict[str, int]:
    return {table: len(rows) for table, rows in read_state(output).items()}


def committed_changelog_files(output: str | os.PathLike) -> list[Path]:
    """Change-log files of committed batches only (a crash can leave an uncommitted batch's files)."""
    root = local_path(output) / "changelog"
    done = {int(p.name) for p in (root / "_commits").glob("*") if p.name.isdigit()}
    return sorted(f for f in root.glob("table=*/batch-*.parquet") if int(f.name.split("-")[1]) in done)


def read_changelog(output: str | os.PathLike, columns: list[str] | None = None) -> Any:
    """The change log as one pyarrow Table (committed batches only), with its `table` column."""
    from urllib.parse import unquote

    import pyarrow as pa
    import pyarrow.parquet as pq

    pieces = []
    for f in committed_changelog_files(output):
        t = pq.read_table(f, columns=columns)
        value = unquote(f.parent.name.split("=", 1)[1])
        value = None if value == "__HIVE_DEFAULT_PARTITION__" else value
        pieces.append(t.append_column("table", pa.array([value] * t.num_rows, pa.string())))
    if not pieces:
        return pa.table({"event_id": pa.array([], pa.string()), "table": pa.array([], pa.string())})
    return pa.concat_tables(pieces, promote_options="default")
