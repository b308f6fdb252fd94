"""The `source` block of each Debezium connector family, built from a txbuffer ChangeEvent.

Field names and types follow Debezium's SourceInfo struct makers: the common fields
(version, connector, name, ts_ms, snapshot, db, sequence, ts_us, ts_ns), then the family's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FAMILIES = ("postgresql", "oracle", "ibmi")
SNAPSHOT_VALUES = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"


def _f(kind: str, field: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, **extra, "field": field}


_COMMON = [
    _f("string", "version", False),
    _f("string", "connector", False),
    _f("string", "name", False),
    _f("int64", "ts_ms", False),
    _f(
        "string",
        "snapshot",
        name="io.debezium.data.Enum",
        version=1,
        parameters={"allowed": SNAPSHOT_VALUES},
        default="false",
    ),
    _f("string", "db", False),
    _f("string", "sequence"),
    _f("int64", "ts_us"),
    _f("int64", "ts_ns"),
    _f("string", "schema", False),
    _f("string", "table", False),
]

_FAMILY_FIELDS = {
    "postgresql": [_f("int64", "txId"), _f("int64", "lsn"), _f("int64", "xmin")],
    "oracle": [
        _f("string", "txId"),
        _f("string", "scn"),
        _f("string", "commit_scn"),
        _f("string", "lcr_position"),
        _f("string", "rs_id"),
        _f("int64", "ssn"),
        _f("int32", "redo_thread"),
        _f("string", "user_name"),
        _f("string", "redo_sql"),
        _f("string", "row_id"),
    ],
    "ibmi": [
        _f("string", "receiver"),
        _f("string", "receiver_library"),
        _f("string", "event_time"),
        _f("int64", "sequence_number"),
        _f("string", "journal_code"),
        _f("string", "entry_type"),
        _f("string", "user_name"),
        _f("int64", "rrn"),
    ],
}

_SCHEMA_NAMES = {
    "postgresql": "io.debezium.connector.postgresql.Source",
    "oracle": "io.debezium.connector.oracle.Source",
    "ibmi": "io.debezium.connector.db2as400.Source",
}
CONNECTOR_NAMES = {"postgresql": "postgresql", "oracle": "oracle", "ibmi": "db2as400"}


def source_connect(family: str) -> dict[str, Any]:
    """The Connect schema of the family's source block."""
    return {
        "type": "struct",
        "fields": _COMMON + _FAMILY_FIELDS[family],
        "optional": False,
        "name": _SCHEMA_NAMES[family],
    }


@dataclass(frozen=True)
class SourceContext:
    """Per-output settings that Debezium takes from its connector configuration."""

    family: str
    topic_prefix: str  # Debezium's `name` (topic.prefix)
    database: str  # Debezium's `db`
    version: str  # Debezium's `version`: here the txbuffer release


def _int_or_none(value: str | None) -> int | None:
    try:
        return None if value is None or value == "" else int(value)
    except ValueError:
        return None


def _postgresql(src: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    return {
        "sequence": json.dumps([str(src["commit_scn"]), str(src["scn"])], separators=(",", ":")),
        "txId": _int_or_none(src["xid"]),
        "lsn": src["scn"],
        "xmin": None,
    }


def _oracle(src: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    return {
        "sequence": None,
        "txId": src["xid"],
        "scn": str(src["scn"]),
        "commit_scn": str(src["commit_scn"]),
        "lcr_position": None,
        "rs_id": attrs.get("rs_id"),
        "ssn": _int_or_none(attrs.get("ssn")),
        "redo_thread": src["thread"],
        "user_name": src["user"],
        "redo_sql": attrs.get("redo_sql"),
        "row_id": src["row_id"],
    }


def _ibmi(src: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    receiver = attrs.get("receiver") or ""
    library, _, name = receiver.rpartition("/")
    return {
        "sequence": None,
        "receiver": name or None,
        "receiver_library": library or None,
        "event_time": None,
        "sequence_number": src["scn"],
        "journal_code": attrs.get("journal_code"),
        "entry_type": attrs.get("entry_type"),
        "user_name": src["user"],
        "rrn": _int_or_none(src["row_id"]),
    }


_BUILDERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "postgresql": _postgresql,
    "oracle": _oracle,
    "ibmi": _ibmi,
}


def source_payload(
    ctx: SourceContext, src: dict[str, Any], schema_name: str, table_name: str, snapshot: bool = False
) -> dict[str, Any]:
    """The source block of one change; src is the txbuffer ChangeEvent's `source` record."""
    attrs = src.get("attrs") or {}
    ts_ms = src["commit_ts_ms"]
    block = {
        "version": ctx.version,
        "connector": CONNECTOR_NAMES[ctx.family],
        "name": ctx.topic_prefix,
        "ts_ms": ts_ms,
        "snapshot": "true" if snapshot else "false",
        "db": attrs.get("db") or ctx.database,
        "ts_us": ts_ms * 1000,
        "ts_ns": ts_ms * 1_000_000,
        "schema": schema_name,
        "table": table_name,
    }
    block.update(_BUILDERS[ctx.family](src, attrs))
    if ctx.family == "ibmi":
        block["event_time"] = str(ts_ms)
    return {f["field"]: block.get(f["field"]) for f in source_connect(ctx.family)["fields"]}


def transaction_id(family: str, xid: str, commit_scn: int) -> str:
    """Debezium's transaction id: "<txId>:<commit LSN>" for PostgreSQL, the XID elsewhere."""
    return f"{xid}:{commit_scn}" if family == "postgresql" else xid
