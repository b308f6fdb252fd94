"""Schemas and codecs for the three Avro contracts (schemas/*.avsc).

Everything that reads or writes Avro goes through this module; nothing hand-rolls
the binary format.
"""

from __future__ import annotations

import io
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

SCHEMA_DIR = Path(os.environ.get("TXBUFFER_SCHEMAS", Path(__file__).resolve().parent.parent / "schemas"))

# Ops, as in the RawEvent `Op` enum.
BEGIN = "BEGIN"
INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"
TRUNCATE = "TRUNCATE"
DDL = "DDL"
LOB_WRITE = "LOB_WRITE"
LOB_ERASE = "LOB_ERASE"
LOB_TRIM = "LOB_TRIM"
XML_WRITE = "XML_WRITE"
LONG_STRING_WRITE = "LONG_STRING_WRITE"
SAVEPOINT = "SAVEPOINT"
ROLLBACK_TO_SAVEPOINT = "ROLLBACK_TO_SAVEPOINT"
SUBTXN_ABORT = "SUBTXN_ABORT"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
HEARTBEAT = "HEARTBEAT"
READ = "READ"  # a row of an initial snapshot (Debezium op "r"); appended last to the enum

CHANGE_OPS = frozenset({INSERT, UPDATE, DELETE, TRUNCATE, DDL, READ})
FRAGMENT_OPS = frozenset({LOB_WRITE, LOB_ERASE, LOB_TRIM, XML_WRITE, LONG_STRING_WRITE})
ROW_OPS = frozenset({INSERT, UPDATE, DELETE, READ})
ALL_OPS = (
    BEGIN,
    INSERT,
    UPDATE,
    DELETE,
    TRUNCATE,
    DDL,
    LOB_WRITE,
    LOB_ERASE,
    LOB_TRIM,
    XML_WRITE,
    LONG_STRING_WRITE,
    SAVEPOINT,
    ROLLBACK_TO_SAVEPOINT,
    SUBTXN_ABORT,
    COMMIT,
    ROLLBACK,
    HEARTBEAT,
    READ,
)

# RawEvent op -> Debezium envelope op.
ENVELOPE_OP = {INSERT: "c", UPDATE: "u", DELETE: "d", TRUNCATE: "t", DDL: "ddl", READ: "r"}


def _read_record(buf: Any, schema: Any, reader_schema: Any = None) -> dict[str, Any]:
    """fastavro's reader, typed: every schema read here is a record, so the result is a dict."""
    record: dict[str, Any] = fastavro.schemaless_reader(buf, schema, reader_schema)  # type: ignore[assignment]
    return record


class DecodeError(ValueError):
    """A record that does not decode as the expected schema."""


@cache
def load_schema(name: str) -> Any:
    """Parse schemas/<name>.avsc (name: raw_event, change_event, transaction_event)."""
    with open(SCHEMA_DIR / f"{name}.avsc", encoding="utf-8") as f:
        return fastavro.parse_schema(json.load(f))


def raw_schema() -> Any:
    return load_schema("raw_event")


def change_schema() -> Any:
    return load_schema("change_event")


def transaction_schema() -> Any:
    return load_schema("transaction_event")


