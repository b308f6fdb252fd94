"""PostgreSQL pgoutput (protocol 2, streaming on) -> RawEvents, and the LSN that may be acknowledged
once they are durable. The capture process around it is in pg_capture.py. Facts this relies on
(PostgreSQL 15):
- big transactions are streamed before commit in blocks; their rows carry the subtransaction XID;
  Stream Abort (xid, subxid) is a subtransaction abort, or a full rollback when both are equal;
- after a reconnect, open transactions are streamed again from the start: we emit BEGIN again, and
  the engine restarts the transaction;
- LSNs are not ordered across streamed blocks, so only commit/abort end LSNs are acknowledged, and
  only after every event before them has been delivered to the raw topic (a flush);
- DDL is not decoded: a Relation message whose shape changed becomes a DDL event;
- an UPDATE leaves out TOASTed values it did not change ("u"): with `toast="carry"` they are filled
  from the row's last known image (pg_toast.RowImages), else with Debezium's placeholder.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from processor.core import events as ev
from processor.sources import pg_columns
from processor.sources import pgoutput as pg
from processor.sources.pg_toast import RowImages, row_key

log = structlog.get_logger(__name__)

BOOL, BYTEA, INT8, INT2, INT4, OID, FLOAT4, FLOAT8, NUMERIC = 16, 17, 20, 21, 23, 26, 700, 701, 1700
_INTS = frozenset({INT8, INT2, INT4, OID})
_FLOATS = frozenset({FLOAT4, FLOAT8})
UNCHANGED = object()  # an unchanged TOASTed value: pgoutput does not send it
PLACEHOLDER = "__debezium_unavailable_value"  # Debezium's value for an unavailable TOAST column
TOAST_MODES = ("carry", "placeholder")


def convert(type_oid: int, kind: str, raw: bytes | None) -> Any:
    """A pgoutput tuple value -> the RawEvent value type for its column type."""
    if kind == "n":
        return None
    if kind == "u":
        return UNCHANGED
    if kind == "b":
        return raw
    text = raw.decode("utf-8")
    if type_oid in _INTS:
        return int(text)
    if type_oid in _FLOATS:
        return float(text)  # float() reads NaN, Infinity and -Infinity as PostgreSQL writes them
    if type_oid == BOOL:
        return text == "t"
    if type_oid == BYTEA:
        return bytes.fromhex(text[2:]) if text.startswith("\\x") else text.encode()
    return text  # numeric stays a string: exact decimal; text, varchar, dates, json...


@dataclass
class Ack:
    end_lsn: int
    commit_lsn: int | None  # None for an abort


def placeholder(type_oid: int) -> Any:
    return PLACEHOLDER.encode() if type_oid == BYTEA else PLACEHOLDER


class PgMapper:
    """Turns one replication session's pgoutput messages into RawEvents."""

    def __init__(
        self,
        primary_key: Callable[[int], list[str] | None] | None = None,
        describe: Callable[[int], dict[str, tuple[str, bool]]] | None = None,
        images: RowImages | None = None,
        toast: str = "carry",
    ) -> None:
        if toast not in TOAST_MODES:
            raise ValueError(f"toast must be one of {TOAST_MODES}, not {toast!r}")
        # With REPLICA IDENTITY FULL pgoutput flags every column as key: the catalog knows the real one.
        self.primary_key = primary_key
        self.describe = describe  # relid -> {column: (format_type, nullable)}, for attrs["pg_columns"]
        self.images = images if toast == "carry" else None
        self.toast = toast
        self.keys: dict[int, list[str]] = {}
        self.column_types: dict[int, str] = {}
        self.relations: dict[int, pg.Relation] = {}
        self.types: dict[int, str] = {}
        self.stats: Counter = Counter()
        self._seqs: dict[str, int] = {}
        self._ts: dict[str, int] = {}
        self._origin: dict[str, str] = {}
        self._last_lsn = 0
        self.reset_session()

    def reset_session(self) -> None:
        """A new connection: the server re-sends open transactions from their start."""
        self.in_stream = False
        self._stream_xid: str | None = None
        self._current: str | None = None
        self._begun: set[str] = set()

    @property
    def idle(self) -> bool:
        """No transaction is partly received."""
        return self._current is None and not self._begun and not self.in_stream

    # ---- entry point ---------------------------------------------------------------------

    def handle(self, payload: bytes, data_start: int, now_ms: int = 0) -> tuple[list[dict], Ack | None]:
        msg = pg.decode(payload, self.in_stream)
        self.stats[type(msg).__name__] += 1
        # Some messages (Relation, Type) are sent without a WAL position: use the last one seen.
        data_start = data_start or self._last_lsn
        self._last_lsn = data_start
        if isinstance(msg, pg.Begin):
            xid = str(msg.xid)
            self._current = xid
            return [self._begin(xid, data_start, pg.ts_ms(msg.commit_ts_us))], None
        if isinstance(msg, pg.Commit):
            xid = self._require(self._current, "Commit outside a transaction")
            out = self._end(xid, ev.COMMIT, msg.commit_lsn, pg.ts_ms(msg.commit_ts_us), end_lsn=msg.end_lsn)
            self._current = None
            return [out], Ack(msg.end_lsn, msg.commit_lsn)
        if isinstance(msg, pg.StreamStart):
            xid = str(msg.xid)
            self.in_stream, self._stream_xid = True, xid
            if msg.first_segment or xid not in self._begun:
                return [self._begin(xid, data_start, now_ms)], None
            return [], None
        if isinstance(msg, pg.StreamStop):
            self.in_stream, self._stream_xid = False, None
            return [], None
        if isinstance(msg, pg.StreamCommit):
            xid = str(msg.xid)
            out = self._end(xid, ev.COMMIT, msg.commit_lsn, pg.ts_ms(msg.commit_ts_us), end_lsn=msg.end_lsn)
            return [out], Ack(msg.end_lsn, msg.commit_lsn)
        if isinstance(msg, pg.StreamAbort):
            xid = str(msg.xid)
            if msg.subxid == msg.xid:
                return [self._end(xid, ev.ROLLBACK, data_start, now_ms)], Ack(data_start, None)
            if self.images is not None:
                self.images.subtransaction_aborted(xid, str(msg.subxid))
            return [self._event(xid, ev.SUBTXN_ABORT, data_start, subxid=str(msg.subxid))], None
        if isinstance(msg, pg.Origin):
            if self._current:
                self._origin[self._current] = msg.name
            return [], None
        if isinstance(msg, pg.TypeMsg):
            self.types[msg.type_oid] = f"{msg.namespace}.{msg.name}"
            return [], None
        if isinstance(msg, pg.Message):
            # pg_logical_emit_message payloads have no RawEvent counterpart. A non-transactional one
            # (the capture's own heartbeat) between transactions is a position that may be confirmed.
            if not msg.transactional and self.idle and msg.lsn:
                return [], Ack(msg.lsn, None)
            return [], None
        if isinstance(msg, pg.Relation):
            return self._relation(msg, data_start), None
        return self._row_change(msg, data_start), None

    # ---- pieces --------------------------------------------------------------------------

    @staticmethod
    def _require(value: str | None, what: str) -> str:
        if value is None:
            raise pg.PgOutputError(what)
        return value

    def _xid(self) -> str:
        return self._require(self._stream_xid if self.in_stream else self._current, "change outside a transaction")

    def _event(self, xid: str, op: str, scn: int, **fields: Any) -> dict:
        seq = self._seqs.get(xid, 0)
        self._seqs[xid] = seq + 1
        attrs = fields.pop("attrs", {})
        if xid in self._origin:
            attrs["origin"] = self._origin[xid]
        return ev.raw_event(xid, op, seq, scn, ts_ms=fields.pop("ts_ms", self._ts.get(xid, 0)), attrs=attrs, **fields)

    def _begin(self, xid: str, lsn: int, ts_ms: int) -> dict:
        self._seqs[xid] = 0
        self._ts[xid] = ts_ms
        self._begun.add(xid)
        if self.images is not None:
            self.images.begin(xid)
        return self._event(xid, ev.BEGIN, lsn)

    def _end(self, xid: str, op: str, lsn: int, ts_ms: int, end_lsn: int | None = None) -> dict:
        out = self._event(xid, op, lsn, ts_ms=ts_ms)
        if self.images is not None:
            if op == ev.COMMIT and end_lsn is not None:
                self.images.commit(xid, end_lsn)
            else:
                self.images.abort(xid)
        for d in (self._seqs, self._ts, self._origin):
            d.pop(xid, None)
        self._begun.discard(xid)
        return out

    def _relation(self, rel: pg.Relation, lsn: int) -> list[dict]:
        old = self.relations.get(rel.relid)
        self.relations[rel.relid] = rel
        keys = [c.name for c in rel.columns if c.key]
        if rel.replica_identity == "f" and self.primary_key is not None:
            keys = self.primary_key(rel.relid) or keys
        self.keys[rel.relid] = keys
        described = self.describe(rel.relid) if self.describe is not None else {}
        self.column_types[rel.relid] = pg_columns.encode(
            [
                pg_columns.ColumnInfo(
                    c.name,
                    c.type_oid,
                    c.typmod,
                    described.get(c.name, (self.types.get(c.type_oid), True))[0],
                    c.name in keys,
                    described.get(c.name, (None, True))[1],
                )
                for c in rel.columns
            ]
        )
        if old is None or old.shape() == rel.shape():
            return []
        # DDL is not decoded; a changed Relation is how it shows. Describe the new shape.
        ddl = json.dumps(
            {
                "relation": rel.table,
                "replica_identity": rel.replica_identity,
                "columns": [
                    {"name": c.name, "type_oid": c.type_oid, "typmod": c.typmod, "key": c.key} for c in rel.columns
                ],
                "previous": {"relation": old.table, "columns": [c.name for c in old.columns]},
            }
        )
        self.stats["ddl"] += 1
        return [self._event(self._xid(), ev.DDL, lsn, table=rel.table, ddl=ddl, subxid=self._subxid(rel.xid))]

    def _subxid(self, msg_xid: int | None) -> str | None:
        return str(msg_xid) if self.in_stream and msg_xid is not None else None

    def _row(self, rel: pg.Relation, tup: pg.TupleData) -> dict[str, Any]:
        if len(tup) != len(rel.columns):
            raise pg.PgOutputError(f"{rel.table}: tuple has {len(tup)} columns, relation {len(rel.columns)}")
        return {c.name: convert(c.type_oid, kind, raw) for c, (kind, raw) in zip(rel.columns, tup)}

    def _rel(self, relid: int) -> pg.Relation:
        rel = self.relations.get(relid)
        if rel is None:
            raise pg.PgOutputError(f"change for unknown relation {relid} (no Relation message seen)")
        return rel

    def _row_change(self, msg: Any, lsn: int) -> list[dict]:
        xid = self._xid()
        subxid = self._subxid(msg.xid)
        if isinstance(msg, pg.Truncate):
            return [
                self._event(
                    xid,
                    ev.TRUNCATE,
                    lsn,
                    table=self._rel(r).table,
                    subxid=subxid,
                    attrs={"truncate_options": str(msg.options)},
                )
                for r in msg.relids
            ]
        rel = self._rel(msg.relid)
        keys = self.keys[rel.relid]
        attrs: dict[str, str] = {pg_columns.ATTR: self.column_types[rel.relid]}
        if isinstance(msg, pg.Insert):
            op, before, after = ev.INSERT, None, self._row(rel, msg.new)
        elif isinstance(msg, pg.Update):
            op, after = ev.UPDATE, self._row(rel, msg.new)
            before = self._row(rel, msg.old) if msg.old is not None else None
            if before is not None and msg.old_kind == "K":
                before = {k: v for k, v in before.items() if k in keys}
        else:
            op, after = ev.DELETE, None
            before = self._row(rel, msg.old)
            if msg.old_kind == "K":
                # Only the replica identity is sent unless REPLICA IDENTITY FULL.
                before = {k: v for k, v in before.items() if k in keys}
        source = after if after is not None else before
        key = {k: source.get(k) for k in keys} if keys else {}
        if op == ev.UPDATE and before is not None and keys:
            key = {k: (after or {}).get(k, before.get(k)) for k in keys}
        row = row_key(rel.table, key) if keys else None
        for image in (before, after):
            if image is not None and any(v is UNCHANGED for v in image.values()):
                self._fill_unchanged(xid, rel, row, image, before if image is after else None, attrs)
        if self.images is not None and row is not None:
            if op == ev.UPDATE and before is not None:
                old_row = row_key(rel.table, {k: before.get(k) for k in keys})
                if old_row != row:
                    self.images.record(xid, subxid, old_row, None)  # the primary key changed
            self.images.record(xid, subxid, row, after)
        return [
            self._event(xid, op, lsn, table=rel.table, key=key, before=before, after=after, subxid=subxid, attrs=attrs)
        ]

    def _fill_unchanged(
        self, xid: str, rel: pg.Relation, row: bytes | None, image: dict, old: dict | None, attrs: dict
    ) -> None:
        """Unchanged TOAST values: from the old row (REPLICA IDENTITY FULL), else the last known image
        (carry), else Debezium's placeholder, counted."""
        known = None
        missing = []
        for c in rel.columns:
            if image.get(c.name) is not UNCHANGED:
                continue
            if old is not None and c.name in old and old[c.name] is not UNCHANGED:
                image[c.name] = old[c.name]
                continue
            if self.images is not None and row is not None and known is None:
                known = self.images.lookup(xid, row) or {}
            if known and c.name in known and known[c.name] not in (PLACEHOLDER, PLACEHOLDER.encode()):
                image[c.name] = known[c.name]
                self.stats["toast_carried"] += 1
            else:
                image[c.name] = placeholder(c.type_oid)
                missing.append(c.name)
        if missing:
            self.stats["toast_placeholder"] += len(missing)
            attrs["toast_placeholder"] = ",".join(missing)
