"""Synthetic ChangeEvents (tests and the benchmark), encoded exactly as the processor emits them."""

from __future__ import annotations

from processor.core.events import change_key, encode_change, event_id

_ENVELOPE = {"c", "u", "d", "t", "ddl"}
BASE_TS_MS = 1_700_000_000_000


def change_event(
    table: str,
    key: dict | None,
    op: str,
    commit_scn: int,
    seq: int,
    xid: str | None = None,
    after: dict | None = None,
    before: dict | None = None,
    thread: int = 1,
    ts_ms: int | None = None,
    total_order: int | None = None,
) -> dict:
    if op not in _ENVELOPE:
        raise ValueError(f"op must be one of {sorted(_ENVELOPE)}")
    xid = xid or f"x{commit_scn}"
    # A real commit time (one second per scn from 2023-11-14): the change log's dedup watermark
    # and commit_date partitions work on it, and Spark treats the epoch itself as already late.
    ts_ms = BASE_TS_MS + 1000 * commit_scn if ts_ms is None else ts_ms
    return {
        "event_id": event_id(thread, commit_scn, xid, seq),
        "op": op,
        "ts_ms": ts_ms,
        "key": key,
        "before": before,
        "after": after,
        "ddl": None,
        "source": {
            "table": table,
            "xid": xid,
            "seq": seq,
            "scn": commit_scn - 1,
            "commit_scn": commit_scn,
            "commit_ts_ms": ts_ms,
            "thread": thread,
            "user": None,
            "row_id": None,
            "attrs": {},
        },
        "transaction": {"id": xid, "total_order": total_order or seq, "data_collection_order": total_order or seq},
    }


def kafka_record(event: dict) -> tuple[bytes, bytes]:
    """(key, value) as the processor writes them to txbuffer.changes."""
    return change_key(event["source"]["table"], event["key"]), encode_change(event)
