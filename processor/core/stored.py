"""The value of a buffered event in the store: the raw RawEvent bytes, exactly as consumed.

Nothing is added at buffering time, so the hot path writes the consumed bytes as they are; the
compiled codec reads what emission needs (op, seq, table, the key and where key/before/after/ddl
start) back from them at commit. unpack() gives those fields as one header tuple for the rarer
paths (fragments, undo, assembly with fragments).
"""

from __future__ import annotations

from typing import Any

from processor.core import codec


def unpack(value: bytes) -> tuple[tuple[Any, ...], bytes]:
    """(header, raw): header = (op, seq, scn, ts_ms, table, row_id, attrs, kafka_key, body_at)."""
    e = codec.decode_raw_view(value)
    kafka_key = codec.change_key(e.table, e.key)
    return (e.op, e.seq, e.scn, e.ts_ms, e.table, e.row_id, e.attrs, kafka_key, e.body_at), value


def raw_of(value: bytes) -> bytes:
    return value


def op_of(value: bytes) -> str:
    return codec.decode_raw_view(value).op
