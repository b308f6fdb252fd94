"""Column types of a PostgreSQL table, carried on every row event for typed (Debezium-style) outputs.

RawEvent values are a generic union (null, boolean, long, double, string, bytes); the source type of
each column travels beside them in `attrs["pg_columns"]`: a compact JSON array, one entry per column
in table order:

    [name, type_oid, typmod, type_name, key, optional]

- `type_oid`, `typmod`: as in the pgoutput Relation message (`typmod` -1 when none);
- `type_name`: `format_type(oid, typmod)` from the catalog (e.g. "numeric(12,2)", "character
  varying(20)", "public.mood" for a user enum), or null when the catalog was not asked;
- `key`: 1 for a primary-key (replica identity) column, else 0;
- `optional`: 0 for NOT NULL columns, else 1.

The snapshot and the stream produce the same string for the same table, so a consumer may cache it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

ATTR = "pg_columns"


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type_oid: int
    typmod: int
    type_name: str | None
    key: bool
    optional: bool = True


def encode(columns: list[ColumnInfo]) -> str:
    return json.dumps(
        [[c.name, c.type_oid, c.typmod, c.type_name, int(c.key), int(c.optional)] for c in columns],
        separators=(",", ":"),
    )


def decode(text: str) -> list[ColumnInfo]:
    """attrs["pg_columns"] -> ColumnInfo per column (for consumers and tests)."""
    return [ColumnInfo(n, oid, mod, name, bool(key), bool(opt)) for n, oid, mod, name, key, opt in json.loads(text)]


CATALOG_QUERY = (
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull "
    "FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
