"""Live PostgreSQL capture: pgoutput (protocol 2, streaming on) -> RawEvents on the raw topic.

PgMapper is pure (pgoutput bytes -> RawEvents + the LSN that may be acknowledged once they are
durable); PostgresCapture does the I/O. Facts this relies on (PostgreSQL 15):
- big transactions are streamed before commit in blocks; their rows carry the subtransaction XID;
  Stream Abort (xid, subxid) is a subtransaction abort, or a full rollback when both are equal;
- after a reconnect, open transactions are streamed again from the start: we emit BEGIN again, and
  the engine restarts the transaction;
- LSNs are not ordered across streamed blocks, so only commit/abort end LSNs are acknowledged, and
  only after every event before them has been delivered to the raw topic (a flush);
- DDL is not decoded: a Relation message whose shape changed becomes a DDL event.
"""

from __future__ import annotations

import json
import select
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from processor.core import events as ev
from processor.sources import pgoutput as pg

log = structlog.get_logger(__name__)

BOOL, BYTEA, INT8, INT2, INT4, OID, FLOAT4, FLOAT8, NUMERIC = 16, 17, 20, 21, 23, 26, 700, 701, 1700
_INTS = frozenset({INT8, INT2, INT4, OID})
_FLOATS = frozenset({FLOAT4, FLOAT8})
UNCHANGED = object()  # an unchanged TOASTed value: pgoutput does not send it


class CaptureError(RuntimeError):
    """A setup problem the operator must fix (slot, publication, privilege, wal_level)."""


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


class PgMapper:
    """Turns one replication session's pgoutput messages into RawEvents."""

    def __init__(self, primary_key: Callable[[int], list[str] | None] | None = None) -> None:
        # With REPLICA IDENTITY FULL pgoutput flags every column as key: the catalog knows the real one.
        self.primary_key = primary_key
        self.keys: dict[int, list[str]] = {}
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
            out = self._end(xid, ev.COMMIT, msg.commit_lsn, pg.ts_ms(msg.commit_ts_us))
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
            out = self._end(xid, ev.COMMIT, msg.commit_lsn, pg.ts_ms(msg.commit_ts_us))
            return [out], Ack(msg.end_lsn, msg.commit_lsn)
        if isinstance(msg, pg.StreamAbort):
            xid = str(msg.xid)
            if msg.subxid == msg.xid:
                return [self._end(xid, ev.ROLLBACK, data_start, now_ms)], Ack(data_start, None)
            return [self._event(xid, ev.SUBTXN_ABORT, data_start, subxid=str(msg.subxid))], None
        if isinstance(msg, pg.Origin):
            if self._current:
                self._origin[self._current] = msg.name
            return [], None
        if isinstance(msg, pg.TypeMsg):
            self.types[msg.type_oid] = f"{msg.namespace}.{msg.name}"
            return [], None
        if isinstance(msg, pg.Message):
            return [], None  # pg_logical_emit_message payloads have no RawEvent counterpart
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
        return self._event(xid, ev.BEGIN, lsn)

    def _end(self, xid: str, op: str, lsn: int, ts_ms: int) -> dict:
        out = self._event(xid, op, lsn, ts_ms=ts_ms)
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
        attrs: dict[str, str] = {}
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
        for image in (before, after):
            if image is None:
                continue
            unchanged = [k for k, v in image.items() if v is UNCHANGED]
            for k in unchanged:
                # Fill an unchanged TOAST value from the old row when we have it; else leave it out.
                if image is after and before is not None and k in before and before[k] is not UNCHANGED:
                    image[k] = before[k]
                else:
                    del image[k]
                    attrs["unchanged_toast"] = ",".join(filter(None, [attrs.get("unchanged_toast"), k]))
        source = after if after is not None else before
        key = {k: source.get(k) for k in keys} if keys else {}
        if op == ev.UPDATE and before is not None and keys:
            key = {k: (after or {}).get(k, before.get(k)) for k in keys}
        return [
            self._event(xid, op, lsn, table=rel.table, key=key, before=before, after=after, subxid=subxid, attrs=attrs)
        ]


# ---- the capture process ---------------------------------------------------------------------


