"""Read the Spark stage's Delta tables back without a JVM, through delta-rs (`deltalake`).

The second, independent reader of the tables: `make demo`, the tests and the README use it.
Every read goes through delta-rs's DataFusion scan (`DeltaTable.scan`), which applies deletion
vectors: `to_pyarrow_table()` reads the data files as they are and would return the rows a
MERGE or DELETE marked deleted in a table with `delta.enableDeletionVectors`.
Rows come back as plain dicts keyed by a canonical primary-key string (sorted column names, compact
JSON, bytes as {"$bytes": hex}); columns that are null in a row are left out of its dict, because
a typed table has every column of every row while the source rows may not name them all.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from processor.spark.row_types import COMMIT_SCN, META_COLUMNS


def local_path(uri: str | os.PathLike) -> Path:
    """A file: URI or plain path as a local Path (readback lists directories)."""
    text = str(uri)
    if text.startswith("file:"):
        return Path(urlparse(text).path)
    return Path(text)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$double": repr(value)}
    return value


def scan_table(dt: Any, columns: list[str] | None = None) -> Any:
    """The rows of a DeltaTable (deletion vectors applied) as one pyarrow Table, view types cast to
    plain string and binary (what to_pyarrow_table gave)."""
    import pyarrow as pa

    table = pa.table(dt.scan(columns=columns))
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return table.cast(pa.schema([f.with_type(plain.get(f.type, f.type)) for f in table.schema]))


def key_string(key: dict) -> str:
    """The canonical identity of a primary key: what read_state keys its rows by."""
    return json.dumps({k: _jsonable(v) for k, v in key.items()}, sort_keys=True, separators=(",", ":"))


def state_tables(output: str | os.PathLike) -> dict[str, Path]:
    """Source table name -> its current-state Delta table directory."""
    from deltalake import DeltaTable

    out = {}
    for d in sorted((local_path(output) / "state").glob("*/_delta_log")):
        config = DeltaTable(str(d.parent)).metadata().configuration
        out[config.get("txbuffer.table", d.parent.name)] = d.parent
    return out


def read_table_rows(path: str | os.PathLike, version: int | None = None) -> dict[str, dict]:
    """One current-state table as {key string: row}, at its latest or a given Delta version."""
    from deltalake import DeltaTable

    dt = DeltaTable(str(path), version=version)
    pk = json.loads(dt.metadata().configuration.get("txbuffer.primaryKey", "[]"))
    rows: dict[str, dict] = {}
    for row in scan_table(dt).to_pylist():
        data = {k: v for k, v in row.items() if k not in META_COLUMNS and v is not None}
        rows[key_string({c: row[c] for c in pk})] = data
    return rows


def read_state(output: str | os.PathLike) -> dict[str, dict[str, dict]]:
    """Current state of every table: table -> key string -> row (typed values, nulls left out)."""
    return {table: read_table_rows(path) for table, path in state_tables(output).items()}


def row_counts(output: str | os.PathLike) -> dict[str, int]:
    from deltalake import DeltaTable

    # Not DeltaTable.count(): the file statistics count rows a deletion vector has deleted.
    return {
        table: scan_table(DeltaTable(str(path)), columns=[COMMIT_SCN]).num_rows
        for table, path in state_tables(output).items()
    }


def table_version(path: str | os.PathLike) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).version()


def read_changelog(output: str | os.PathLike, columns: list[str] | None = None) -> Any:
    """The change log as one pyarrow Table (every committed Delta version; nothing half-written)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    path = local_path(output) / "changelog"
    if not (path / "_delta_log").exists():
        return pa.table({"event_id": pa.array([], pa.string()), "table": pa.array([], pa.string())})
    return scan_table(DeltaTable(str(path)), columns=columns)
