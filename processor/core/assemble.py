"""Turning a committed transaction's buffered events into ChangeEvents, streamed from the store.

Only one change and its fragments are in memory at a time, whatever the transaction's size.
Changes without fragments are spliced: their key/before/after/ddl bytes are copied from the raw
event (events.encode_change_spliced) instead of being decoded and re-encoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from processor.core import codec, keys, stored
from processor.core import events as ev
from processor.core.fragments import apply_fragment
from processor.core.store import Store
from processor.core.txn import Txn


@dataclass(slots=True)
class Change:
    """One surviving change: its stored header, and either its raw body bytes or, once fragments
    changed it, the decoded event."""

    op: str
    seq: int
    scn: int
    ts_ms: int
    table: str | None
    row_id: str | None
    attrs: dict[str, str]
    kafka_key: bytes
    body_at: int
    raw: bytes
    decoded: dict[str, Any] | None = None


def iter_changes(store: Store, txn: Txn) -> Iterator[Change]:
    """Surviving changes after the emit cursor, in seq order, with fragments merged."""
    begin = keys.event_key(txn.prefix, txn.acked_seq + 1)
    end = keys.events_end(txn.prefix)
    for _, value in store.scan(begin, end):
        header, raw = stored.unpack(value)
        if header[0] in ev.FRAGMENT_OPS:
            continue  # merged into its target below
        op, seq, scn, ts_ms, table, row_id, attrs, kafka_key, body_at = header
        change = Change(op, seq, scn, ts_ms, table, row_id, attrs, kafka_key, body_at, raw)
        if txn.fragments and change.op in ev.ROW_OPS and change.op != ev.DELETE:  # a DELETE has no after
            _merge_fragments(store, txn, change)
        yield change


def _merge_fragments(store: Store, txn: Txn, change: Change) -> None:
    prefix = keys.fragment_prefix(txn.prefix, change.seq)
    for pointer, _ in store.scan_prefix(prefix):
        value = store.get(keys.event_key(txn.prefix, keys.seq_of(pointer)))
        if value is None:
            continue  # the fragment itself was rolled back
        if stored.op_of(value) not in ev.FRAGMENT_OPS:
            continue  # a later event reused the fragment's seq and replaced it: the pointer is stale
        fragment = codec.decode_raw(stored.raw_of(value))
        if change.decoded is None:
            change.decoded = codec.decode_raw(change.raw)
        after = dict(change.decoded["after"] or {})
        column = fragment["lob_column"]
        after[column] = apply_fragment(after.get(column), fragment)
        change.decoded["after"] = after


def change_writer(txn: Txn) -> codec.ChangeEncoder:
    """Encodes the ChangeEvents of one committed transaction; its constant fields are encoded once."""
    commit = txn.require_commit()
    return codec.ChangeWriter(txn.xid, commit.scn, commit.ts_ms, commit.thread, txn.user)


def change_event_bytes(
    change: Change, txn: Txn, total_order: int, collection_order: int, writer: codec.ChangeEncoder | None = None
) -> bytes:
    """The ChangeEvent (Debezium envelope) of one surviving change, Avro-encoded."""
    if writer is not None and change.decoded is None:
        return writer.encode(
            change.op, change.seq, change.scn, change.ts_ms, change.table, change.row_id, change.attrs,
            change.raw, change.body_at, total_order, collection_order,
        )  # fmt: skip
    commit = txn.require_commit()
    head = {
        "event_id": ev.event_id(commit.thread, commit.scn, txn.xid, change.seq),
        "op": ev.ENVELOPE_OP[change.op],
        "ts_ms": change.ts_ms,
    }
    tail = {
        "source": {
            "table": change.table,
            "xid": txn.xid,
            "seq": change.seq,
            "scn": change.scn,
            "commit_scn": commit.scn,
            "commit_ts_ms": commit.ts_ms,
            "thread": commit.thread,
            "user": txn.user,
            "row_id": change.row_id,
            "attrs": change.attrs,
        },
        "transaction": {"id": txn.xid, "total_order": total_order, "data_collection_order": collection_order},
    }
    if change.decoded is None:
        return ev.encode_change_spliced(head, memoryview(change.raw)[change.body_at :], tail)
    d = change.decoded
    return ev.encode_change(
        {**head, "key": d["key"], "before": d["before"], "after": d["after"], "ddl": d["ddl"], **tail}
    )


def _transaction_fields(
    status: str, txn: Txn, ordering: str, event_count: int | None, tables: dict[str, int] | None
) -> tuple[Any, ...]:
    commit = txn.require_commit()
    if status == "END":
        return (status, txn.xid, commit.scn, commit.ts_ms, commit.thread, event_count, tables or {},
                txn.partition, commit.offset, ordering)  # fmt: skip
    return status, txn.xid, commit.scn, commit.ts_ms, commit.thread, None, None, None, None, ordering


def transaction_event(
    status: str, txn: Txn, ordering: str, event_count: int | None = None, tables: dict[str, int] | None = None
) -> dict[str, Any]:
    """BEGIN or END of a committed transaction as a record (END carries its counts and position)."""
    return ev.transaction_record(*_transaction_fields(status, txn, ordering, event_count, tables))


def transaction_bytes(
    status: str, txn: Txn, ordering: str, event_count: int | None = None, tables: dict[str, int] | None = None
) -> bytes:
    """transaction_event's record encoded; the compiled codec writes it without building the record.
    Two per emitted transaction: the fields are read here, not through _transaction_fields, whose
    two extra calls were a tenth of this function's cost."""
    commit = txn.commit
    if commit is None:
        commit = txn.require_commit()  # raises
    if status == "END":
        return codec.transaction_bytes(status, txn.xid, commit.scn, commit.ts_ms, commit.thread, event_count,
                                       tables or {}, txn.partition, commit.offset, ordering)  # fmt: skip
    return codec.transaction_bytes(
        status, txn.xid, commit.scn, commit.ts_ms, commit.thread, None, None, None, None, ordering
    )
