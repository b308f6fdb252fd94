"""The initial snapshot of a PostgreSQL capture: every published table, read in primary-key chunks
inside one REPEATABLE READ transaction, as READ raw events (op "r" downstream).

- Consistency: with `snapshot_name` the transaction imports the snapshot exported when the slot
  was created, so the rows are exactly the state at the slot's consistent point; the stream then
  continues from that point with no gap and no overlap.
- Chunks: one chunk of `chunk_rows` rows is one raw transaction, xid
  `snapshot:<slot LSN>:<table>:<chunk>`, committed at the slot's LSN minus one (below every streamed
  commit). A chunk is saved to `snapshot-chunk.pending` before it is sent, and its progress (count,
  last key) after Kafka acknowledged it. A kill in between re-sends the saved chunk byte for byte
  (same xid, seq and values), so event_id dedup collapses it; nothing is re-read for it.
- Resume: a killed capture loses the exported snapshot. The remaining chunks are read in a fresh
  snapshot, and the stream replays every change since the slot's start, so each row converges to
  its current value (rows may pass through a state newer than their neighbours').
- Values are read as the server's text output, the same text pgoutput sends, and converted by the
  same function, so a snapshot row equals the row the stream would have produced.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from processor.core import events as ev
from processor.sources import pg_columns
from processor.sources import pgoutput as pg
from processor.sources.pg_state import CaptureState
from processor.sources.postgres import convert

log = structlog.get_logger(__name__)


@dataclass
class TableMeta:
    name: str  # schema.table
    relid: int
    columns: list[pg_columns.ColumnInfo]
    key: list[str]

    @property
    def types(self) -> str:
        return pg_columns.encode(self.columns)


def publication_tables(cur: Any, publication: str) -> list[str]:
    cur.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
        (publication,),
    )
    return [r[0] for r in cur.fetchall()]


def table_meta(cur: Any, table: str) -> TableMeta:
    schema, name = table.split(".", 1)
    cur.execute(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, name),
    )
    relid = cur.fetchone()[0]
    # The primary key, else the replica identity index: what the stream uses as the key.
    cur.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND (i.indisprimary OR i.indisreplident) "
        "ORDER BY i.indisprimary DESC, array_position(i.indkey::int2[], a.attnum)",
        (relid,),
    )
    key: list[str] = []
    for (col,) in cur.fetchall():
        if col not in key:
            key.append(col)
    cur.execute(
        "SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod), NOT attnotnull FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        (relid,),
    )
    columns = [pg_columns.ColumnInfo(n, oid, mod, tn, n in key, opt) for n, oid, mod, tn, opt in cur.fetchall()]
    return TableMeta(table, relid, columns, key)


def _raw_text(cur: Any, oids: set[int]) -> None:
    """Make psycopg2 hand back the server's text output for these types, untouched (this cursor only)."""
    import psycopg2.extensions

    raw = psycopg2.extensions.new_type(tuple(sorted(oids)), "TXBUFFER_RAW", lambda value, _cur: value)
    psycopg2.extensions.register_type(raw, cur)


