"""The value of a buffered event in the store: a small pre-digested header, then the raw bytes.

The header holds what emission needs (op, seq, scn, ts_ms, table, row_id, attrs, the output Kafka
key and where key/before/after/ddl start in the raw bytes), computed once when the event is
buffered, so a commit splices ChangeEvents without decoding Avro again. marshal is the fastest
codec for a tuple of primitives; its format is tied to the interpreter, so the store records
marshal.version and a store written by another one is rebuilt, never misread.
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

from processor.core.codec import RawFields

MARSHAL_VERSION = marshal.version
_LEN = struct.Struct(">H")


def pack(e: RawFields, raw: bytes, body_at: int, kafka_key: bytes | None) -> bytes:
    header = marshal.dumps(
        (e["op"], e["seq"], e["scn"], e["ts_ms"], e["table"], e["row_id"], e["attrs"], kafka_key, body_at)
    )
    return _LEN.pack(len(header)) + header + raw


def unpack(value: bytes) -> tuple[tuple[Any, ...], bytes]:
    """(header, raw): header = (op, seq, scn, ts_ms, table, row_id, attrs, kafka_key, body_at)."""
    (n,) = _LEN.unpack_from(value)
    return marshal.loads(value[2 : 2 + n]), value[2 + n :]


def raw_of(value: bytes) -> bytes:
    (n,) = _LEN.unpack_from(value)
    return value[2 + n :]


def op_of(value: bytes) -> str:
    op: str = unpack(value)[0][0]
    return op
