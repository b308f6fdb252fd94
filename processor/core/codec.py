"""Avro for the project's own schemas on the hot path: the compiled codec, or fastavro.

processor/core/_avro_fast.pyx (Cython) compiles raw_event, change_event, transaction_event and
txn_outcome from their .avsc files. It decodes exactly what fastavro decodes, to equal values,
and encodes to fastavro's bytes (tests/unit/test_codec_properties.py checks both). When it is
not built, or TXBUFFER_CODEC=fastavro, every function here runs on fastavro through
processor.core.events with the same results. TXBUFFER_CODEC=compiled makes a missing build an
error. Schemas the project does not own never come here.

API (identical on both backends):
  decode_raw_batch(values) -> list[RawView | DecodeError]   one call per poll batch
  decode_raw_view(data) -> RawView                          raises DecodeError
  decode_raw / decode_change / decode_transaction / decode_outcome(data) -> dict
  encode_raw / encode_change / encode_transaction / encode_outcome(record) -> bytes
  ChangeWriter(xid, commit_scn, commit_ts_ms, thread, user).encode(
      op, seq, scn, ts_ms, table, row_id, attrs, raw, body_at, total_order, collection_order) -> bytes
  change_key(table, key) -> bytes                           events.change_key's bytes
  change_stream(writer, produced, tables) -> ChangeStream   one committed transaction's ChangeEvents
  emission(engine, txn) -> Emission                      a released transaction: its ChangeStream (from
                                                         its emit cursor) and acknowledgement state
  settle_all(emissions)                                  emission.settle() for each, in order
  buffer_changes(engine, records, i, open_txns, put, actions) -> int  the engine's fast lane (compiled only)
  partition_runs(records) -> ({partition: records}, errors)  a poll batch split by partition
  staged_range(staged, begin, end) -> [(key, value)]     a staged transaction's writes in key order
  transaction_bytes(status, xid, scn, ts_ms, thread, event_count, tables, partition, offset, ordering)
                                                         encode_transaction(events.transaction_record(...))

A RawView is one RawEvent validated to its last byte: every field as an attribute or
view["name"], `raw` (the record's bytes), `body_at` (where key/before/after/ddl start, the part
a ChangeEvent copies) and to_dict(). lob_data, key, before, after and ddl are decoded on first
access on the compiled backend.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Protocol

import structlog

from . import events as _ev
from .codec_py import PyChangeStream, PyEmission, no_lane
from .codec_py import partition_runs as py_partition_runs
from .codec_py import settle_all as py_settle_all
from .codec_py import staged_range as py_staged_range
from .events import DecodeError
from .txn import Commit, Txn

__all__ = [
    "BACKEND",
    "BACKEND_REASON",
    "ChangeEncoder",
    "ChangeWriter",
    "DecodeError",
    "RawView",
    "announce",
    "buffer_changes",
    "change_key",
    "change_stream",
    "decode_change",
    "decode_outcome",
    "decode_raw",
    "decode_raw_batch",
    "decode_raw_view",
    "decode_transaction",
    "emission",
    "encode_change",
    "encode_outcome",
    "encode_raw",
    "encode_transaction",
    "partition_runs",
    "settle_all",
    "staged_range",
    "transaction_bytes",
]

log = structlog.get_logger(__name__)

RAW_FIELDS = (
    "xid", "op", "seq", "scn", "thread", "ts_ms", "undo", "row_id", "subxid", "savepoint", "user", "client",
    "table", "lob_column", "lob_offset", "lob_length", "lob_data", "attrs", "key", "before", "after", "ddl",
)  # fmt: skip


class RawView(Protocol):
    """One RawEvent, validated to its last byte (both backends' views have this shape)."""

    raw: bytes
    body_at: int
    xid: str
    op: str
    seq: int
    scn: int
    thread: int
    ts_ms: int
    undo: bool
    row_id: str | None
    subxid: str | None
    savepoint: str | None
    user: str | None
    client: str | None
    table: str | None
    lob_column: str | None
    lob_offset: int | None
    lob_length: int | None
    lob_data: str | bytes | None
    attrs: dict[str, str]
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    ddl: str | None

    def __getitem__(self, name: str) -> Any: ...
    def get(self, name: str, default: Any = None) -> Any: ...
    def to_dict(self) -> dict[str, Any]: ...


# A RawEvent as the engine reads it: a decoded view, or a plain dict (tests, tools, the reference).
RawFields = RawView | dict[str, Any]


class ChangeEncoder(Protocol):
    """What ChangeWriter(xid, commit_scn, commit_ts_ms, thread, user) returns."""

    def encode(
        self,
        op: str,
        seq: int,
        scn: int,
        ts_ms: int,
        table: str | None,
        row_id: str | None,
        attrs: dict[str, str],
        raw: bytes,
        body_at: int,
        total_order: int,
        collection_order: int,
    ) -> bytes: ...


# ----------------------------------------------------------------------------- fastavro backend


class PyRawView:
    """RawView on fastavro: the same attributes, from a full decode."""

    __slots__ = ("_record", "body_at", "raw", *RAW_FIELDS)
    raw: bytes
    body_at: int
    xid: str
    op: str
    seq: int
    scn: int
    thread: int
    ts_ms: int
    undo: bool
    row_id: str | None
    subxid: str | None
    savepoint: str | None
    user: str | None
    client: str | None
    table: str | None
    lob_column: str | None
    lob_offset: int | None
    lob_length: int | None
    lob_data: str | bytes | None
    attrs: dict[str, str]
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    ddl: str | None

    def __init__(self, raw: bytes, record: dict[str, Any], body_at: int):
        self.raw = raw
        self.body_at = body_at
        self._record = record
        for name in RAW_FIELDS:
            setattr(self, name, record[name])

    def __getitem__(self, name: str) -> Any:
        return self._record[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._record.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._record

    def keys(self) -> tuple[str, ...]:
        return tuple(self._record)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._record)

    def __repr__(self) -> str:
        return f"RawView({self._record!r}, body_at={self.body_at})"


def _py_view(data: bytes) -> PyRawView:
    record, body_at = _ev.decode_raw_with_body_offset(data)
    return PyRawView(data if type(data) is bytes else bytes(data), record, body_at)


def _py_view_or_error(data: bytes | None) -> PyRawView | DecodeError:
    try:
        return _py_view(data or b"")
    except DecodeError as exc:
        return exc


def _py_view_batch(values: Iterable[bytes | None]) -> list[PyRawView | DecodeError]:
    return [_py_view_or_error(v) for v in values]


class PyChangeWriter:
    """ChangeWriter on fastavro (events.encode_change_spliced)."""

    __slots__ = ("commit_scn", "commit_ts_ms", "thread", "user", "xid")

    def __init__(self, xid: str, commit_scn: int, commit_ts_ms: int, thread: int, user: str | None):
        self.xid = xid
        self.commit_scn = commit_scn
        self.commit_ts_ms = commit_ts_ms
        self.thread = thread
        self.user = user

    def encode(
        self,
        op: str,
        seq: int,
        scn: int,
        ts_ms: int,
        table: str | None,
        row_id: str | None,
        attrs: dict[str, str],
        raw: bytes,
        body_at: int,
        total_order: int,
        collection_order: int,
    ) -> bytes:
        head = {
            "event_id": f"{self.thread}:{self.commit_scn}:{self.xid}:{seq}",
            "op": _ev.ENVELOPE_OP[op],
            "ts_ms": ts_ms,
        }
        source = {
            "table": table,
            "xid": self.xid,
            "seq": seq,
            "scn": scn,
            "commit_scn": self.commit_scn,
            "commit_ts_ms": self.commit_ts_ms,
            "thread": self.thread,
            "user": self.user,
            "row_id": row_id,
            "attrs": attrs,
        }
        block = {"id": self.xid, "total_order": total_order, "data_collection_order": collection_order}
        return _ev.encode_change_spliced(head, memoryview(raw)[body_at:], {"source": source, "transaction": block})


# ----------------------------------------------------------------------------- backend choice

SCHEMA_NAMES = ("raw_event", "change_event", "transaction_event", "txn_outcome")


def _schema_json(name: str) -> Any:
    with open(_ev.SCHEMA_DIR / f"{name}.avsc", encoding="utf-8") as f:
        return json.load(f)


def _fastavro_writer(name: str) -> Callable[[Any], bytes]:
    schema = _ev.load_schema(name)
    return lambda record: _ev.encode(schema, record)


def _compiled() -> dict[str, Any]:
    """The compiled codecs by schema name, and the module under "module". Raises ImportError when
    the extension is not built, NotImplementedError or ValueError when a schema uses something it
    does not compile."""
    fast = importlib.import_module(f"{__package__}._avro_fast")
    codecs: dict[str, Any] = {"module": fast}
    for name in SCHEMA_NAMES:
        cls = fast.RawCodec if name == "raw_event" else fast.Codec
        codecs[name] = cls(name, _schema_json(name), _fastavro_writer(name), DecodeError)
    fast.enable_change_writer(
        codecs["raw_event"], codecs["change_event"], dict(_ev.ENVELOPE_OP), _ev.encode_change_spliced
    )
    fast.enable_change_key(_ev.change_key)
    fast.enable_lane(_ev.ROW_OPS, _ev.BEGIN, _ev.COMMIT, _ev.ROLLBACK)
    fast.enable_txn_slots(Txn)
    fast.enable_commit_slots(Commit)
    encode = codecs["transaction_event"].encode
    fast.enable_transaction_writer(lambda *fields: encode(_ev.transaction_record(*fields)))
    return codecs


def builds_required() -> bool:
    """TXBUFFER_CODEC=compiled (set by `make test`): a missing build of any compiled extension (this
    codec, the SQL_REDO scanner, the Kafka clients on librdkafka's C API) is an error, not a fallback."""
    return os.environ.get("TXBUFFER_CODEC", "").strip().lower() == "compiled"


def _choose() -> tuple[str, str, dict[str, Any] | None]:
    mode = os.environ.get("TXBUFFER_CODEC", "auto").strip().lower() or "auto"
    if mode not in ("auto", "compiled", "fastavro"):
        raise ValueError(f"TXBUFFER_CODEC must be auto, compiled or fastavro, not {mode!r}")
    if mode == "fastavro":
        return "fastavro", "TXBUFFER_CODEC=fastavro", None
    try:
        return "compiled", "built", _compiled()
    except (ImportError, NotImplementedError, ValueError) as exc:
        if mode == "compiled":
            raise ImportError(f"TXBUFFER_CODEC=compiled but the compiled codec is unusable: {exc}") from exc
        return "fastavro", f"compiled codec unavailable: {type(exc).__name__}: {exc}", None


BACKEND, BACKEND_REASON, _codecs = _choose()

ChangeWriter: Callable[[str, int, int, int, str | None], ChangeEncoder]
change_key: Callable[[str | None, dict[str, Any] | None], bytes]
change_stream: Callable[[Any, int, dict[str, int]], Any]
emission: Callable[[Any, Txn], Any]
settle_all: Callable[[list[Any]], None]
buffer_changes: Callable[[Any, Sequence[Any], int, dict[str, Any], Callable[[bytes, bytes], None], list[Any]], int]
partition_runs: Callable[[list[Any]], tuple[dict[int, list[Any]], list[Any]]]
staged_range: Callable[[dict[bytes, Any], bytes, bytes], list[tuple[bytes, Any]]]
transaction_bytes: Callable[..., bytes]
decode_raw_view: Callable[[bytes], RawView]
_view_batch: Callable[[Iterable[bytes | None]], list[Any]]
decode_raw: Callable[[bytes], dict[str, Any]]
decode_change: Callable[[bytes], dict[str, Any]]
decode_transaction: Callable[[bytes], dict[str, Any]]
decode_outcome: Callable[[bytes], dict[str, Any]]
encode_raw: Callable[[dict[str, Any]], bytes]
encode_change: Callable[[dict[str, Any]], bytes]
encode_transaction: Callable[[dict[str, Any]], bytes]
encode_outcome: Callable[[dict[str, Any]], bytes]

if _codecs is not None:
    RAW_VIEW_TYPE: type = _codecs["module"].RawView
    ChangeWriter = _codecs["module"].ChangeWriter
    change_key = _codecs["module"].change_key
    change_stream = _codecs["module"].ChangeStream
    emission = _codecs["module"].Emission
    settle_all = _codecs["module"].settle_all
    buffer_changes = _codecs["module"].buffer_changes
    partition_runs = _codecs["module"].partition_runs
    staged_range = _codecs["module"].staged_range
    transaction_bytes = _codecs["module"].transaction_bytes
    decode_raw_view = _codecs["raw_event"].view
    _view_batch = _codecs["raw_event"].view_batch
    decode_raw, encode_raw = _codecs["raw_event"].decode, _codecs["raw_event"].encode
    decode_change, encode_change = _codecs["change_event"].decode, _codecs["change_event"].encode
    decode_transaction = _codecs["transaction_event"].decode
    encode_transaction = _codecs["transaction_event"].encode
    decode_outcome, encode_outcome = _codecs["txn_outcome"].decode, _codecs["txn_outcome"].encode
else:
    RAW_VIEW_TYPE = PyRawView
    ChangeWriter = PyChangeWriter
    change_key = _ev.change_key
    change_stream = partial(PyChangeStream, view=_py_view)

    def emission(engine: Any, txn: Txn) -> Any:
        from .assemble import change_writer  # assemble imports this module

        return PyEmission(engine, txn, change_stream(change_writer(txn), txn.acked_count, dict(txn.acked_tables)))

    settle_all = py_settle_all
    buffer_changes = no_lane
    partition_runs = py_partition_runs
    staged_range = py_staged_range

    def transaction_bytes(*fields: Any) -> bytes:
        return _ev.encode_transaction(_ev.transaction_record(*fields))

    decode_raw_view = _py_view
    _view_batch = _py_view_batch
    decode_raw, encode_raw = _ev.decode_raw, _ev.encode_raw
    decode_change, encode_change = _ev.decode_change, _ev.encode_change
    decode_transaction, encode_transaction = _ev.decode_transaction, _ev.encode_transaction
    decode_outcome, encode_outcome = _ev.decode_outcome, _ev.encode_outcome


def compiled_module() -> Any | None:
    """The compiled extension (processor.core._avro_fast) when it runs, else None."""
    return None if _codecs is None else _codecs["module"]


_announced = False


def announce() -> None:
    """Log which backend runs (once per process; decode_raw_batch calls it on first use)."""
    global _announced
    _announced = True
    if BACKEND == "compiled":
        log.info("codec.backend", backend=BACKEND)
    else:
        log.warning("codec.backend", backend=BACKEND, reason=BACKEND_REASON)


def decode_raw_batch(values: Iterable[bytes | None]) -> list[RawView | DecodeError]:
    """One RawView or DecodeError per value (bytes, or None for an empty record), in order.

    Each record is validated to its last byte against raw_event: a value becomes a RawView
    exactly when events.decode_raw accepts it.
    """
    if not _announced:
        announce()
    return _view_batch(values)
