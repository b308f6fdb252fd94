"""Why a RawEvent that decoded is still unusable: the checks before the engine acts on it."""

from __future__ import annotations

from processor.core import events as ev
from processor.core.codec import RawFields

# thread is an Avro int: a varint beyond 32 bits decodes (fastavro does not range-check it) but
# cannot be written into a change_event, so it is refused here, where fastavro.validation refuses it.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def validate(e: RawFields) -> str | None:
    """Why an event that decoded is still unusable, or None."""
    op = e["op"]
    if e["seq"] < 0:
        return f"negative seq {e['seq']}"
    if not INT_MIN <= e["thread"] <= INT_MAX:
        return f"thread {e['thread']} is out of the Avro int range"
    if op != ev.HEARTBEAT and not e["xid"]:
        return f"{op} without xid"
    if e["undo"] and op in ev.CHANGE_OPS:  # an undo flag on any other op changes nothing: check it as usual
        if not e["row_id"]:
            return "undo row without row_id"
        return None
    if op in ev.ROW_OPS:
        if not e["table"]:
            return f"{op} without table"
        if not e["key"]:
            return f"{op} without key"
    elif op == ev.TRUNCATE and not e["table"]:
        return "TRUNCATE without table"
    elif op == ev.DDL and not e["ddl"]:
        return "DDL without ddl text"
    elif op in ev.FRAGMENT_OPS:
        if not e["lob_column"]:
            return f"{op} without lob_column"
        if not e["row_id"] and not (e["table"] and e["key"]):
            return f"{op} without row_id or table and key"
        if op == ev.LOB_TRIM and e["lob_length"] is None:
            return "LOB_TRIM without lob_length"
        if op == ev.LOB_ERASE and (e["lob_length"] is None or e["lob_offset"] is None):
            return "LOB_ERASE without lob_offset and lob_length"
        if (e["lob_offset"] or 0) < 0 or (e["lob_length"] or 0) < 0:  # would be clamped: data changed silently
            return f"{op} with a negative lob_offset or lob_length ({e['lob_offset']}, {e['lob_length']})"
    elif op in (ev.SAVEPOINT, ev.ROLLBACK_TO_SAVEPOINT) and not e["savepoint"]:
        return f"{op} without savepoint name"
    elif op == ev.SUBTXN_ABORT and not e["subxid"]:
        return "SUBTXN_ABORT without subxid"
    return None


def misplaced(key: bytes | None, xid: str) -> str | None:
    """Why a record keyed by something other than its XID is unusable, or None. The key decides the
    partition, so a transaction's records under other keys may sit in other partitions: each part
    would be buffered and emitted on its own, with the same event_ids (thread:commit_scn:xid:seq).
    A record without a key is the producer's choice of partition and is taken as it is."""
    if key is None or not xid or key == xid.encode():
        return None
    return f"record key {key[:64]!r} is not its xid {xid[:64]!r}: the raw topic is keyed by XID"
