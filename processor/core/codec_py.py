"""The fastavro backend's versions of the compiled emission helpers (processor/core/_emit.pxi).

processor.core.codec picks these when the extension is not built. They behave exactly as the
compiled ones: ChangeStream numbers and encodes a committed transaction's buffered changes,
AckTracker keeps the emit cursor from the acknowledgements, and the engine's fast lane is empty
(every record takes the Python path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import events as _ev


class PyChangeStream:
    def __init__(self, writer: Any, produced: int, tables: dict[str, int], view: Callable[[bytes], Any]):
        self.writer, self.produced, self.tables, self._view = writer, produced, tables, view

    def number(self, table: str | None) -> tuple[int, int]:
        t = table or ""
        count = self.tables.get(t, 0) + 1
        self.tables[t] = count
        self.produced += 1
        return self.produced, count

    def next(self, raw: bytes) -> tuple[bytes, bytes, int, str, str] | None:
        e = self._view(raw)
        if e.op not in _ev.ENVELOPE_OP:
            return None
        kafka_key = _ev.change_key(e.table, e.key)
        total_order, collection_order = self.number(e.table)
        value = self.writer.encode(
            e.op, e.seq, e.scn, e.ts_ms, e.table, e.row_id, e.attrs, raw, e.body_at, total_order, collection_order
        )
        return kafka_key, value, e.seq, e.table or "", e.op


class PyAckTracker:
    """Sent changes in order as [seq, table, acked]; the acknowledged prefix moves the cursor."""

    def __init__(self, txn: Any, engine: Any, errors: list[str]):
        self.txn, self.engine, self.errors = txn, engine, errors
        self.first = txn.acked_count + 1
        self.entries: list[list[Any]] = []
        self.head = 0

    @property
    def pending(self) -> int:
        return len(self.entries) - self.head

    def track(self, seq: int, table: str) -> Callable[..., None]:
        if self.head and (self.head == len(self.entries) or self.head > 1024):  # drop the acknowledged prefix
            self.first += self.head
            del self.entries[: self.head]
            self.head = 0
        order = self.first + len(self.entries)
        self.entries.append([seq, table, False])

        def ack(err: object | None, _msg: object = None) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self._acked(order)

        return ack

    def _acked(self, order: int) -> None:
        i = order - self.first
        if i < self.head or i >= len(self.entries) or self.entries[i][2]:
            return
        self.entries[i][2] = True
        if i != self.head:
            return
        counts = self.txn.acked_tables
        while self.head < len(self.entries) and self.entries[self.head][2]:
            seq, table, _ = self.entries[self.head]
            counts[table] = counts.get(table, 0) + 1
            self.head += 1
        self.txn.acked_seq = seq
        self.txn.acked_count = self.first + self.head - 1
        self.engine.cursor_moved(self.txn)


def no_lane(engine: Any, records: list[Any], i: int, open_txns: dict[str, Any], put: Any) -> int:
    return i


def partition_runs(records: list[Any]) -> tuple[dict[int, list[Any]], list[Any]]:
    runs: dict[int, list[Any]] = {}
    errors = []
    for rec in records:
        if rec.error() is not None:
            errors.append(rec)
        else:
            runs.setdefault(rec.partition(), []).append(rec)
    return runs, errors


class DeliveryRoute:
    """A delivery callback (err, msg): on_ack(None) on success, else on_failure(key, value, on_ack, err)."""

    __slots__ = ("key", "on_ack", "on_failure", "value")

    def __init__(self, on_ack: Any, on_failure: Any, key: bytes, value: bytes | None):
        self.on_ack, self.on_failure, self.key, self.value = on_ack, on_failure, key, value

    def __call__(self, err: object | None, _msg: object = None) -> None:
        if err is None:
            self.on_ack(None)
        else:
            self.on_failure(self.key, self.value, self.on_ack, err)