def encode(schema: Any, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


def decode(schema: Any, data: bytes) -> dict[str, Any]:
    """Decode one schemaless Avro record; raise DecodeError on bytes that do not fit."""
    if not data:
        raise DecodeError("empty record")
    buf = io.BytesIO(data)
    try:
        record = _read_record(buf, schema, None)
    except Exception as exc:  # fastavro raises many types (EOFError, IndexError, UnicodeDecodeError...)
        raise DecodeError(f"undecodable Avro: {type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(data):
        raise DecodeError(f"trailing bytes: decoded {buf.tell()} of {len(data)}")
    return record


def raw_event(xid: str, op: str, seq: int, scn: int, **fields: Any) -> dict[str, Any]:
    """A RawEvent dict with every default filled in (for sources, the generator and tests)."""
    event = {
        "xid": xid,
        "op": op,
        "seq": seq,
        "scn": scn,
        "thread": 1,
        "ts_ms": 0,
        "table": None,
        "key": None,
        "before": None,
        "after": None,
        "ddl": None,
        "subxid": None,
        "savepoint": None,
        "undo": False,
        "row_id": None,
        "user": None,
        "client": None,
        "lob_column": None,
        "lob_offset": None,
        "lob_data": None,
        "attrs": {},
        "lob_length": None,
    }
    unknown = set(fields) - set(event)
    if unknown:
        raise TypeError(f"unknown RawEvent fields: {sorted(unknown)}")
    event.update(fields)
    return event


def encode_raw(event: dict[str, Any]) -> bytes:
    return encode(raw_schema(), event)


def decode_raw(data: bytes) -> dict[str, Any]:
    return decode(raw_schema(), data)


def encode_change(event: dict[str, Any]) -> bytes:
    return encode(change_schema(), event)


def decode_change(data: bytes) -> dict[str, Any]:
    return decode(change_schema(), data)


def transaction_record(
    status: str,
    xid: str,
    scn: int,
    ts_ms: int,
    thread: int,
    event_count: int | None,
    tables: dict[str, int] | None,
    partition: int | None,
    offset: int | None,
    ordering: str | None,
) -> dict[str, Any]:
    """A TransactionEvent record; tables ({name: changes}, or None) become data_collections by name."""
    return {
        "status": status,
        "id": xid,
        "commit_scn": scn,
        "ts_ms": ts_ms,
        "thread": thread,
        "event_count": event_count,
        "data_collections": None
        if tables is None
        else [{"name": n, "event_count": c} for n, c in sorted(tables.items())],
        "input_partition": partition,
        "commit_offset": offset,
        "ordering": ordering,
        "reason": None,
    }


def encode_transaction(event: dict[str, Any]) -> bytes:
    return encode(transaction_schema(), event)


def decode_transaction(data: bytes) -> dict[str, Any]:
    return decode(transaction_schema(), data)


def encode_outcome(record: dict[str, Any]) -> bytes:
    return encode(load_schema("txn_outcome"), record)


def decode_outcome(data: bytes) -> dict[str, Any]:
    return decode(load_schema("txn_outcome"), data)


def event_id(thread: int, commit_scn: int, xid: str, seq: int) -> str:
    """The deterministic identity of an emitted change; consumers deduplicate on it."""
    return f"{thread}:{commit_scn}:{xid}:{seq}"


def change_key(table: str | None, key: dict[str, Any] | None) -> bytes:
    """Kafka key of a ChangeEvent: table plus primary key, so one row stays in one partition."""
    body = json.dumps(key or {}, sort_keys=True, separators=(",", ":"), default=_json_default)
    return f"{table or ''}|{body}".encode()


def _json_default(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# ----------------------------------------------------------------------------- fast paths
# Avro encodes a record as the concatenation of its fields. Schemas made of a record's first
# fields therefore read just that prefix, and a ChangeEvent can be assembled from fastavro-encoded
# parts: head fields + the raw event's trailing key/before/after/ddl bytes + tail fields.

_BODY_FIELDS = ("key", "before", "after", "ddl")


def _sub_schema(name: str, source: str, fields: slice) -> Any:
    with open(SCHEMA_DIR / f"{source}.avsc", encoding="utf-8") as f:
        doc = json.load(f)
    return fastavro.parse_schema(
        {"type": "record", "name": name, "namespace": "txbuffer.part", "fields": doc["fields"][fields]}
    )


@cache
def _parts() -> dict[str, Any]:
    with open(SCHEMA_DIR / "raw_event.avsc", encoding="utf-8") as f:
        raw_names = [fld["name"] for fld in json.load(f)["fields"]]
    with open(SCHEMA_DIR / "change_event.avsc", encoding="utf-8") as f:
        change_names = [fld["name"] for fld in json.load(f)["fields"]]
    body_at = raw_names.index("key")
    change_body_at = change_names.index("key")
    # The splice is only valid while both schemas keep these fields last/adjacent in this order.
    assert tuple(raw_names[body_at:]) == _BODY_FIELDS, raw_names
    assert tuple(change_names[change_body_at : change_body_at + 4]) == _BODY_FIELDS, change_names
    return {
        "routing": _sub_schema("RawRouting", "raw_event", slice(0, body_at)),
        "key": _sub_schema("RawKey", "raw_event", slice(body_at, body_at + 1)),
        "body": _sub_schema("RawBody", "raw_event", slice(body_at, None)),
        "head": _sub_schema("ChangeHead", "change_event", slice(0, change_body_at)),
        "tail": _sub_schema("ChangeTail", "change_event", slice(change_body_at + 4, None)),
    }


def decode_routing(data: bytes) -> tuple[dict[str, Any], int]:
    """The RawEvent fields before key/before/after/ddl, and the offset where `key` starts."""
    buf = io.BytesIO(data)
    try:
        head = _read_record(buf, _parts()["routing"], None)
    except Exception as exc:
        raise DecodeError(f"undecodable Avro: {type(exc).__name__}: {exc}") from exc
    return head, buf.tell()


def decode_raw_with_body_offset(data: bytes) -> tuple[dict[str, Any], int]:
    """A whole RawEvent, validated to its last byte, and the offset where `key` starts."""
    if not data:
        raise DecodeError("empty record")
    buf = io.BytesIO(data)
    parts = _parts()
    try:
        record = _read_record(buf, parts["routing"], None)
        body_at = buf.tell()
        record.update(_read_record(buf, parts["body"], None))
    except Exception as exc:  # fastavro raises many types (EOFError, IndexError, UnicodeDecodeError...)
        raise DecodeError(f"undecodable Avro: {type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(data):
        raise DecodeError(f"trailing bytes: decoded {buf.tell()} of {len(data)}")
    return record, body_at


def decode_key_at(data: bytes, position: int) -> dict[str, Any] | None:
    key: dict[str, Any] | None = _read_record(io.BytesIO(memoryview(data)[position:]), _parts()["key"], None)["key"]
    return key


def encode_change_spliced(head: dict[str, Any], body: bytes | memoryview, tail: dict[str, Any]) -> bytes:
    """ChangeEvent bytes from {event_id, op, ts_ms}, the raw key..ddl bytes and {source, transaction}."""
    parts = _parts()
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parts["head"], head)
    buf.write(body)
    fastavro.schemaless_writer(buf, parts["tail"], tail)
    return buf.getvalue()
