"""Per-table schemas with versions: the typed Key and Value records of each table.

A table's columns come, in this order of preference, from the source's column types (pgoutput
Relation, or a PostgreSQL DDL event), from the user's column catalogue, or from the first row's
values. The schema gets a new version when a DDL event arrives or when a row brings a column the
schema does not have (added as optional, so the change is BACKWARD compatible). A value that does
not fit its column raises RowMismatch with the column and the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from processor.core.debezium import pg_types
from processor.core.debezium import types as t
from processor.core.debezium.catalogue import Column, TableColumns, parse_type


class RowMismatch(ValueError):
    """A row that does not fit its table's schema; the message says which column and why."""


@dataclass(frozen=True)
class TableSchema:
    table: str  # "schema.table" as the source names it
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    version: int = 1
    fallbacks: tuple[str, ...] = ()  # columns whose source type was unknown (kept as string)
    _by_name: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({c.name: c for c in self.columns})

    @property
    def schema_name(self) -> str:
        return self.table.rpartition(".")[0]

    @property
    def table_name(self) -> str:
        return self.table.rpartition(".")[2]

    def column(self, name: str) -> Column | None:
        return self._by_name.get(name)

    def key_connect(self, record_name: str) -> dict[str, Any] | None:
        """The Connect schema of the Key record, or None for a table without a key (null keys)."""
        if not self.key:
            return None
        fields = [_field(self._by_name[k], optional=False) for k in self.key]
        return {"type": "struct", "fields": fields, "optional": False, "name": record_name}

    def value_connect(self, record_name: str) -> dict[str, Any]:
        fields = [_field(c, optional=c.optional and c.name not in self.key) for c in self.columns]
        return {"type": "struct", "fields": fields, "optional": True, "name": record_name}

    def row(self, image: dict[str, Any] | None, partial: bool = False) -> dict[str, Any] | None:
        """A RawEvent row image -> the typed Value payload (Connect values), in column order.

        partial: a before image under REPLICA IDENTITY DEFAULT carries the key columns only; the
        others are absent, not null, and take their type's zero value when they are required.
        """
        if image is None:
            return None
        out = {}
        for col in self.columns:
            required = not col.optional or col.name in self.key
            if col.name not in image:
                if required and not partial:
                    raise RowMismatch(f"column {col.name!r} is missing and not nullable")
                out[col.name] = _zero(col) if required else None
                continue
            raw = image[col.name]
            if raw is None and required:
                raise RowMismatch(f"column {col.name!r} is null but not nullable")
            try:
                out[col.name] = col.type.value(raw)
            except t.TypeMismatch as exc:
                raise RowMismatch(f"column {col.name!r} ({col.type.name}): {exc}") from None
        return out

    def key_payload(self, key: dict[str, Any] | None) -> dict[str, Any] | None:
        if not self.key:
            return None
        key = key or {}
        out = {}
        for name in self.key:
            if key.get(name) is None:
                raise RowMismatch(f"key column {name!r} is missing or null")
            try:
                out[name] = self._by_name[name].type.value(key[name])
            except t.TypeMismatch as exc:
                raise RowMismatch(f"key column {name!r}: {exc}") from None
        return out


def _field(col: Column, optional: bool) -> dict[str, Any]:
    return {**col.type.connect, "optional": optional, "field": col.name}


_ZERO = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "float": 0.0, "double": 0.0, "boolean": False, "string": ""}


def _zero(col: Column) -> Any:
    kind = col.type.connect["type"]
    if kind == "bytes":
        return b""
    if kind == "array":
        return []
    return _ZERO.get(kind)