def check_setup(dsn: str, slot: str, publication: str, create: bool, tables: list[str] | None = None) -> None:
    """Verify (and with create=True, make) what capture needs; CaptureError says what is missing."""
    import psycopg2
    import psycopg2.errors

    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            if cur.fetchone()[0] != "logical":
                raise CaptureError("wal_level is not 'logical': set wal_level = logical and restart PostgreSQL")
            cur.execute("SELECT current_user, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
            user, can_replicate = cur.fetchone()
            if not can_replicate:
                raise CaptureError(f"role {user!r} lacks the REPLICATION attribute: ALTER ROLE {user} REPLICATION")
            cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
            if cur.fetchone() is None:
                if not create:
                    raise CaptureError(
                        f"publication {publication!r} does not exist: CREATE PUBLICATION {publication} "
                        "FOR ALL TABLES (or pass --create)"
                    )
                target = ("FOR TABLE " + ", ".join(tables)) if tables else "FOR ALL TABLES"
                try:
                    cur.execute(f'CREATE PUBLICATION "{publication}" {target}')
                except psycopg2.errors.InsufficientPrivilege as exc:
                    raise CaptureError(
                        f"role {user!r} may not create publication {publication!r} {target}: {exc.pgerror.strip()}"
                    ) from None
                log.info("postgres.publication_created", publication=publication, target=target)
            cur.execute(
                "SELECT plugin, database = current_database() FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            )
            found = cur.fetchone()
            if found is None:
                if not create:
                    raise CaptureError(
                        f"replication slot {slot!r} does not exist: SELECT pg_create_logical_"
                        f"replication_slot('{slot}', 'pgoutput') (or pass --create)"
                    )
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
                log.info("postgres.slot_created", slot=slot)
            elif found[0] != "pgoutput" or not found[1]:
                raise CaptureError(
                    f"replication slot {slot!r} uses plugin {found[0]!r} or another database; "
                    "it must be a pgoutput slot of this database"
                )
    finally:
        conn.close()


class PostgresCapture:
    """Streams a slot onto the raw topic until stop() (or a fatal error). Reconnects on connection loss."""

    def __init__(
        self,
        dsn: str,
        writer: Any,
        slot: str = "txbuffer",
        publication: str = "txbuffer",
        ack_interval_s: float = 0.5,
        heartbeat_interval_s: float = 2.0,
        reconnect_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.dsn, self.writer, self.slot, self.publication = dsn, writer, slot, publication
        self.ack_interval_s, self.heartbeat_interval_s = ack_interval_s, heartbeat_interval_s
        self.reconnect_delay_s = reconnect_delay_s
        self.mapper = PgMapper(self._primary_key)
        self.clock = clock
        self._catalog = None
        self._stop = threading.Event()
        self.pending: Ack | None = None  # newest end LSN whose events are written, not yet flushed
        self.acked_lsn = 0
        self.acked_commit_lsn = 0
        self.events = 0
        self._last_ack = self._last_heartbeat = 0.0

    def stop(self) -> None:
        self._stop.set()

    def _primary_key(self, relid: int) -> list[str] | None:
        import psycopg2

        if self._catalog is None or self._catalog.closed:
            self._catalog = psycopg2.connect(self.dsn)
            self._catalog.autocommit = True
        with self._catalog.cursor() as cur:
            cur.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
                "ORDER BY array_position(i.indkey::int2[], a.attnum)",
                (relid,),
            )
            return [r[0] for r in cur.fetchall()] or None

    def run(self) -> None:
        import psycopg2
        import psycopg2.extras

        while not self._stop.is_set():
            try:
                conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
            except psycopg2.OperationalError as exc:
                log.warning("postgres.connect_failed", error=str(exc).strip())
                self._stop.wait(self.reconnect_delay_s)
                continue
            try:
                self._session(conn)
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                if self._stop.is_set():
                    break
                log.warning("postgres.connection_lost", error=str(exc).strip(), acked=pg.lsn_str(self.acked_lsn))
                self._stop.wait(self.reconnect_delay_s)
            finally:
                self.mapper.reset_session()
                self.pending = None  # the server re-sends everything after the acknowledged LSN
                try:
                    conn.close()
                except Exception:  # already broken
                    pass

    def _session(self, conn: Any) -> None:
        cur = conn.cursor()
        cur.start_replication(
            slot_name=self.slot,
            decode=False,
            options={"proto_version": "2", "publication_names": self.publication, "streaming": "on"},
        )
        log.info("postgres.streaming", slot=self.slot, publication=self.publication)
        while not self._stop.is_set():
            msg = cur.read_message()
            if msg is not None:
                produced, ack = self.mapper.handle(msg.payload, msg.data_start, int(time.time() * 1000))
                for event in produced:
                    self.writer.write(event)
                self.events += len(produced)
                if ack is not None:
                    self.pending = ack
            else:
                select.select([conn], [], [], 0.2)
            self._maybe_ack(cur)
        self._ack(cur)  # a clean stop acknowledges what is durable

    def _maybe_ack(self, cur: Any) -> None:
        now = self.clock()
        if self.pending is not None and now - self._last_ack >= self.ack_interval_s:
            self._ack(cur)
        if self.acked_commit_lsn and now - self._last_heartbeat >= self.heartbeat_interval_s:
            # No COMMIT below an acknowledged commit can come again, even after a restart.
            self.writer.heartbeat(self.acked_commit_lsn, ts_ms=int(time.time() * 1000))
            self._last_heartbeat = now

    def _ack(self, cur: Any) -> None:
        self._last_ack = self.clock()
        pending, self.pending = self.pending, None
        if pending is None:
            return
        self.writer.flush()  # every event up to this end LSN is now on the raw topic
        cur.send_feedback(write_lsn=pending.end_lsn, flush_lsn=pending.end_lsn, force=True)
        self.acked_lsn = max(self.acked_lsn, pending.end_lsn)
        if pending.commit_lsn is not None:
            self.acked_commit_lsn = max(self.acked_commit_lsn, pending.commit_lsn)
        log.debug("postgres.acked", lsn=pg.lsn_str(pending.end_lsn))
