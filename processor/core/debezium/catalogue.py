"""The column catalogue: typed columns for sources whose log carries no types (Oracle, IBM i replay).

The user gives one file (YAML or JSON) listing each table's columns in order, with the source's
type names and the key columns; docs/debezium.md has an example. Type names are read in the
connector family's own vocabulary: Oracle's DATE holds a time, PostgreSQL's does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from processor.core.debezium import types as t


class CatalogueError(ValueError):
    """A catalogue entry that cannot be read; the message names the table and column."""


@dataclass(frozen=True)
class Column:
    name: str
    type: t.ColumnType
    optional: bool = True


@dataclass(frozen=True)
class TableColumns:
    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]


_SIMPLE: dict[str, t.ColumnType] = {
    "smallint": t.INT16,
    "int2": t.INT16,
    "integer": t.INT32,
    "int": t.INT32,
    "int4": t.INT32,
    "bigint": t.INT64,
    "int8": t.INT64,
    "real": t.FLOAT32,
    "float4": t.FLOAT32,
    "binary_float": t.FLOAT32,
    "double precision": t.FLOAT64,
    "double": t.FLOAT64,
    "float8": t.FLOAT64,
    "float": t.FLOAT64,
    "binary_double": t.FLOAT64,
    "boolean": t.BOOLEAN,
    "bool": t.BOOLEAN,
    "text": t.STRING,
    "varchar": t.STRING,
    "character varying": t.STRING,
    "char": t.STRING,
    "character": t.STRING,
    "bpchar": t.STRING,
    "varchar2": t.STRING,
    "nvarchar2": t.STRING,
    "nchar": t.STRING,
    "clob": t.STRING,
    "nclob": t.STRING,
    "dbclob": t.STRING,
    "long": t.STRING,
    "graphic": t.STRING,
    "vargraphic": t.STRING,
    "bytea": t.BYTES,
    "raw": t.BYTES,
    "long raw": t.BYTES,
    "blob": t.BYTES,
    "binary": t.BYTES,
    "varbinary": t.BYTES,
    "rowid": t.STRING,
    "date": t.DATE,
    "time": t.TIME_US,
    "time without time zone": t.TIME_US,
    "timetz": t.TIMETZ,
    "time with time zone": t.TIMETZ,
    "timestamptz": t.TIMESTAMPTZ,
    "timestamp with time zone": t.TIMESTAMPTZ,
    "timestamp with local time zone": t.TIMESTAMPTZ,
    "uuid": t.UUID,
    "json": t.JSON,
    "jsonb": t.JSON,
    "xml": t.XML,
    "xmltype": t.XML,
}
_TYPE = re.compile(r"^\s*([a-z_][a-z0-9_ ]*?)\s*(?:\(([^)]*)\)\s*([a-z ]*?))?\s*(\[\])?\s*$")


def parse_type(name: str, family: str = "postgresql") -> t.ColumnType:
    """A source type name -> its column type; unknown names fall back to string (flagged)."""
    m = _TYPE.match(name.lower())
    if not m:
        return t.fallback(name)
    base, args, suffix, array = m.group(1), m.group(2), m.group(3), m.group(4)
    if suffix:
        base = f"{base} {suffix}"  # "timestamp(6) with time zone"
    params = [p.strip() for p in args.split(",")] if args else []
    column = _scalar(base, params, family, name)
    return t.array_type(column) if array else column


def _scalar(base: str, params: list[str], family: str, original: str) -> t.ColumnType:
    if base == "enum":
        return t.enum_type(tuple(params))
    if base in ("numeric", "decimal", "number", "dec"):
        if not params or params == ["*"]:
            return t.VARIABLE_DECIMAL
        precision = None if params[0] == "*" else int(params[0])
        scale = int(params[1]) if len(params) > 1 else 0
        if base == "number" and scale == 0 and precision is not None and precision < 19:
            # Debezium's Oracle connector narrows integral NUMBERs to the smallest integer type.
            return t.INT8 if precision < 3 else t.INT16 if precision < 5 else t.INT32 if precision < 10 else t.INT64
        return t.decimal_type(precision, scale)
    if base in ("timestamp", "timestamp without time zone"):
        return t.timestamp_type(int(params[0]) if params else None)
    if base == "date" and family == "oracle":
        return t.TIMESTAMP_MS  # an Oracle DATE carries a time of day to the second
    if base in _SIMPLE:
        return _SIMPLE[base]
    return t.fallback(original)


def load(doc: Any, family: str = "postgresql") -> dict[str, TableColumns]:
    """The parsed catalogue document ({"tables": {name: {key, columns}}}) -> per-table columns."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), dict):
        raise CatalogueError("a column catalogue is a mapping with a 'tables' mapping")
    family = str(doc.get("connector", family))
    out = {}
    for table, spec in doc["tables"].items():
        if not isinstance(spec, dict) or not isinstance(spec.get("columns"), list):
            raise CatalogueError(f"{table}: needs a 'columns' list")
        columns = []
        for i, col in enumerate(spec["columns"]):
            if not isinstance(col, dict) or "name" not in col or "type" not in col:
                raise CatalogueError(f"{table}: column #{i + 1} needs 'name' and 'type'")
            columns.append(
                Column(str(col["name"]), parse_type(str(col["type"]), family), bool(col.get("nullable", True)))
            )
        names = {c.name for c in columns}
        key = tuple(str(k) for k in spec.get("key", []))
        missing = [k for k in key if k not in names]
        if missing:
            raise CatalogueError(f"{table}: key columns {missing} are not among its columns")
        out[str(table)] = TableColumns(str(table), tuple(columns), key)
    return out
