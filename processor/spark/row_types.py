"""Typed columns for the current-state tables, from the Avro union branches seen in the records.

Until typed schemas reach the changes topic, a column's type is the branch its values use:
boolean, long, double, string or bytes. Long and double mixed in one column make a double (an
integer-valued float is still a number). Any other mix, or a value that no longer fits the type the
table already has, is a clear error naming the table and column: guessing would corrupt the table.
A column seen only as null has no type yet; it is added when its first value arrives.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import functions as F

from processor.spark.decode import MEMBERS

SQL_TYPES = {"boolean": "BOOLEAN", "long": "BIGINT", "double": "DOUBLE", "string": "STRING", "bytes": "BINARY"}
_FROM_SPARK = {"boolean": "boolean", "bigint": "long", "double": "double", "string": "string", "binary": "bytes"}

# Position and provenance of the change a current-state row holds (the newest applied to its key).
COMMIT_SCN, SEQ, EVENT_ID, COMMIT_TS_MS = "_txb_commit_scn", "_txb_seq", "_txb_event_id", "_txb_commit_ts_ms"
META_COLUMNS = {COMMIT_SCN: "BIGINT", SEQ: "BIGINT", EVENT_ID: "STRING", COMMIT_TS_MS: "BIGINT"}
OP = "_txb_op"  # in the MERGE source only


class SchemaConflict(ValueError):
    """A column's values changed type in a way the table cannot take."""


def branch_of_spark_type(simple_string: str) -> str:
    try:
        return _FROM_SPARK[simple_string]
    except KeyError:
        raise SchemaConflict(f"column type {simple_string} is not one txbuffer writes") from None


def column_branch(table: str, column: str, branches: set[str]) -> str:
    if len(branches) == 1:
        return next(iter(branches))
    if branches == {"long", "double"}:
        return "double"
    raise SchemaConflict(f"{table}.{column} holds values of several types {sorted(branches)}: cannot type the column")


def resolve(table: str, column: str, existing: str | None, incoming: str) -> str:
    """The branch the table keeps for `column`, given what it has and what the batch brings."""
    if existing is None or existing == incoming:
        return incoming
    if existing == "double" and incoming == "long":
        return "double"
    raise SchemaConflict(
        f"{table}.{column} is {SQL_TYPES[existing]} in the Delta table but the new changes carry {incoming}; "
        "alter the table (or rebuild it) before resuming"
    )


def value_expr(row_map: Any, column: str, branch: str) -> Any:
    """The typed value of `column` in a union map column, cast as the table's branch."""
    member = row_map.getItem(column)
    if branch == "double":
        return F.coalesce(member.getField("member_double"), member.getField("member_long").cast("double"))
    return member.getField(MEMBERS[branch][0])


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def key_json_expr(pk: list[str]) -> Any:
    """Canonical key identity of a row (sorted column names), for the tombstone table."""
    return F.to_json(F.struct(*[F.col(quoted(c)) for c in sorted(pk)]))


def table_properties(table: str, pk: list[str]) -> dict[str, str]:
    return {"txbuffer.table": table, "txbuffer.primaryKey": json.dumps(pk)}