class SchemaBook:
    """The current schema of every table seen, built lazily and versioned on change."""

    def __init__(self, catalogue: dict[str, TableColumns] | None = None):
        self.catalogue = catalogue or {}
        self.tables: dict[str, TableSchema] = {}
        self._next_version: dict[str, int] = {}  # tables whose columns a DDL made us forget
        self._pg_columns: dict[str, str] = {}  # table -> the attrs["pg_columns"] text its schema came from

    def for_change(
        self,
        table: str,
        key: dict[str, Any] | None,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        attrs: dict[str, Any],
    ) -> TableSchema:
        """The schema of one change: typed by the source when it says (PostgreSQL's attrs["pg_columns"],
        parsed once per distinct text), else from the catalogue and the row's values."""
        text = attrs.get(PG_COLUMNS)
        if text and text != self._pg_columns.get(table):
            parsed = pg_columns(text)
            if parsed is not None:
                self._pg_columns[table] = text
                self.set_columns(table, *parsed)
        return self.for_row(table, key, before, after)

    def for_row(
        self, table: str, key: dict[str, Any] | None, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> TableSchema:
        """The table's schema, created or widened so that this row's columns all have a type."""
        current = self.tables.get(table)
        if current is None:
            current = self._initial(table, key, before, after)
            self.tables[table] = current
            return current
        new = [n for image in (after, before) for n in (image or {}) if current.column(n) is None]
        if not new:
            return current
        added = tuple(Column(n, t.infer(_first_value(n, after, before))) for n in dict.fromkeys(new))
        widened = replace(current, columns=current.columns + added, version=current.version + 1, _by_name={})
        self.tables[table] = widened
        return widened

    def _initial(
        self, table: str, key: dict[str, Any] | None, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> TableSchema:
        known = self.catalogue.get(table)
        if known is not None:
            fallbacks = tuple(c.name for c in known.columns if c.type.fallback)
            return TableSchema(table, known.columns, known.key, self._initial_version(table), fallbacks)
        names = dict.fromkeys([*(after or {}), *(before or {}), *(key or {})])
        key_names = tuple(key or {})
        columns = tuple(Column(n, t.infer(_first_value(n, after, before, key)), n not in key_names) for n in names)
        return TableSchema(table, columns, key_names, self._initial_version(table))

    def set_columns(self, table: str, columns: tuple[Column, ...], key: tuple[str, ...]) -> TableSchema:
        """Typed columns from the source (a Relation message or a DDL event): a new version if they differ."""
        current = self.tables.get(table)
        fallbacks = tuple(c.name for c in columns if c.type.fallback)
        if current is not None and current.columns == columns and current.key == key:
            return current
        version = current.version + 1 if current is not None else self._initial_version(table)
        schema = TableSchema(table, columns, key, version, fallbacks)
        self.tables[table] = schema
        return schema

    def apply_ddl(self, table: str, ddl: str | None) -> TableSchema | None:
        """A DDL event: PostgreSQL's (JSON with type OIDs) retypes the table; any other forgets the
        columns, so the next row rebuilds them from the catalogue and its values, one version up."""
        columns = pg_ddl_columns(ddl)
        if columns is not None:
            cols, key = columns
            return self.set_columns(table, cols, key)
        current = self.tables.pop(table, None)
        if current is not None:
            self._next_version[table] = current.version + 1
        return None

    def _initial_version(self, table: str) -> int:
        return self._next_version.pop(table, 1)


PG_COLUMNS = (
    "pg_columns"  # the attr PostgreSQL capture puts on every row event: [[name, oid, typmod, type, key, optional]]
)


def pg_columns(text: str) -> tuple[tuple[Column, ...], tuple[str, ...]] | None:
    """Typed columns from a row event's attrs["pg_columns"] (see processor/sources/pg_columns.py)."""
    try:
        specs = json.loads(text)
        cols = tuple(
            Column(str(name), _pg_type(int(oid), int(typmod), type_name), bool(optional) and not key)
            for name, oid, typmod, type_name, key, optional in specs
        )
        key = tuple(str(spec[0]) for spec in specs if spec[4])
    except (ValueError, TypeError, IndexError):
        return None
    return cols, key


def _pg_type(oid: int, typmod: int, type_name: str | None) -> t.ColumnType:
    column = pg_types.from_oid(oid, typmod, type_name)
    if column.fallback and type_name:
        # A type the OID table does not know (a domain, an extension type): try its SQL name.
        named = parse_type(type_name)
        if not named.fallback:
            return named
    return column


def pg_ddl_columns(ddl: str | None) -> tuple[tuple[Column, ...], tuple[str, ...]] | None:
    """The typed columns of a PostgreSQL capture DDL event (a Relation's JSON), else None."""
    if not ddl or not ddl.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(ddl)
        specs = doc["columns"]
        cols = tuple(
            Column(c["name"], pg_types.from_oid(int(c["type_oid"]), int(c.get("typmod", -1))), not c.get("key"))
            for c in specs
        )
        key = tuple(c["name"] for c in specs if c.get("key"))
    except (ValueError, KeyError, TypeError):
        return None
    return cols, key


def _first_value(name: str, *images: dict[str, Any] | None) -> Any:
    for image in images:
        if image and image.get(name) is not None:
            return image[name]
    return None


_INVALID = re.compile(r"[^A-Za-z0-9_]")


def avro_name(part: str) -> str:
    """Debezium's schema name adjustment: invalid characters become underscores."""
    fixed = _INVALID.sub("_", part)
    return fixed if fixed and not fixed[0].isdigit() else "_" + fixed
