"""The incomplete-transaction marker: a source event that never reached the raw topic.

A source event over the raw topic's size limit cannot be written. The source writer dead-letters it
and writes this marker in its place: a SAVEPOINT RawEvent of the same transaction (xid, seq, scn,
thread, ts_ms, user, client, subxid) named MARK, whose attrs say what was lost. The raw schema and
its hot-path decoding stay as they are: SAVEPOINT already leaves the compiled lane, and an engine
that does not know the marker sees a harmless savepoint.

The engine remembers the transaction as incomplete. At its COMMIT the whole transaction is
dead-lettered (one record: the reason and where it lies on the raw topic) and never emitted; at a
ROLLBACK nothing was lost and it ends as usual.

A control event (BEGIN, COMMIT, ROLLBACK, savepoints, SUBTXN_ABORT) over the limit is written again
without its attrs instead, marked ATTR_STRIPPED: only changes carry attrs to the outputs, so the
transaction loses nothing and needs no marker.
"""

from __future__ import annotations

from typing import Any

from processor.core import events as ev

MARK = "txb.incomplete"  # the marker's savepoint name
ATTR_REASON = "txb.incomplete"  # why the event is missing
ATTR_OP = "txb.op"  # the missing event's op
ATTR_SIZE = "txb.size"  # its encoded size in bytes
ATTR_STRIPPED = "txb.stripped"  # on a control event written again without its attrs: its original size

# Carried over from the missing event: routing, position and what the engine's filters look at.
_KEPT = ("thread", "ts_ms", "user", "client", "subxid", "table")


def marker(event: dict[str, Any], reason: str, size: int) -> dict[str, Any]:
    """The marker RawEvent standing in for `event` (a RawEvent dict) that could not be written."""
    attrs = {ATTR_REASON: reason, ATTR_OP: str(event["op"]), ATTR_SIZE: str(size)}
    kept = {name: event[name] for name in _KEPT if event.get(name) is not None}
    return ev.raw_event(event["xid"], ev.SAVEPOINT, event["seq"], event["scn"], savepoint=MARK, attrs=attrs, **kept)


def stripped(event: dict[str, Any], size: int) -> dict[str, Any] | None:
    """A control event (BEGIN, COMMIT, ROLLBACK, savepoints, SUBTXN_ABORT) without its attrs, the
    only field of it that can grow; None for a change or fragment, whose data cannot be left out."""
    op = event["op"]
    if op in ev.CHANGE_OPS or op in ev.FRAGMENT_OPS or op == ev.HEARTBEAT:
        return None
    return {**event, "attrs": {ATTR_STRIPPED: str(size)}}


def describe(e: Any) -> str:
    """What the marker `e` (a decoded RawEvent) stands for, for the transaction's dead letter."""
    attrs = e["attrs"] or {}
    table = f" {e['table']}" if e["table"] else ""
    return (
        f"event seq {e['seq']} ({attrs.get(ATTR_OP, '?')}{table}, scn {e['scn']}, "
        f"{attrs.get(ATTR_SIZE, '?')} bytes) oversized at source: {attrs.get(ATTR_REASON, 'no reason given')}"
    )
