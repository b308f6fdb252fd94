"""The PostgreSQL capture process: slot and snapshot setup, the replication session, acknowledgement.

- Setup: a slot this capture creates gets an exported snapshot, read by pg_snapshot before
  streaming starts (mode `initial`); `never` skips it, `initial_only` reads the tables and exits.
- Acknowledgement: the confirmed flush LSN sent to the server is the end of a commit (or abort) whose
  events, and every event before them, Kafka has acknowledged (a flush). Between transactions it
  is also the server's reported WAL position, and a non-transactional `pg_logical_emit_message`
  heartbeat gives the server such a position even when nothing of this database changes: the slot
  advances on an idle database and retains no WAL for it.
- Failures: a lost connection is retried with exponential backoff and resumes from the slot. A slot
  that this capture used and that has vanished is lost state (SlotLost), never re-created.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from processor.core import codec
from processor.sources import pg_columns
from processor.sources import pgoutput as pg
from processor.sources.pg_snapshot import Snapshotter
from processor.sources.pg_state import CaptureState
from processor.sources.pg_toast import RowImages, row_key
from processor.sources.postgres import Ack, PgMapper

log = structlog.get_logger(__name__)

SNAPSHOT_MODES = ("initial", "never", "initial_only")
HEARTBEAT_PREFIX = "txbuffer.heartbeat"
PROGRESS_INTERVAL_S = 30.0


class CaptureError(RuntimeError):
    """A setup problem the operator must fix (slot, publication, privilege, wal_level)."""


class SlotLost(CaptureError):
    """The slot this capture streamed from is gone: changes it had not confirmed are lost."""


@dataclass
class CaptureOptions:
    slot: str = "txbuffer"
    publication: str = "txbuffer"
    state_dir: Path = Path(".txbuffer/capture")
    snapshot: str = "initial"
    toast: str = "carry"
    chunk_rows: int = 4096
    create: bool = True
    ack_interval_s: float = 0.5
    heartbeat_interval_s: float = 2.0
    reconnect_delay_s: float = 1.0
    reconnect_max_s: float = 30.0


def check_setup(dsn: str, publication: str, create: bool, tables: list[str] | None = None) -> None:
    """Verify what capture needs (and with create=True, make the publication); CaptureError says what is missing."""
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
                        "FOR ALL TABLES (or drop --no-create)"
                    )
                target = ("FOR TABLE " + ", ".join(tables)) if tables else "FOR ALL TABLES"
                try:
                    cur.execute(f'CREATE PUBLICATION "{publication}" {target}')
                except psycopg2.errors.InsufficientPrivilege as exc:
                    raise CaptureError(
                        f"role {user!r} may not create publication {publication!r} {target}: {exc.pgerror.strip()}"
                    ) from None
                log.info("postgres.publication_created", publication=publication, target=target)
    finally:
        conn.close()


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


class PostgresCapture:
    """Snapshot (per options), then streams the slot onto the raw topic until stop() or a fatal error."""

    def __init__(
        self, dsn: str, writer: Any, options: CaptureOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if options.snapshot not in SNAPSHOT_MODES:
            raise ValueError(f"snapshot must be one of {SNAPSHOT_MODES}, not {options.snapshot!r}")
        self.dsn, self.writer, self.opts, self.clock = dsn, writer, options, clock
        self.state = CaptureState.load(options.state_dir)
        self.images = RowImages(Path(options.state_dir) / "images") if options.toast == "carry" else None
        self.mapper = PgMapper(self._primary_key, self._describe, self.images, options.toast)
        self._catalog: Any = None
        self._stop = threading.Event()
        self.pending: Ack | None = None  # newest end LSN whose events are written, not yet flushed
        self.acked_lsn = 0
        self.acked_commit_lsn = 0
        self.events = 0
        self.snapshot_rows = 0
        self.sessions = 0
        self._last_ack = self._last_heartbeat = self._last_progress = 0.0

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        if self.images is not None:
            self.images.close()
        if self._catalog is not None and not self._catalog.closed:
            self._catalog.close()

    # ---- catalog ------------------------------------------------------------------------------

    def _cat(self) -> Any:
        import psycopg2

        if self._catalog is None or self._catalog.closed:
            self._catalog = psycopg2.connect(self.dsn)
            self._catalog.autocommit = True
        return self._catalog

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._cat().cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def _primary_key(self, relid: int) -> list[str] | None:
        rows = self._query(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)",
            (relid,),
        )
        return [r[0] for r in rows] or None

    def _describe(self, relid: int) -> dict[str, tuple[str, bool]]:
        return {
            name: (type_name, optional) for name, type_name, optional in self._query(pg_columns.CATALOG_QUERY, (relid,))
        }

    def _slot(self) -> tuple[str, bool, int] | None:
        rows = self._query(
            "SELECT plugin, database = current_database(), confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (self.opts.slot,),
        )
        if not rows:
            return None
        plugin, same_db, confirmed = rows[0]
        return plugin, same_db, parse_lsn(confirmed) if confirmed else 0

    # ---- setup: slot and snapshot ----------------------------------------------------------------

    def prepare(self) -> Any:
        """Make sure the slot exists (creating it with the snapshot) and the snapshot is complete.
        Returns the replication connection that created the slot, for the first session, or None."""
        import psycopg2
        import psycopg2.extras

        opts = self.opts
        if opts.snapshot == "initial_only":
            if self.state.snapshot != "done":
                if not self.state.slot_lsn:
                    self.state.slot_lsn = parse_lsn(self._query("SELECT pg_current_wal_lsn()::text")[0][0])
                    self.state.snapshot_ts_ms = int(time.time() * 1000)
                self._snapshot(None)
            return None
        found = self._slot()
        if found is None:
            if self.state.slot == opts.slot:
                raise SlotLost(
                    f"replication slot {opts.slot!r} was dropped: changes it had not confirmed are lost. "
                    f"Not re-creating it; to start over, remove {opts.state_dir} and restart (a new snapshot follows)"
                )
            if not opts.create:
                raise CaptureError(f"replication slot {opts.slot!r} does not exist (drop --no-create to create it)")
            conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
            export = opts.snapshot == "initial"
            cur = conn.cursor()
            cur.execute(
                f"CREATE_REPLICATION_SLOT \"{opts.slot}\" LOGICAL pgoutput (SNAPSHOT '{'export' if export else 'nothing'}')"
            )
            _, consistent, snapshot_name, _ = cur.fetchone()
            self._adopt(parse_lsn(consistent), "running" if export else "skipped")
            log.info("postgres.slot_created", slot=opts.slot, consistent_lsn=consistent, snapshot=snapshot_name)
            if export:
                self._snapshot(snapshot_name)
            return conn
        plugin, same_db, confirmed = found
        if plugin != "pgoutput" or not same_db:
            raise CaptureError(
                f"replication slot {opts.slot!r} uses plugin {plugin!r} or another database; "
                "it must be a pgoutput slot of this database"
            )
        if self.state.slot != opts.slot:
            # A slot made by someone else (or before this state directory): snapshot from here on.
            self._adopt(confirmed, "running" if opts.snapshot == "initial" else "skipped")
            log.info("postgres.slot_adopted", slot=opts.slot, confirmed_lsn=pg.lsn_str(confirmed))
        if self.state.snapshot == "running":
            self._snapshot(None)  # resumed in a fresh snapshot: the stream replays what changed since
        return None

    def _adopt(self, lsn: int, snapshot: str) -> None:
        self.state.slot, self.state.slot_lsn, self.state.snapshot = self.opts.slot, lsn, snapshot
        self.state.snapshot_ts_ms = int(time.time() * 1000)
        self.state.tables = {}
        self.state.save()

    def _snapshot(self, snapshot_name: str | None) -> None:
        import psycopg2

        conn = psycopg2.connect(self.dsn)
        try:
            images, lsn = self.images, self.state.slot_lsn - 1
            on_row = None
            if images is not None:
                on_row = lambda table, key, image: images.snapshot_image(row_key(table, key), image, lsn)  # noqa: E731
            snap = Snapshotter(conn, self.writer, self.state, self.opts.publication, self.opts.chunk_rows, on_row)
            self.snapshot_rows += snap.run(snapshot_name)
        finally:
            conn.close()
        self.state.snapshot = "done"
        self.state.save()

    # ---- streaming --------------------------------------------------------------------------------

    def run(self) -> None:
        """Snapshot per the mode, then stream until stop(). Raises SlotLost / CaptureError when fatal."""
        import psycopg2
        import psycopg2.extras

        conn = self.prepare()
        if self.opts.snapshot == "initial_only":
            return
        delay = self.opts.reconnect_delay_s
        while not self._stop.is_set():
            started = None
            try:
                if conn is None:
                    if self._slot() is None:
                        raise SlotLost(f"replication slot {self.opts.slot!r} was dropped while capturing")
                    conn = psycopg2.connect(self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
                started = self.clock()
                self._session(conn)
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                if self._stop.is_set():
                    break
                if started is not None and self.clock() - started > 30:
                    delay = self.opts.reconnect_delay_s  # it had been streaming: start the backoff over
                log.warning(
                    "postgres.connection_lost",
                    error=str(exc).strip(),
                    acked=pg.lsn_str(self.acked_lsn),
                    retry_in_s=round(delay, 2),
                )
                self._stop.wait(delay)
                delay = min(delay * 2, self.opts.reconnect_max_s)
            finally:
                self.mapper.reset_session()
                self.pending = None  # the server re-sends everything after the confirmed LSN
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # already broken
                        pass
                conn = None
                if self._catalog is not None:
                    self._catalog.close()  # a broken server breaks it too; reopened on demand
                    self._catalog = None

    def _session(self, conn: Any) -> None:
        found = self._slot()
        if found is None:
            raise SlotLost(f"replication slot {self.opts.slot!r} was dropped while capturing")
        confirmed = found[2]
        self.acked_lsn = max(self.acked_lsn, confirmed)
        if self.images is not None:
            dropped = self.images.rewind_to(confirmed)
            if dropped:
                log.info("postgres.images_rewound", to=pg.lsn_str(confirmed), versions=dropped)
        cur = conn.cursor()
        cur.start_replication(
            slot_name=self.opts.slot,
            decode=False,
            options={
                "proto_version": "2",
                "publication_names": self.opts.publication,
                "streaming": "on",
                "messages": "true",
            },
        )
        self.sessions += 1
        log.info(
            "postgres.streaming", slot=self.opts.slot, publication=self.opts.publication, from_lsn=pg.lsn_str(confirmed)
        )
        while not self._stop.is_set():
            msg = cur.read_message()
            if msg is not None:
                produced, ack = self.mapper.handle(msg.payload, msg.data_start, int(time.time() * 1000))
                for event in produced:
                    self.writer.write_encoded(event["xid"], codec.encode_raw(event))
                self.events += len(produced)
                if ack is not None:
                    self.pending = ack
            else:
                select.select([conn], [], [], 0.2)
            self._maybe_ack(cur)
        self._ack(cur)  # a clean stop acknowledges what is durable

    def _maybe_ack(self, cur: Any) -> None:
        now = self.clock()
        if now - self._last_ack >= self.opts.ack_interval_s:
            if self.pending is None and self.mapper.idle and cur.wal_end > self.acked_lsn:
                # Between transactions everything up to the server's reported position has arrived.
                self.pending = Ack(cur.wal_end, None)
            self._ack(cur)
        if now - self._last_heartbeat >= self.opts.heartbeat_interval_s:
            self._last_heartbeat = now
            if self.acked_commit_lsn:
                # No COMMIT below an acknowledged commit can come again, even after a restart.
                self.writer.heartbeat(self.acked_commit_lsn, ts_ms=int(time.time() * 1000))
            if self.mapper.idle:
                # A WAL position in this database even when nothing of it changes.
                self._query(f"SELECT pg_logical_emit_message(false, '{HEARTBEAT_PREFIX}', '')::text")
        if now - self._last_progress >= PROGRESS_INTERVAL_S:
            self._last_progress = now
            stats = self.mapper.stats
            log.info(
                "postgres.progress",
                events=self.events,
                acked_lsn=pg.lsn_str(self.acked_lsn),
                toast_carried=stats["toast_carried"],
                toast_placeholder=stats["toast_placeholder"],
            )

    def _ack(self, cur: Any) -> None:
        self._last_ack = self.clock()
        pending, self.pending = self.pending, None
        if pending is None:
            cur.send_feedback(reply=False)  # a standby status update keeps the session alive
            return
        self.writer.flush()  # every event up to this end LSN is now on the raw topic
        cur.send_feedback(write_lsn=pending.end_lsn, flush_lsn=pending.end_lsn, force=True)
        self.acked_lsn = max(self.acked_lsn, pending.end_lsn)
        if pending.commit_lsn is not None:
            self.acked_commit_lsn = max(self.acked_commit_lsn, pending.commit_lsn)
        if self.images is not None:
            self.images.acknowledge(self.acked_lsn)
        log.debug("postgres.acked", lsn=pg.lsn_str(pending.end_lsn))
