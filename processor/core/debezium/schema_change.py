"""Debezium's schema change event (topic <prefix>) for a DDL that txbuffer passed through.

Debezium's PostgreSQL connector emits none (logical decoding has no DDL); its Oracle and Db2
connectors do. txbuffer emits one for every DDL event, with the table's new columns when known.
"""

from __future__ import annotations

from typing import Any

from processor.core.debezium import source_blocks as sb
from processor.core.debezium.envelope import DebeziumRecords, Record
from processor.core.debezium.schemas import TableSchema

# Connect type (and logical name) -> java.sql.Types, as Debezium's tableChanges report jdbcType.
_JDBC = {
    "int8": -6,
    "int16": 5,
    "int32": 4,
    "int64": -5,
    "float": 7,
    "double": 8,
    "boolean": 16,
    "string": 12,
    "bytes": -2,
    "array": 2003,
    "struct": 2,
    "org.apache.kafka.connect.data.Decimal": 2,
    "io.debezium.time.Date": 91,
    "io.debezium.time.Timestamp": 93,
    "io.debezium.time.MicroTimestamp": 93,
    "io.debezium.time.ZonedTimestamp": 2014,
    "io.debezium.time.MicroTime": 92,
    "io.debezium.time.ZonedTime": 2013,
}


def _opt(kind: str, name: str, **extra: object) -> dict[str, Any]:
    return {"type": kind, "optional": True, **extra, "field": name}


def _req(kind: str, name: str, **extra: object) -> dict[str, Any]:
    return {"type": kind, "optional": False, **extra, "field": name}


COLUMN = {
    "type": "struct",
    "fields": [
        _req("string", "name"),
        _req("int32", "jdbcType"),
        _req("string", "typeName"),
        _req("int32", "position"),
        _opt("boolean", "optional"),
    ],
    "optional": False,
    "name": "io.debezium.connector.schema.Column",
    "version": 1,
}
TABLE = {
    "type": "struct",
    "fields": [
        _opt("array", "primaryKeyColumnNames", items={"type": "string", "optional": False}),
        _req("array", "columns", items=COLUMN),
    ],
    "optional": True,
    "name": "io.debezium.connector.schema.Table",
    "version": 1,
}
CHANGE = {
    "type": "struct",
    "fields": [_req("string", "type"), _req("string", "id"), {**TABLE, "field": "table"}],
    "optional": False,
    "name": "io.debezium.connector.schema.Change",
    "version": 1,
}


def value_schema(family: str) -> dict[str, Any]:
    connector = sb.CONNECTOR_NAMES[family]
    return {
        "type": "struct",
        "fields": [
            {**sb.source_connect(family), "field": "source"},
            _req("int64", "ts_ms"),
            _opt("string", "databaseName"),
            _opt("string", "schemaName"),
            _opt("string", "ddl"),
            _req("array", "tableChanges", items=CHANGE),
        ],
        "optional": False,
        "name": f"io.debezium.connector.{connector}.SchemaChangeValue",
        "version": 1,
    }


def key_schema(family: str) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [_req("string", "databaseName")],
        "optional": False,
        "name": f"io.debezium.connector.{sb.CONNECTOR_NAMES[family]}.SchemaChangeKey",
        "version": 1,
    }


def _columns(schema: TableSchema) -> list[dict[str, Any]]:
    out = []
    for position, col in enumerate(schema.columns, 1):
        connect = col.type.connect
        jdbc = _JDBC.get(connect.get("name", ""), _JDBC.get(connect["type"], 1111))
        out.append(
            {
                "name": col.name,
                "jdbcType": jdbc,
                "typeName": col.type.name,
                "position": position,
                "optional": col.optional and col.name not in schema.key,
            }
        )
    return out


def schema_change_record(
    records: DebeziumRecords, change: dict[str, Any], schema: TableSchema | None, now_ms: int
) -> Record:
    ctx = records.ctx
    src = change["source"]
    table = src["table"] or ""
    schema_name, _, table_name = table.rpartition(".")
    database = (src.get("attrs") or {}).get("db") or ctx.database
    changes = []
    if schema is not None:
        changes.append(
            {
                "type": "ALTER",
                "id": f'"{database}"."{schema_name}"."{table_name}"',
                "table": {"primaryKeyColumnNames": list(schema.key), "columns": _columns(schema)},
            }
        )
    value = {
        "source": sb.source_payload(ctx, src, schema_name, table_name),
        "ts_ms": now_ms,
        "databaseName": database,
        "schemaName": schema_name,
        "ddl": change.get("ddl"),
        "tableChanges": changes,
    }
    return Record(ctx.topic_prefix, key_schema(ctx.family), {"databaseName": database}, value_schema(ctx.family), value)