class Snapshotter:
    """Reads the tables of a publication into READ raw events, chunk by chunk, saving progress."""

    def __init__(
        self,
        conn: Any,
        writer: Any,
        state: CaptureState,
        publication: str,
        chunk_rows: int = 4096,
        on_row: Callable[[str, dict, dict], None] | None = None,
    ):
        self.conn, self.writer, self.state, self.publication = conn, writer, state, publication
        self.chunk_rows = chunk_rows
        self.on_row = on_row  # (table, key, image) after a chunk is durable: the TOAST image store
        self.rows = 0
        self.skipped: list[str] = []

    def run(self, snapshot_name: str | None) -> int:
        """Read every table not yet done; returns the rows sent. The caller owns the state's `done`."""
        self.conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        cur = self.conn.cursor()
        if snapshot_name:
            cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
        started = time.monotonic()
        self._resend_pending()
        for table in publication_tables(cur, self.publication):
            if self.state.table(table).done:
                continue
            meta = table_meta(cur, table)
            if not meta.key:
                # No primary key or replica identity index: the stream cannot key these rows either.
                log.warning("postgres.snapshot_table_without_key", table=table)
                self.skipped.append(table)
                continue
            self._table(meta)
        self.conn.commit()
        log.info(
            "postgres.snapshot_done",
            rows=self.rows,
            seconds=round(time.monotonic() - started, 2),
            tables_without_key=self.skipped,
        )
        return self.rows

    def _table(self, meta: TableMeta) -> None:
        from psycopg2 import sql

        progress = self.state.table(meta.name)
        cur = self.conn.cursor()
        _raw_text(cur, {c.type_oid for c in meta.columns} | {25})
        by_name = {c.name: c for c in meta.columns}
        schema, name = meta.name.split(".", 1)
        ident = sql.Identifier(schema, name)
        cols = sql.SQL(", ").join(sql.Identifier("t", c.name) for c in meta.columns)
        key_cols = sql.SQL(", ").join(sql.Identifier("t", k) for k in meta.key)
        key_text = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier("t", k)) for k in meta.key)
        after_key = sql.SQL(", ").join(
            sql.SQL("%s::{}").format(sql.SQL(by_name[k].type_name or "text")) for k in meta.key
        )
        first = sql.SQL("SELECT {}, {} FROM {} AS t ORDER BY {} LIMIT %s").format(cols, key_text, ident, key_cols)
        more = sql.SQL("SELECT {}, {} FROM {} AS t WHERE ({}) > ({}) ORDER BY {} LIMIT %s").format(
            cols, key_text, ident, key_cols, after_key, key_cols
        )
        types = meta.types
        n = len(meta.columns)
        while True:
            if progress.last_key is None:
                cur.execute(first, (self.chunk_rows,))
            else:
                cur.execute(more, (*progress.last_key, self.chunk_rows))
            rows = cur.fetchall()
            images = [
                {c.name: convert(c.type_oid, "n" if v is None else "t", None if v is None else v.encode())
                 for c, v in zip(meta.columns, r[:n])}
                for r in rows
            ]  # fmt: skip
            chunk = {
                "table": meta.name,
                "chunk": progress.chunks,
                "last_key": list(rows[-1][n:]) if rows else progress.last_key,
                "done": len(rows) < self.chunk_rows,
                "key": meta.key,
                "types": types,
                "images": images,
            }
            self._save_pending(chunk)
            self._deliver(chunk)
            if progress.done:
                log.info("postgres.snapshot_table_done", table=meta.name, chunks=progress.chunks)
                return

    # ---- one chunk: saved, sent, acknowledged, recorded -------------------------------------------

    @property
    def _pending_path(self) -> Any:
        assert self.state.path is not None
        return self.state.path.parent / "snapshot-chunk.pending"

    def _save_pending(self, chunk: dict) -> None:
        tmp = self._pending_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(chunk, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._pending_path)

    def _resend_pending(self) -> None:
        """A chunk saved before a kill: send it again, identical, unless its progress was recorded."""
        path = self._pending_path
        if not path.exists():
            return
        chunk = pickle.loads(path.read_bytes())
        if chunk["chunk"] == self.state.table(chunk["table"]).chunks:
            log.info("postgres.snapshot_chunk_resent", table=chunk["table"], chunk=chunk["chunk"])
            self._deliver(chunk)
        path.unlink(missing_ok=True)

    def _deliver(self, chunk: dict) -> None:
        progress = self.state.table(chunk["table"])
        if chunk["images"]:
            self._send_chunk(chunk["table"], chunk["chunk"], chunk["images"], chunk["key"], chunk["types"])
            progress.chunks += 1
            self.rows += len(chunk["images"])
        progress.last_key = chunk["last_key"]
        progress.done = chunk["done"]
        if self.on_row is not None:
            for image in chunk["images"]:
                self.on_row(chunk["table"], {k: image[k] for k in chunk["key"]}, image)
        self.state.save()
        self._pending_path.unlink(missing_ok=True)

    def _send_chunk(self, table: str, chunk: int, images: list[dict], key: list[str], types: str) -> None:
        xid = f"snapshot:{pg.lsn_str(self.state.slot_lsn)}:{table}:{chunk}"
        scn, ts = self.state.slot_lsn - 1, self.state.snapshot_ts_ms
        self.writer.write(ev.raw_event(xid, ev.BEGIN, 0, scn, ts_ms=ts))
        for seq, image in enumerate(images, start=1):
            self.writer.write(
                ev.raw_event(
                    xid,
                    ev.READ,
                    seq,
                    scn,
                    ts_ms=ts,
                    table=table,
                    key={k: image[k] for k in key},
                    after=image,
                    attrs={pg_columns.ATTR: types, "snapshot": "true"},
                )
            )
        self.writer.write(ev.raw_event(xid, ev.COMMIT, len(images) + 1, scn, ts_ms=ts))
        self.writer.flush()  # the chunk is on the raw topic before its progress is saved
