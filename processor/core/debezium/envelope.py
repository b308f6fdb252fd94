"""Debezium records from txbuffer's outputs: change events, tombstones, transaction metadata, DDL.

Inputs are decoded txbuffer records (ChangeEvent, TransactionEvent), so the one dispatch path of
the emitter feeds both output modes. Outputs are Records: a topic and Connect-level key and value
(schema + payload); connect_json.py and avro.py serialize them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from processor.core.debezium import source_blocks as sb
from processor.core.debezium.schemas import SchemaBook, TableSchema, avro_name

ENVELOPE_VERSION = 2  # Debezium 2.x/3.x SchemaFactory: the Envelope schema's version
OPS = {"c": "c", "u": "u", "d": "d", "t": "t", "r": "r"}

TRANSACTION_BLOCK = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
}
TRANSACTION_KEY = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "id"}],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "version": 1,
}
TRANSACTION_VALUE = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {
            "type": "array",
            "items": {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "data_collection"},
                    {"type": "int64", "optional": False, "field": "event_count"},
                ],
                "optional": False,
                "name": "event.collection",
                "version": 1,
            },
            "optional": True,
            "field": "data_collections",
        },
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}


class NotAChange(ValueError):
    """A txbuffer change this output mode has no Debezium counterpart for."""


@dataclass(frozen=True)
class Record:
    topic: str
    key_schema: dict[str, Any] | None
    key: dict[str, Any] | None
    value_schema: dict[str, Any] | None
    value: dict[str, Any] | None  # None: a tombstone


class DebeziumRecords:
    """Builds the records of one output: topic prefix, connector family, database name."""

    def __init__(self, ctx: sb.SourceContext, book: SchemaBook):
        if ctx.family not in sb.FAMILIES:
            raise ValueError(f"unknown connector family {ctx.family!r}; one of {sb.FAMILIES}")
        self.ctx = ctx
        self.book = book
        self._envelopes: dict[tuple[str, int], tuple[dict[str, Any] | None, dict[str, Any]]] = {}

    # ---- names -------------------------------------------------------------------------------

    def topic(self, table: str) -> str:
        return f"{self.ctx.topic_prefix}.{table}"

    def record_name(self, schema: TableSchema, suffix: str) -> str:
        parts = [self.ctx.topic_prefix, *schema.table.split(".")]
        return ".".join(avro_name(p) for p in parts) + "." + suffix

    @property
    def transaction_topic(self) -> str:
        return f"{self.ctx.topic_prefix}.transaction"

    # ---- schemas -----------------------------------------------------------------------------

    def schemas(self, schema: TableSchema) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """(Key schema, Envelope schema) of one table schema version, built once."""
        cached = self._envelopes.get((schema.table, schema.version))
        if cached is not None:
            return cached
        value = schema.value_connect(self.record_name(schema, "Value"))
        envelope = {
            "type": "struct",
            "fields": [
                {**value, "field": "before"},
                {**value, "field": "after"},
                {**sb.source_connect(self.ctx.family), "field": "source"},
                {**TRANSACTION_BLOCK, "field": "transaction"},
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
            ],
            "optional": False,
            "name": self.record_name(schema, "Envelope"),
            "version": ENVELOPE_VERSION,
        }
        key = schema.key_connect(self.record_name(schema, "Key"))
        self._envelopes[(schema.table, schema.version)] = (key, envelope)
        return key, envelope

    # ---- records -----------------------------------------------------------------------------

    def change(self, change: dict[str, Any], now_ms: int) -> Record:
        """One row change (op c/u/d) or truncate (t). Raises RowMismatch for a row that does not fit."""
        op = change["op"]
        if op not in OPS:
            raise NotAChange(f"op {op!r} is not a row change")
        src = change["source"]
        table = src["table"] or ""
        if op == "t":
            schema = self.book.tables.get(table) or self.book.for_row(table, None, None, None)
        else:
            attrs = src.get("attrs") or {}
            schema = self.book.for_change(table, change["key"], change["before"], change["after"], attrs)
        key_schema, envelope = self.schemas(schema)
        if op == "t":
            key, before, after = None, None, None
            key_schema = None  # Debezium's truncate events carry no key
        else:
            key = schema.key_payload(change["key"])
            before = schema.row(change["before"], partial=True)
            after = schema.row(change["after"])
        txn = change.get("transaction")
        value = {
            "before": before,
            "after": after,
            "source": sb.source_payload(self.ctx, src, schema.schema_name, schema.table_name, op == "r"),
            "transaction": None
            if txn is None
            else {
                "id": sb.transaction_id(self.ctx.family, txn["id"], src["commit_scn"]),
                "total_order": txn["total_order"],
                "data_collection_order": txn["data_collection_order"],
            },
            "op": op,
            "ts_ms": now_ms,
            "ts_us": now_ms * 1000,
            "ts_ns": now_ms * 1_000_000,
        }
        return Record(self.topic(table), key_schema, key, envelope, value)

    def tombstone(self, change_record: Record) -> Record:
        """The null-value record after a delete, on the same topic and key (for compaction)."""
        return Record(change_record.topic, change_record.key_schema, change_record.key, None, None)

    def transaction(self, event: dict[str, Any]) -> Record:
        """BEGIN or END on <prefix>.transaction, from a txbuffer TransactionEvent."""
        tid = sb.transaction_id(self.ctx.family, event["id"], event["commit_scn"])
        collections = event.get("data_collections")
        value = {
            "status": event["status"],
            "id": tid,
            "event_count": event.get("event_count"),
            "data_collections": None
            if collections is None
            else [{"data_collection": c["name"], "event_count": c["event_count"]} for c in collections],
            "ts_ms": event["ts_ms"],
        }
        return Record(self.transaction_topic, TRANSACTION_KEY, {"id": tid}, TRANSACTION_VALUE, value)

    def row_records(self, change: dict[str, Any], now_ms: int, tombstones: bool) -> list[Record]:
        """Every record of one change, as Debezium writes them: a delete may be followed by a
        tombstone, and an update that changes the primary key becomes delete (+ tombstone) of the
        old key, then create of the new one."""
        record = self.change(change, now_ms)
        value = record.value or {}
        out = [record]
        if value.get("op") == "u" and record.key is not None and value.get("before") is not None:
            old_key = {k: value["before"].get(k) for k in record.key}
            if None not in old_key.values() and old_key != record.key:
                delete = {**value, "after": None, "op": "d"}
                create = {**value, "before": None, "op": "c"}
                out = [
                    Record(record.topic, record.key_schema, old_key, record.value_schema, delete),
                    Record(record.topic, record.key_schema, record.key, record.value_schema, create),
                ]
        if tombstones:
            with_tombstones = []
            for r in out:
                with_tombstones.append(r)
                if (r.value or {}).get("op") == "d" and r.key is not None:
                    with_tombstones.append(self.tombstone(r))
            out = with_tombstones
        return out
