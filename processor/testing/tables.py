"""The synthetic database the workload generator plays: its tables, and random rows, column values
and LOB fragments for them. Each fragment comes with the column's value after it, computed here, so
the generator knows every expected row by construction."""

from __future__ import annotations

import random
from dataclasses import dataclass

from processor.core.events import LOB_ERASE, LOB_TRIM, LOB_WRITE, LONG_STRING_WRITE, XML_WRITE

REGIONS = ("eu", "us", "apac")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


@dataclass(frozen=True)
class TableSpec:
    name: str
    key_columns: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # non-key (name, kind); kind: str long double bool clob blob
    row_ids: bool = False  # Oracle style: every change carries a row_id (undo rows need it)

    @property
    def lob_column(self) -> str | None:
        return next((name for name, kind in self.columns if kind in ("clob", "blob")), None)


TABLES = {
    spec.name: spec
    for spec in (
        TableSpec("app.accounts", ("id",), (("owner", "str"), ("balance", "double"), ("active", "bool")), row_ids=True),
        TableSpec("app.orders", ("region", "id"), (("status", "str"), ("qty", "long"), ("note", "str"))),
        TableSpec("app.documents", ("id",), (("title", "str"), ("body", "clob")), row_ids=True),
        TableSpec("app.images", ("id",), (("name", "str"), ("data", "blob"))),
    )
}
BULK_TABLE = TableSpec("app.bulk", ("id",), (("payload", "str"), ("n", "long")))


def long_tailed_size(rng: random.Random) -> int:
    u = rng.random()
    if u < 0.80:
        return 1 + int(rng.random() * 15)
    if u < 0.97:
        return 16 + int(rng.random() * 185)
    if u < 0.997:
        return 200 + int(rng.random() * 800)
    return 1000 + int(rng.random() * 2000)


def row_key(spec: TableSpec, pk: int) -> dict:
    if len(spec.key_columns) == 2:
        return {"region": REGIONS[pk % len(REGIONS)], "id": pk}
    return {"id": pk}


def column_value(rng: random.Random, kind: str) -> object:
    if kind == "str":
        return WORDS[int(rng.random() * len(WORDS))] + str(int(rng.random() * 1000))
    if kind == "long":
        return int(rng.random() * 10_000)
    if kind == "double":
        return round(rng.random() * 10_000, 2)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "clob":
        return None if rng.random() < 0.3 else WORDS[int(rng.random() * len(WORDS))]
    return None if rng.random() < 0.3 else bytes([int(rng.random() * 256) for _ in range(4)])


def new_row(rng: random.Random, spec: TableSpec, pk: int) -> dict:
    row = row_key(spec, pk)
    for name, kind in spec.columns:
        row[name] = column_value(rng, kind)
    return row


def updated_row(rng: random.Random, spec: TableSpec, current: dict) -> dict:
    row = dict(current)
    name, kind = spec.columns[int(rng.random() * len(spec.columns))]
    row[name] = column_value(rng, kind)
    return row


def lob_fragment(rng: random.Random, spec: TableSpec, value: object) -> tuple[dict, object]:
    """A random fragment for a LOB column and the column's value after it (computed here, by construction)."""
    binary = dict(spec.columns)[spec.lob_column] == "blob"
    v = (b"" if binary else "") if value is None else value
    fill = b"\x00" if binary else " "
    data = (
        bytes([int(rng.random() * 256) for _ in range(1 + int(rng.random() * 6))])
        if binary
        else WORDS[int(rng.random() * len(WORDS))] * (1 + int(rng.random() * 3))
    )
    u = 0.0 if value is None else rng.random()  # a null value starts with a write, so a BLOB stays bytes
    if u < 0.35:  # append
        op = LOB_WRITE if binary else (LOB_WRITE, XML_WRITE, LONG_STRING_WRITE)[int(rng.random() * 3)]
        return {"op": op, "lob_data": data}, v + data
    if u < 0.6:  # overwrite in place (may run past the end)
        off = int(rng.random() * (len(v) + 1))
        return {"op": LOB_WRITE, "lob_offset": off, "lob_data": data}, v[:off] + data + v[off + len(data) :]
    if u < 0.75:  # write past the end: the gap is padded
        gap = 1 + int(rng.random() * 4)
        return {"op": LOB_WRITE, "lob_offset": len(v) + gap, "lob_data": data}, v + fill * gap + data
    if u < 0.9:  # erase a range that may run past the end
        off, n = int(rng.random() * (len(v) + 1)), 1 + int(rng.random() * 5)
        kept = max(0, min(n, len(v) - off))
        return {"op": LOB_ERASE, "lob_offset": off, "lob_length": n}, v[:off] + fill * kept + v[off + kept :]
    n = int(rng.random() * (len(v) + 3))
    return {"op": LOB_TRIM, "lob_length": n}, v[:n]
