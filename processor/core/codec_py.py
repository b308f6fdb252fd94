"""The fastavro backend's versions of the compiled emission helpers (processor/core/_emit.pxi).

processor.core.codec picks these when the extension is not built. They behave exactly as the
compiled ones: ChangeStream numbers and encodes a committed transaction's buffered changes,
Emission holds how far a released transaction is acknowledged, and the engine's fast lane is empty
(every record takes the Python path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import events as _ev


class PyEmission:
    """One released transaction of processor.runtime.emitter.Emitter: its change numbering (stream)
    and how far its outputs are acknowledged."""

    __slots__ = ("all_sent", "changes_settled", "end_acked", "end_sent", "engine", "last_seq", "stream", "txn")

    def __init__(self, engine: Any, txn: Any, stream: Any):
        self.engine, self.txn, self.stream = engine, txn, stream
        self.last_seq = txn.acked_seq  # seq of the last change sent
        self.all_sent = self.end_sent = self.end_acked = False
        self.changes_settled = True  # every change sent so far is acknowledged

    def settle(self) -> None:
        """Every output of this emission sent so far is acknowledged: move the emit cursor."""
        txn = self.txn
        if not self.changes_settled:
            self.changes_settled = True
            stream = self.stream
            if stream.produced != txn.acked_count:
                txn.acked_seq = self.last_seq
                txn.acked_count = stream.produced
                # A copy while the stream still numbers changes; once all are sent its counts are
                # final and shared (a copy per transaction was ~1% of the steady loop).
                txn.acked_tables = stream.tables if self.all_sent else dict(stream.tables)
                if txn.staged is None:  # else cursor_moved does nothing (a staged one's metadata is not stored)
                    self.engine.cursor_moved(txn)
        if self.end_sent:
            self.end_acked = True

    def transaction_bytes(self, status: str, ordering: str) -> bytes:
        """The transaction's BEGIN, or its END with the stream's counts (assemble.transaction_bytes)."""
        from .assemble import transaction_bytes  # assemble imports codec, which imports this module

        if status == "END":
            return transaction_bytes(status, self.txn, ordering, self.stream.produced, self.stream.tables)
        return transaction_bytes(status, self.txn, ordering)


def settle_all(emissions: list[Any]) -> None:
    for em in emissions:
        em.settle()


class PyChangeStream:
    def __init__(self, writer: Any, produced: int, tables: dict[str, int], view: Callable[[bytes], Any]):
        self.writer, self.produced, self.tables, self._view = writer, produced, tables, view
        self.sent: int = 0
        self.last_seq: int | None = None  # set by the caller before send_all
        self._counted = ""  # the table of the last change numbered

    def send_all(
        self,
        pairs: Any,
        send: Callable[..., None],
        failed: Any,
        tombstone_after: str | None,
        direct: tuple[Callable[..., Any], Any, Any] | None = None,
    ) -> None:
        for _, raw in pairs:
            numbered = self.produced
            try:
                out = self.next(raw)
                if out is None:
                    continue
                kafka_key, value, seq, _table, op = out
                _hand_over(direct, send, failed, kafka_key, value)
            except BaseException:
                if self.produced > numbered:  # numbered, not sent: the emit cursor must never cover it
                    self.produced -= 1
                    self.tables[self._counted] -= 1
                raise
            self.sent += 1
            self.last_seq = seq
            if op == tombstone_after:
                _hand_over(direct, send, failed, kafka_key, None)

    def send_staged(self, *_args: Any) -> bool:
        """The compiled stream's in-place path for staged writes; this fallback has none (False): the
        caller takes engine.buffered and send_all."""
        return False

    def number(self, table: str | None) -> tuple[int, int]:
        t = table or ""
        count = self.tables.get(t, 0) + 1
        self.tables[t] = count
        self._counted = t
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


def no_lane(
    engine: Any, records: Sequence[Any], i: int, open_txns: dict[str, Any], put: Any, actions: list[Any]
) -> int:
    return i


def staged_range(staged: dict[bytes, Any], begin: bytes, end: bytes) -> list[tuple[bytes, Any]]:
    return sorted(item for item in staged.items() if begin <= item[0] < end)


def partition_runs(records: list[Any]) -> tuple[dict[int, list[Any]], list[Any]]:
    runs: dict[int, list[Any]] = {}
    errors = []
    for rec in records:
        if rec.error() is not None:
            errors.append(rec)
        else:
            runs.setdefault(rec.partition(), []).append(rec)
    return runs, errors


def _hand_over(
    direct: tuple[Callable[..., Any], Any, Any] | None, send: Callable[..., None], failed: Any, key: bytes, value: Any
) -> None:
    """One output to the sink: by its direct call when it has one, else (or when that raises an
    Exception) by send. A ChangeSender capsule is for the compiled stream: here send takes each."""
    if type(direct) is tuple:
        call, a, b = direct
        try:
            call(value, key, a, b)
            return
        except Exception:
            pass
    send(key, value, failed)
