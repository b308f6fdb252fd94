"""Turning a committed transaction's buffered events into ChangeEvents, streamed from the store.

Only one change and its fragments are in memory at a time, whatever the transaction's size.
"""

from __future__ import annotations

from typing import Iterator

from . import events as ev
from . import keys
from .buffer import Store
from .fragments import apply_fragment
from .txn import Txn


def iter_changes(store: Store, txn: Txn) -> Iterator[dict]:
    """Surviving changes after the emit cursor, in seq order, with fragments merged."""
    begin = keys.event_key(txn.prefix, txn.acked_seq + 1)
    end = keys.upper_bound(txn.prefix + keys.EVENT)
    for _, raw in store.scan(begin, end):
        change = ev.decode_raw(raw)
        if change["op"] in ev.FRAGMENT_OPS:
            continue  # merged into its target below
        _merge_fragments(store, txn, change)
        yield change


def _merge_fragments(store: Store, txn: Txn, change: dict) -> None:
    prefix = keys.fragment_prefix(txn.prefix, change["seq"])
    for pointer, _ in store.scan_prefix(prefix):
        raw = store.get(keys.event_key(txn.prefix, keys.seq_of(pointer)))
        if raw is None:
            continue  # the fragment itself was rolled back
        fragment = ev.decode_raw(raw)
        after = dict(change["after"] or {})
        column = fragment["lob_column"]
        after[column] = apply_fragment(after.get(column), fragment)
        change["after"] = after


def change_event(change: dict, txn: Txn, total_order: int, collection_order: int) -> dict:
    """The ChangeEvent (Debezium envelope) of one surviving change."""
    commit = txn.commit
    return {
        "event_id": ev.event_id(commit.thread, commit.scn, txn.xid, change["seq"]),
        "op": ev.ENVELOPE_OP[change["op"]],
        "ts_ms": change["ts_ms"],
        "key": change["key"],
        "before": change["before"],
        "after": change["after"],
        "ddl": change["ddl"],
        "source": {
            "table": change["table"],
            "xid": txn.xid,
            "seq": change["seq"],
            "scn": change["scn"],
            "commit_scn": commit.scn,
            "commit_ts_ms": commit.ts_ms,
            "thread": commit.thread,
            "user": txn.user,
            "row_id": change["row_id"],
            "attrs": change["attrs"],
        },
        "transaction": {"id": txn.xid, "total_order": total_order, "data_collection_order": collection_order},
    }


def transaction_event(status: str, txn: Txn, ordering: str, event_count: int | None = None,
                      tables: dict[str, int] | None = None) -> dict:
    commit = txn.commit
    end = status == "END"
    return {
        "status": status,
        "id": txn.xid,
        "commit_scn": commit.scn,
        "ts_ms": commit.ts_ms,
        "thread": commit.thread,
        "event_count": event_count if end else None,
        "data_collections": [{"name": n, "event_count": c} for n, c in sorted(tables.items())] if end else None,
        "input_partition": txn.partition if end else None,
        "commit_offset": commit.offset if end else None,
        "ordering": ordering,
        "reason": None,
    }
