"""Synthetic ChangeEvents (tests and the benchmark), encoded exactly as the processor emits them."""

from __future__ import annotations

from typing import Any

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


def decoded_change(table: str, k: int, op: str, scn: int, v: object = None) -> dict:
    """One decoded change (processor.spark.decode.CHANGE_COLUMNS, a row of the Delta sinks' input)
    of `table` keyed by id = k, with seq = k: its key, and unless it is a delete, id and v after."""
    from processor.spark.decode import union_member

    return {
        "event_id": f"1:{scn}:x:{k}",
        "table": table,
        "op": op,
        "key": {"id": union_member(k)},
        "after": None if op == "d" else {"id": union_member(k), "v": union_member(v)},
        "xid": "x",
        "seq": k,
        "scn": scn,
        "commit_scn": scn,
        "commit_ts_ms": 0,
        "ts_ms": 0,
        "thread": 1,
    }


def decoded_frame(spark: Any, changes: list[dict]) -> Any:
    """A DataFrame of decoded changes (decoded_change) with every CHANGE_COLUMNS column."""
    from processor.spark.decode import CHANGE_COLUMNS

    rows = [{f.name: c.get(f.name) for f in CHANGE_COLUMNS.fields} for c in changes]
    return spark.createDataFrame(rows, CHANGE_COLUMNS)
