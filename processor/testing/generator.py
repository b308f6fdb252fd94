"""A seeded synthetic workload: one global source log of RawEvents with its expected output.

The generator plays a small database. It keeps each table's rows, lets K transactions stay open
at once (interleaved at random), and takes a row lock for every row a transaction touches, so the
before images are right and the tables' final state is simply "every committed change applied in
commit order". Because it decides every outcome itself (commit or rollback, which savepoint is
rolled back, which change is undone), it knows the surviving changes by construction and streams
them to the expected-output files (processor.expected) as each transaction commits.

What it produces, per transaction: an optional BEGIN (some are implicit), INSERT/UPDATE/DELETE with
deletes and re-inserts of the same keys, LOB/XML/long-string fragments after an INSERT/UPDATE of the
same row, nested savepoints with ROLLBACK_TO_SAVEPOINT (sometimes to an outer one), PostgreSQL-style
subtransactions (aborted or kept), Oracle undo rows, DDL, repeated BEGINs (restarts), re-delivered
events (same seq) and late duplicates of COMMIT, then COMMIT, ROLLBACK or SUBTXN_ABORT(subxid=xid).
It never writes TRUNCATE: emptying a table under other open transactions' row locks has no
consistent final state in this model; the reference model's unit tests cover TRUNCATE instead.

Memory is bounded by the open transactions and the key space, never by the run length. A huge
transaction (huge_txn_size) spills its expected changes to a temporary file; it has no partial
rollbacks, which the ordinary transactions exercise.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from processor.core import events
from processor.core.events import (
    BEGIN,
    COMMIT,
    DDL,
    DELETE,
    HEARTBEAT,
    INSERT,
    READ,
    ROLLBACK,
    ROLLBACK_TO_SAVEPOINT,
    SAVEPOINT,
    SUBTXN_ABORT,
    UPDATE,
)
from processor.testing.expected import ExpectedWriter, dumps, key_string
from processor.testing.tables import (
    BULK_TABLE,
    TABLES,
    TableSpec,
    lob_fragment,
    long_tailed_size,
    new_row,
    row_key,
    updated_row,
)

BASE_TS_MS = 1_700_000_000_000
USERS = ("alice", "bob", "etl", "batch", "sys")
CLIENTS = ("app-server", "psql", "sqlplus", "loader")
UNDO_OP = {INSERT: DELETE, DELETE: INSERT, UPDATE: UPDATE}
ENVELOPE = events.ENVELOPE_OP


_TEMPLATE = events.raw_event("", BEGIN, 0, 0)  # its empty attrs dict is shared: events are read-only


class _Txn:
    __slots__ = (
        "changes",
        "client",
        "commits",
        "first_touch",
        "huge",
        "index",
        "remaining",
        "savepoints",
        "seq",
        "spill",
        "subxid",
        "subxid_aborts",
        "subxid_start",
        "table_counts",
        "user",
        "xid",
    )

    def __init__(self, xid: str, remaining: int, commits: bool, huge: bool, user: str, client: str):
        self.xid, self.remaining, self.commits, self.huge = xid, remaining, commits, huge
        self.user, self.client = user, client
        self.seq = 0
        self.subxid: str | None = None
        self.subxid_start = 0
        self.subxid_aborts = False
        self.savepoints: list[tuple[str, int]] = []
        # surviving changes in seq order: (seq, table, pk, prior row, expected JSON body)
        self.changes: list[tuple[int, str, object, dict | None, str]] = []
        self.first_touch: dict[tuple[str, object], dict | None] = {}  # committed row at first touch
        self.table_counts: dict[str, int] = {}
        self.spill = None  # huge transaction: expected bodies go to a temporary file
        self.index = 0


class WorkloadGenerator:
    """Iterate for RawEvent dicts in source-log order; expected files are complete once iteration ends.

    n_events is the budget: after it is reached no transaction starts and open ones end at their
    next turn (a huge transaction still completes), so slightly more events come out. HEARTBEAT
    events have xid "" and go to every partition (RawTopicWriter.heartbeat, or fan_out()).
    """

    def __init__(
        self,
        n_events: int,
        *,
        open_txns: int = 50,
        seed: int = 0,
        rollback_rate: float = 0.1,
        savepoint_rate: float = 0.03,
        subtxn_abort_rate: float = 0.01,
        undo_rate: float = 0.02,
        lob_rate: float = 0.2,
        ddl_rate: float = 0.001,
        restart_rate: float = 0.001,
        duplicate_rate: float = 0.002,
        implicit_begin_rate: float = 0.05,
        tables: Iterable[str] = tuple(TABLES),
        keys_per_table: int = 10_000,
        huge_txn_size: int = 0,
        heartbeat_every: int = 1000,
        snapshot_rows: int = 20,
        expected_dir: str | Path | None = None,
        xid_prefix: str | None = None,
    ):
        self.params = {k: v for k, v in locals().items() if k not in ("self", "expected_dir", "tables")}
        self.params["tables"] = list(tables)
        self.n_events, self.open_target, self.seed = n_events, max(1, open_txns), seed
        self.rollback_rate, self.savepoint_rate, self.subtxn_rate = rollback_rate, savepoint_rate, subtxn_abort_rate
        self.undo_rate, self.lob_rate, self.ddl_rate = undo_rate, lob_rate, ddl_rate
        self.restart_rate, self.duplicate_rate, self.implicit_rate = restart_rate, duplicate_rate, implicit_begin_rate
        self.specs = [TABLES[name] for name in tables]
        self.keys_per_table, self.huge_size, self.heartbeat_every = keys_per_table, huge_txn_size, heartbeat_every
        self.snapshot_rows = snapshot_rows
        self.xid_prefix = f"s{seed}-" if xid_prefix is None else xid_prefix
        self.rng = random.Random(seed)
        self.rows: dict[str, dict[object, dict]] = {s.name: {} for s in [*self.specs, BULK_TABLE]}
        self.locks: dict[tuple[str, object], _Txn] = {}
        self.open: list[_Txn] = []
        self.huge: _Txn | None = None
        self.scn = 0
        self.emitted = 0
        self.started = self.committed = self.rolled_back = self.changes = self.heartbeats = 0
        self.ddl_counter = 0
        self.writer = ExpectedWriter(expected_dir) if expected_dir is not None else None

    # ---- the main loop -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict]:
        rng = self.rng
        if self.snapshot_rows > 0:
            yield from self._snapshot()
        if self.huge_size > 0:
            yield from self._start(huge=True)
        while True:
            draining = self.emitted >= self.n_events
            while not draining and len(self.open) < self.open_target:
                yield from self._start(huge=False)
            if not self.open:
                break
            if self.huge is not None and rng.random() < 0.5:
                txn = self.huge
            else:
                txn = self.open[int(rng.random() * len(self.open))]
            if txn.remaining <= 0 or (draining and not txn.huge):
                yield from self._finish(txn)
            else:
                yield from self._step(txn)
        if self.heartbeat_every:
            yield self._heartbeat()
        if self.writer is not None:
            self.writer.close(self.summary())

    def _emit(self, txn: _Txn, op: str, **fields: object) -> dict:
        """A RawEvent of txn at the next seq and scn. Called once per yielded event (heartbeat cadence)."""
        self.scn += 1
        txn.seq += 1
        ev = _TEMPLATE.copy()
        ev.update(
            xid=txn.xid,
            op=op,
            seq=txn.seq,
            scn=self.scn,
            ts_ms=BASE_TS_MS + self.scn,
            user=txn.user,
            client=txn.client,
            subxid=txn.subxid,
        )
        ev.update(fields)
        self.emitted += 1
        return ev

    def _maybe_heartbeat(self) -> Iterator[dict]:
        if self.heartbeat_every and self.emitted % self.heartbeat_every == 0:
            yield self._heartbeat()

    def _heartbeat(self) -> dict:
        self.heartbeats += 1
        ev = _TEMPLATE.copy()
        ev.update(op=HEARTBEAT, scn=self.scn, ts_ms=BASE_TS_MS + self.scn)
        return ev

    def _out(self, ev: dict) -> Iterator[dict]:
        yield ev
        yield from self._maybe_heartbeat()

    # ---- transaction lifecycle ---------------------------------------------------------------

    def _start(self, huge: bool) -> Iterator[dict]:
        rng = self.rng
        xid = f"{self.xid_prefix}{self.started}"
        self.started += 1
        size = self.huge_size if huge else long_tailed_size(rng)
        commits = huge or rng.random() >= self.rollback_rate
        txn = _Txn(
            xid, size, commits, huge, USERS[int(rng.random() * len(USERS))], CLIENTS[int(rng.random() * len(CLIENTS))]
        )
        if huge:
            self.huge = txn
            txn.spill = tempfile.TemporaryFile("w+", encoding="utf-8")
        txn.index = len(self.open)
        self.open.append(txn)
        if huge or rng.random() >= self.implicit_rate:
            yield from self._out(self._emit(txn, BEGIN))

    def _snapshot(self) -> Iterator[dict]:
        """An initial snapshot, as a capture emits it before streaming: one committed transaction of
        READ rows (Debezium op "r") for the first keys of each table, seen by later transactions."""
        txn = _Txn(f"{self.xid_prefix}snapshot", 0, True, False, USERS[0], CLIENTS[0])
        txn.index = len(self.open)
        self.open.append(txn)
        yield from self._out(self._emit(txn, BEGIN))
        for spec in self.specs:
            for pk in range(min(self.snapshot_rows, self.keys_per_table)):
                key, after = row_key(spec, pk), new_row(self.rng, spec, pk)
                self.locks[(spec.name, pk)] = txn
                txn.first_touch[(spec.name, pk)] = None
                row_id = f"{spec.name}#{pk}" if spec.row_ids else None
                ev = self._emit(txn, READ, table=spec.name, key=key, before=None, after=after, row_id=row_id)
                yield from self._out(ev)
                self._record(txn, ev, spec.name, pk, None, key, None, after, None)
                self._set_row(spec.name, pk, after)
        yield from self._finish(txn)

    def _close(self, txn: _Txn) -> None:
        last = self.open.pop()  # swap-remove keeps picking O(1)
        if last is not txn:
            self.open[txn.index] = last
            last.index = txn.index
        for key in txn.first_touch:
            del self.locks[key]
        if txn is self.huge:
            self.huge = None

    def _finish(self, txn: _Txn) -> Iterator[dict]:
        rng = self.rng
        self._close(txn)
        if txn.commits:
            commit = self._emit(txn, COMMIT)
            self.committed += 1
            self.changes += sum(txn.table_counts.values())
            if self.writer is not None:
                self.writer.write_transaction(
                    txn.xid, commit["scn"], commit["ts_ms"], commit["thread"], self._bodies(txn), txn.table_counts
                )
            if txn.spill is not None:
                txn.spill.close()
            yield from self._out(commit)
            if rng.random() < self.duplicate_rate:
                self.emitted += 1
                yield from self._out(commit)  # re-delivered after the end: a late event, dropped downstream
            return
        self._revert_to(txn, -1)
        for key, row in txn.first_touch.items():
            self._set_row(key[0], key[1], row)
        self.rolled_back += 1
        if rng.random() < 0.1:  # PostgreSQL may abort the top-level transaction as a subtransaction
            yield from self._out(self._emit(txn, SUBTXN_ABORT, subxid=txn.xid))
        else:
            yield from self._out(self._emit(txn, ROLLBACK))

    def _bodies(self, txn: _Txn) -> Iterator[tuple[int, str]]:
        if txn.spill is None:
            return ((seq, body) for seq, _, _, _, body in txn.changes)
        txn.spill.seek(0)
        return (_split_spilled(line) for line in txn.spill)

    def _step(self, txn: _Txn) -> Iterator[dict]:
        rng = self.rng
        txn.remaining -= 1
        if txn.huge:
            yield from self._row_change(txn, BULK_TABLE)
            return
        u = rng.random()
        if u < self.savepoint_rate:
            yield from self._savepoint(txn)
        elif u < self.savepoint_rate + self.subtxn_rate:
            yield from self._subtransaction(txn)
        elif u < self.savepoint_rate + self.subtxn_rate + self.restart_rate:
            self._revert_to(txn, -1)  # the source re-sends BEGIN: everything so far is dropped
            txn.savepoints.clear()
            txn.subxid = None
            yield from self._out(self._emit(txn, BEGIN))
        elif u < self.savepoint_rate + self.subtxn_rate + self.restart_rate + self.ddl_rate:
            yield from self._ddl(txn)
        else:
            yield from self._row_change(txn, self.specs[int(rng.random() * len(self.specs))])

    # ---- partial rollback --------------------------------------------------------------------

    def _savepoint(self, txn: _Txn) -> Iterator[dict]:
        rng = self.rng
        if txn.savepoints and rng.random() < 0.4:
            # roll back to any savepoint on the stack, so outer ones drop inner ones too
            name = txn.savepoints[int(rng.random() * len(txn.savepoints))][0]
            index = max(i for i, (n, _) in enumerate(txn.savepoints) if n == name)
            self._revert_to(txn, txn.savepoints[index][1])
            del txn.savepoints[index + 1 :]
            yield from self._out(self._emit(txn, ROLLBACK_TO_SAVEPOINT, savepoint=name))
            return
        name = f"sp{int(rng.random() * 4)}"  # few names, so a name is sometimes declared twice
        ev = self._emit(txn, SAVEPOINT, savepoint=name)
        txn.savepoints.append((name, ev["seq"]))
        yield from self._out(ev)

    def _subtransaction(self, txn: _Txn) -> Iterator[dict]:
        if txn.subxid is None:  # open one; half of them end aborted
            txn.subxid = f"{txn.xid}.{txn.seq}"
            txn.subxid_start = txn.seq
            txn.subxid_aborts = self.rng.random() < 0.5
            return
        subxid, txn.subxid = txn.subxid, None
        if txn.subxid_aborts:
            self._revert_to(txn, txn.subxid_start)
            yield from self._out(self._emit(txn, SUBTXN_ABORT, subxid=subxid))

    def _revert_to(self, txn: _Txn, seq: int) -> None:
        """Drop the surviving changes after seq, restoring the rows they touched (newest first)."""
        changes = txn.changes
        while changes and changes[-1][0] > seq:
            _, table, pk, prior, _ = changes.pop()
            txn.table_counts[table] -= 1
            if pk is not None:
                self._set_row(table, pk, prior)

    # ---- changes -----------------------------------------------------------------------------

    def _set_row(self, table: str, pk: object, row: dict | None) -> None:
        if row is None:
            self.rows[table].pop(pk, None)
        else:
            self.rows[table][pk] = row

    def _ddl(self, txn: _Txn) -> Iterator[dict]:
        spec = self.specs[int(self.rng.random() * len(self.specs))]
        self.ddl_counter += 1
        ddl = f"ALTER TABLE {spec.name} ADD (c{self.ddl_counter} VARCHAR2(20))"
        ev = self._emit(txn, DDL, table=spec.name, ddl=ddl)
        self._record(txn, ev, spec.name, None, None, None, None, None, ddl)
        yield from self._out(ev)

    def _row_change(self, txn: _Txn, spec: TableSpec) -> Iterator[dict]:
        rng = self.rng
        keys = self.keys_per_table if spec is not BULK_TABLE else max(1, min(self.huge_size, 50_000))
        for _ in range(5):  # skip rows locked by other transactions, as the database would make us wait
            pk = int(rng.random() * keys)
            owner = self.locks.get((spec.name, pk))
            if owner is None or owner is txn:
                break
        else:
            return
        lock_key = (spec.name, pk)
        current = self.rows[spec.name].get(pk)
        if owner is None:
            self.locks[lock_key] = txn
            txn.first_touch[lock_key] = current
        key = row_key(spec, pk)
        if current is None:
            op, before, after = INSERT, None, new_row(rng, spec, pk)
        elif rng.random() < 0.25:
            op, before, after = DELETE, current, None
        else:
            op, before, after = UPDATE, current, updated_row(rng, spec, current)
        row_id = f"{spec.name}#{pk}" if spec.row_ids else None
        ev = self._emit(txn, op, table=spec.name, key=key, before=before, after=after, row_id=row_id)
        yield from self._out(ev)
        if rng.random() < self.duplicate_rate:
            self.emitted += 1
            yield from self._out(ev)  # re-delivered: same seq, replaces itself
        merged = after
        lob = spec.lob_column
        if lob is not None and op != DELETE and rng.random() < self.lob_rate:
            merged = dict(after)
            for _ in range(1 + int(rng.random() * 3)):
                fragment, merged[lob] = lob_fragment(rng, spec, merged.get(lob))
                yield from self._out(
                    self._emit(
                        txn, fragment.pop("op"), table=spec.name, key=key, row_id=row_id, lob_column=lob, **fragment
                    )
                )
        if txn.spill is not None:
            txn.spill.write(f"{ev['seq']}\t{self._body(txn, ev, spec.name, key, before, merged, None)}\n")
            txn.table_counts[spec.name] = txn.table_counts.get(spec.name, 0) + 1
        else:
            self._record(txn, ev, spec.name, pk, current, key, before, merged, None)
        self._set_row(spec.name, pk, merged)
        if row_id is not None and rng.random() < self.undo_rate and txn.spill is None:
            # Oracle rolled the statement back: an undo row (the inverse change) with the same row_id
            self._revert_to(txn, ev["seq"] - 1)
            yield from self._out(
                self._emit(
                    txn, UNDO_OP[op], table=spec.name, key=key, before=merged, after=before, row_id=row_id, undo=True
                )
            )

    def _record(
        self,
        txn: _Txn,
        ev: dict,
        table: str,
        pk: object,
        prior: dict | None,
        key: dict | None,
        before: dict | None,
        after: dict | None,
        ddl: str | None,
    ) -> None:
        txn.changes.append((ev["seq"], table, pk, prior, self._body(txn, ev, table, key, before, after, ddl)))
        txn.table_counts[table] = txn.table_counts.get(table, 0) + 1

    @staticmethod
    def _body(
        txn: _Txn, ev: dict, table: str, key: dict | None, before: dict | None, after: dict | None, ddl: str | None
    ) -> str:
        return dumps(
            {
                "xid": txn.xid,
                "seq": ev["seq"],
                "table": table,
                "op": ENVELOPE[ev["op"]],
                "key": key,
                "before": before,
                "after": after,
                "ddl": ddl,
            }
        )

    def summary(self) -> dict:
        final_state = {
            table: {key_string(row_key(self._spec(table), pk)): row for pk, row in rows.items()}
            for table, rows in self.rows.items()
            if rows
        }
        return {
            "seed": self.seed,
            "params": self.params,
            "events": self.emitted,
            "heartbeats": self.heartbeats,
            "started": self.started,
            "committed": self.committed,
            "rolled_back": self.rolled_back,
            "changes": self.changes,
            "last_scn": self.scn,
            "final_state": final_state,
        }

    def _spec(self, table: str) -> TableSpec:
        return BULK_TABLE if table == BULK_TABLE.name else TABLES[table]


def generate(n_events: int, **params: object) -> Iterator[dict]:
    """RawEvent dicts in source-log order; see WorkloadGenerator for the parameters."""
    return iter(WorkloadGenerator(n_events, **params))


def _split_spilled(line: str) -> tuple[int, str]:
    seq, body = line.rstrip("\n").split("\t", 1)
    return int(seq), body
