"""The transaction engine: pure transaction semantics over a Store, no Kafka, no clocks.

One PartitionEngine per raw-topic partition. apply() takes one raw record and returns actions
(processor/core/actions.py: dead-letter this record, this transaction committed, this transaction
finished); the runtime performs them. The rules are those of docs/semantics.md.
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import Any

from processor.core import codec, incomplete, keys, stored
from processor.core import events as ev
from processor.core.actions import Action, Committed, DeadLetter, Finished
from processor.core.construct import constructor
from processor.core.filters import Filters
from processor.core.stats import Stats
from processor.core.store import Batch, Store
from processor.core.txn import ABANDONED, COMMITTED, FILTERED, ROLLED_BACK, Commit, Txn
from processor.core.validation import misplaced, validate

__all__ = ["Committed", "DeadLetter", "Filters", "Finished", "PartitionEngine", "Stats", "validate"]

# 3: buffered events stored as their raw bytes (stored.py); 4: Txn metadata as a JSON array;
# 5: staged transactions outlive their batch ("replay_to" in the position record), and the
# completed index is its FIFO keys alone (the outcome is their value; no DONE keys); 6: the FIFO
# is one record per checkpoint, not a key per finished transaction (keys.fifo_batch_value).
FORMAT_VERSION = 6
# A staged transaction is spilled once it began this many offsets before the checkpoint: this bounds
# both what staging holds in memory (at most this many records plus one poll batch, per partition)
# and what a restart re-reads to rebuild it. 100k transactions open at once (the bench's many_open,
# ~75k offsets per partition) were spilled and read back at 20k: 67-89k events/s; 110k at 50k, and
# 113-116k at 100k, which doubles the re-read for little more.
STAGE_HORIZON = 50_000
# ...and once it has been open this long in source time, so that a transaction that stays open (the
# one `txbuffer status` and the metrics are watched for) is in the store, not only in memory.
STAGE_MAX_AGE_MS = 10_000
# Ops that read a transaction's buffered events back from the store (a staged one is spilled first).
_READS_BACK = frozenset(ev.FRAGMENT_OPS) | {ev.ROLLBACK_TO_SAVEPOINT, ev.SUBTXN_ABORT}
# The objects built once per transaction, built in C on the compiled backend (construct.py).
_new_txn, _new_commit = constructor(Txn), constructor(Commit)
_committed, _finished = constructor(Committed), constructor(Finished)


class PartitionEngine:
    """Transaction state of one raw partition. Not thread-safe; one loop drives it."""

    def __init__(
        self,
        partition: int,
        store: Store,
        filters: Filters = Filters(),
        min_completed: int = 10000,
        stage_horizon: int = STAGE_HORIZON,
    ):
        self.partition = partition
        self.store = store
        self.filters = filters
        self._identity_filtered = filters.filters_identity()  # else no transaction is ever filtered by it
        self.min_completed = min_completed
        # In the order the transactions began (first_offset ascending), so the oldest is the first:
        # low_watermark and oldest_open run per batch and must not scan 100k open transactions. A
        # restore breaks the order (the store's are loaded, then the staged ones re-read from
        # earlier offsets); _open_ordered is False until oldest_open sorts them once.
        self.open: dict[str, Txn] = {}
        self._open_ordered = True
        self.pending: OrderedDict[str, Txn] = OrderedDict()  # committed, outputs not yet acknowledged
        self._stored_pending = 0  # how many of them are in the store (not staged)
        self._commit_order_check = False  # one may be stored after a staged one (_spill_for_commit_order)
        self.completed: dict[str, tuple[int, str]] = {}
        # (offset, xid, FIFO batch, outcome) in completion order. The transactions finished between
        # two checkpoints go to the store as one FIFO batch record, numbered _fifo_batch: a key per
        # transaction cost RocksDB a memtable entry each, 13% of the steady loop in process (session 52).
        self.fifo: deque[tuple[int, str, int, str]] = deque()
        self._fifo_batch = 0  # the number of the batch the entries finished since the last checkpoint join
        self._fifo_unwritten = 0  # how many they are: the tail of fifo
        self.next_offset = 0
        self.watermark = -1
        self.last_ts_ms = 0
        # xid -> [reason, markers]: open transactions that lost an event at the source (incomplete.py).
        # Persisted in the position record: it is written in the same batch as the transactions.
        self.incomplete: dict[str, list[Any]] = {}
        self.stats = Stats()
        self.batch: Batch = store.batch()
        self._dirty: set[str] = set()
        # xids whose metadata the store holds (a finished one's is deleted). After a restore, and until
        # the re-read below is done (no checkpoint changes it meanwhile), these are the transactions
        # the store knows.
        self._meta_stored: set[str] = set()
        self._pos_dirty = False
        self._ahead = False  # the store holds the AHEAD mark (flush_data) until the next checkpoint
        self._staging: list[Txn] = []  # transactions whose writes may be staged (see "staging" below)
        self.stage_horizon = stage_horizon
        # After a restore: records below _replay_to are re-read only to rebuild the transactions that
        # were staged (not in the store); those of transactions the store knows are skipped.
        self._replay_to = 0
        # The compiled lane applies plain changes; a table filter sends every record to apply().
        self._lane = None if filters.include_tables or filters.exclude_tables else codec.buffer_changes

    # ------------------------------------------------------------------ apply

    def apply_records(self, records: Sequence[Any]) -> list[Action]:
        """Apply one partition's consumed records in order; return the actions they cause.

        A record is anything with offset(), key() and value() (a consumer's message); records is a
        list of them, or the native fetch's RecordRun, which the lane reads in place. Records
        below next_offset were applied already and are skipped. Runs of plain changes of open
        transactions go through the compiled lane (codec.buffer_changes), which writes exactly
        what _change writes; every other record goes through apply().
        """
        actions: list[Action] = []
        lane, n, i = self._lane, len(records), 0
        while i < n:
            if lane is not None and self.next_offset >= self._replay_to:
                i = lane(self, records, i, self.open, self.batch.put, actions)
                if i == n:
                    break
            record = records[i]
            i += 1
            offset = record.offset()
            if offset >= self.next_offset:
                actions.extend(self.apply(offset, record.key(), record.value()))
        return actions

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> list[Action]:
        """Apply one raw record at `offset`; return the actions it causes."""
        self.next_offset = offset + 1
        self._pos_dirty = True
        self.stats.events += 1
        replaying = offset < self._replay_to
        try:
            e = codec.decode_raw_view(value or b"")  # compiled: bytes validated, fields decoded on access
        except ev.DecodeError as exc:
            return [] if replaying else self._dead(offset, key, value, str(exc))
        problem = validate(e) or misplaced(key, e["xid"])
        if problem:
            return [] if replaying else self._dead(offset, key, value, problem)  # dead-lettered when first read
        if replaying and (e["op"] == ev.HEARTBEAT or e["xid"] in self._meta_stored or e["xid"] in self.completed):
            return []  # the store holds its effect already
        return self.apply_decoded(offset, key, value or b"", e, e.body_at)

    def apply_decoded(
        self, offset: int, key: bytes | None, value: bytes, e: codec.RawFields, body_at: int
    ) -> list[Action]:
        op = e["op"]
        if e["ts_ms"] > self.last_ts_ms:
            self.last_ts_ms = e["ts_ms"]  # source time: transaction ages are measured in it
        if op == ev.HEARTBEAT:
            self._advance_watermark(e["scn"])
            return []
        xid = e["xid"]
        txn = self.open.get(xid)
        if txn is None:
            if xid in self.completed or xid in self.pending:
                self.stats.late_events += 1
                if op == ev.COMMIT and self.completed.get(xid, (0, ""))[1] == ABANDONED:
                    # Its beginning is gone: report it, never emit half a transaction.
                    return self._dead(offset, key, value, f"COMMIT for abandoned transaction {xid}")
                return []
            if op == ev.ROLLBACK:
                self._advance_watermark(e["scn"])
                self.stats.rolled_back += 1
                return [self._finish(xid, offset, ROLLED_BACK)]
            txn = self._open(xid, offset, e["ts_ms"])
        elif op == ev.BEGIN:
            # The source re-sent the transaction from its start: forget what we have. The first
            # attempt stays in the log, so the low watermark stays at its start: a rebuild from a
            # later offset would re-read that attempt's tail without its savepoints.
            # The xid keeps its place in `open` (_open assigns to the existing key), which is its
            # first attempt's: open stays in first-offset order.
            self._drop_all(txn)
            self._forget_incomplete(xid)  # the new attempt brings its own markers
            self.stats.restarts += 1
            first_offset = txn.first_offset
            txn = self._open(xid, offset, e["ts_ms"])
            txn.first_offset = first_offset
            # Straight to the store (nothing is staged yet, so nothing is written): staging is in
            # first-offset order (_spill_due) and this attempt's is earlier than the last ones'. If the
            # first attempt was in the store, this one's metadata replaces it there.
            self._spill(txn)

        if not txn.identity_seen and (e["user"] is not None or e["client"] is not None):
            self._identify(txn, e["user"], e["client"])
        if op == ev.BEGIN:
            return []
        if txn.staged is not None and (op in _READS_BACK or (op in ev.CHANGE_OPS and e["undo"])):
            self._spill(txn)  # these read the transaction's buffered events back from the store

        if op in ev.CHANGE_OPS:
            return self._change(txn, offset, key, value, e, body_at)
        if op in ev.FRAGMENT_OPS:
            return self._fragment(txn, offset, key, value, e, body_at)
        if op == ev.COMMIT:
            return self._commit(txn, offset, e["scn"], e["ts_ms"], e["thread"])
        if op == ev.ROLLBACK:
            return [self._rollback(txn, offset, e["scn"])]
        if txn.filtered and op in (ev.SAVEPOINT, ev.ROLLBACK_TO_SAVEPOINT):
            return []  # nothing of it is buffered: partial rollbacks have nothing to act on
        if op == ev.SAVEPOINT:
            if e["savepoint"] == incomplete.MARK:
                return self._mark_incomplete(txn, e)
            txn.savepoints.append((e["savepoint"], e["seq"]))
            self._dirty.add(xid)
            return []
        if op == ev.ROLLBACK_TO_SAVEPOINT:
            return self._rollback_to_savepoint(txn, offset, key, value, e)
        if op == ev.SUBTXN_ABORT:
            return self._subtxn_abort(txn, offset, e)
        raise AssertionError(f"unhandled op {op}")  # the schema's enum makes this unreachable

    # ------------------------------------------------------------------ ops

    # _open, _commit and _rollback are also called by the compiled lane (codec.buffer_changes), for a
    # BEGIN of a new transaction (with its user and client), and a COMMIT or ROLLBACK of an open one.

    def _open(
        self,
        xid: str,
        offset: int,
        ts_ms: int,
        user: str | None = None,
        client: str | None = None,
        prefix: bytes | None = None,
    ) -> Txn:
        # Positional (partition, xid, first_offset, prefix, first_ts_ms, user, client, identity_seen),
        # the prefix made here: one is built per transaction, and keywords and __post_init__ made it
        # twice as expensive. A BEGIN that names its user or client identifies the transaction here,
        # as _identify does, unless an identity filter may drop it: then _identify decides.
        identified = user is not None or client is not None
        filter_identity = identified and self._identity_filtered
        if prefix is None:  # else the lane built it (keys.txn_prefix's bytes)
            prefix = keys.txn_prefix(self.partition, xid)
        if identified and not filter_identity:
            txn = _new_txn(self.partition, xid, offset, prefix, ts_ms, user, client, True)
        else:
            txn = _new_txn(self.partition, xid, offset, prefix, ts_ms)
        txn.staged = {}
        self._staging.append(txn)
        self.open[xid] = txn
        # Not marked dirty: a staged transaction's metadata is not stored (checkpoint), and _spill
        # marks it when it goes to the store. _identify and _commit mark only a spilled one.
        if filter_identity:
            self._identify(txn, user, client)
        return txn

    def _identify(self, txn: Txn, user: str | None, client: str | None) -> None:
        txn.identity_seen = True
        txn.user, txn.client = user, client
        if self._identity_filtered and self.filters.identity_excluded(txn.user, txn.client):
            txn.filtered = True
            self._drop_all(txn)
        if txn.staged is None:
            self._dirty.add(txn.xid)

    def _change(
        self, txn: Txn, offset: int, key: bytes | None, value: bytes, e: codec.RawFields, body_at: int
    ) -> list[Action]:
        if e["undo"]:
            return self._undo(txn, offset, key, value, e)
        if txn.filtered or self.filters.table_excluded(e["table"]):
            self.stats.filtered_changes += 1
            return []
        seq = e["seq"]
        put = self.batch.put if txn.staged is None else txn.staged.__setitem__
        put(keys.event_key(txn.prefix, seq), value)  # the raw bytes: see stored.py
        sb = keys.seq_bytes(seq)
        if e["row_id"] and e["op"] in ev.ROW_OPS:
            put(keys.row_prefix(txn.prefix, e["row_id"]) + sb, b"")
        if e["subxid"] is not None:
            put(keys.subxid_prefix(txn.prefix, e["subxid"]) + sb, b"")
        txn.events += 1
        txn.bytes += len(value)
        self.stats.changes += 1
        return []

    def _newest_surviving(self, txn: Txn, row_id: str, before_seq: int) -> int | None:
        """Seq of the newest buffered change with this row_id and seq < before_seq: O(log n) seeks."""
        self.flush_data()
        prefix = keys.row_prefix(txn.prefix, row_id)
        end = prefix + keys.seq_bytes(before_seq)
        while True:
            found = self.store.last_before(prefix, end)
            if found is None:
                return None
            seq = keys.seq_of(found)
            value = self.store.get(keys.event_key(txn.prefix, seq))
            if value is not None:
                header = stored.unpack(value)[0]  # (op, seq, scn, ts_ms, table, row_id, ...)
                if header[0] in ev.ROW_OPS and header[5] == row_id:
                    return seq
            # Stale entry: its change was rolled back, or a later event reused its seq for
            # another row (or a fragment). Look further back.
            end = found

    def _undo(self, txn: Txn, offset: int, key: bytes | None, value: bytes, e: codec.RawFields) -> list[Action]:
        if txn.filtered or self.filters.table_excluded(e["table"]):
            self.stats.filtered_changes += 1
            return []
        target = self._newest_surviving(txn, e["row_id"], e["seq"])
        if target is None:
            return self._dead(
                offset, key, value, f"undo row: no earlier change with row_id {e['row_id']!r} in {txn.xid}"
            )
        self.batch.delete(keys.event_key(txn.prefix, target))
        self._drop_fragments_of(txn, target, target + 1)
        self.stats.undone += 1
        return []

    def _fragment(
        self, txn: Txn, offset: int, key: bytes | None, value: bytes, e: codec.RawFields, body_at: int
    ) -> list[Action]:
        if txn.filtered or self.filters.table_excluded(e["table"]):
            self.stats.filtered_changes += 1
            return []
        if e["row_id"]:
            target = self._newest_surviving(txn, e["row_id"], e["seq"])
            target_value = None if target is None else self.store.get(keys.event_key(txn.prefix, target))
            if target_value is not None and stored.op_of(target_value) == ev.DELETE:
                target = None
        else:
            target = self._newest_change_of_key(txn, e["table"], e["key"], e["seq"])
        if target is None:
            return self._dead(offset, key, value, f"{e['op']}: no preceding INSERT/UPDATE of the row in {txn.xid}")
        seq = e["seq"]
        if self.store.get(keys.event_key(txn.prefix, seq)) is not None:
            self._forget_pointers_to(txn, seq)  # a fragment sent again has one target: the new one
        self.batch.put(keys.event_key(txn.prefix, seq), value)
        self.batch.put(keys.fragment_prefix(txn.prefix, target) + keys.seq_bytes(seq), b"")
        if e["subxid"] is not None:
            self.batch.put(keys.subxid_prefix(txn.prefix, e["subxid"]) + keys.seq_bytes(seq), b"")
        txn.bytes += len(value)
        txn.fragments += 1
        self._dirty.add(txn.xid)
        return []

    def _newest_change_of_key(self, txn: Txn, table: str, key: dict[str, Any], before_seq: int) -> int | None:
        """Seq of the newest INSERT/UPDATE of (table, key) before before_seq, None if a DELETE or
        nothing comes first. Scans back from the fragment, which sources write right after its
        change, so this reads a handful of events and keeps the per-change path free of an index."""
        self.flush_data()
        for _, value in self.store.scan_reverse(txn.prefix + keys.EVENT, keys.event_key(txn.prefix, before_seq)):
            header, raw = stored.unpack(value)  # (op, seq, scn, ts_ms, table, ...): no decode to filter
            op, seq, event_table = header[0], header[1], header[4]
            if op not in ev.ROW_OPS or event_table != table:
                continue
            e = codec.decode_raw(raw)
            if e["key"] == key and not e["undo"]:
                return None if op == ev.DELETE else int(seq)
        return None

    def _rollback_to_savepoint(
        self, txn: Txn, offset: int, key: bytes | None, value: bytes | None, e: codec.RawFields
    ) -> list[Action]:
        name = e["savepoint"]
        for i in range(len(txn.savepoints) - 1, -1, -1):
            if txn.savepoints[i][0] == name:
                break
        else:
            return self._dead(offset, key, value, f"ROLLBACK_TO_SAVEPOINT: unknown savepoint {name!r} in {txn.xid}")
        start = txn.savepoints[i][1]
        del txn.savepoints[i + 1 :]
        # Stale index entries of the dropped range are skipped by their readers.
        self.batch.delete_range(keys.event_key(txn.prefix, start + 1), keys.event_key(txn.prefix, e["seq"]))
        self._drop_fragments_of(txn, start + 1, e["seq"])
        self._dirty.add(txn.xid)
        return []

    def _subtxn_abort(self, txn: Txn, offset: int, e: codec.RawFields) -> list[Action]:
        if e["subxid"] == txn.xid:  # PostgreSQL: a Stream Abort of the top transaction
            self._advance_watermark(e["scn"])
            self._drop_all(txn)
            del self.open[txn.xid]
            self._forget_incomplete(txn.xid)
            self.stats.rolled_back += 1
            return [self._finish(txn.xid, offset, ROLLED_BACK)]
        self.flush_data()
        prefix = keys.subxid_prefix(txn.prefix, e["subxid"])
        for index_key, _ in self.store.scan(prefix, prefix + keys.seq_bytes(e["seq"])):
            self.batch.delete(index_key)
            seq = keys.seq_of(index_key)
            buffered = self.store.get(keys.event_key(txn.prefix, seq))
            if buffered is None or codec.decode_raw_view(stored.raw_of(buffered))["subxid"] != e["subxid"]:
                continue  # stale: rolled back already, or a later event of another subxid reused the seq
            self.batch.delete(keys.event_key(txn.prefix, seq))
            self._drop_fragments_of(txn, seq, seq + 1)
        return []

    def _drop_fragments_of(self, txn: Txn, first: int, end: int) -> None:
        """A removed change takes its fragments along (docs/semantics.md): forget the pointers of the
        targets first..end-1, so an event later buffered at such a seq never picks them up."""
        if txn.fragments and first < end:
            self.batch.delete_range(keys.fragment_prefix(txn.prefix, first), keys.fragment_prefix(txn.prefix, end))

    def _forget_pointers_to(self, txn: Txn, fragment_seq: int) -> None:
        """Drop every target's pointer to this fragment seq. Only a fragment buffered where an
        event already is pays this scan of the transaction's pointers."""
        if not txn.fragments:
            return
        for pointer, _ in self.store.scan_prefix(txn.prefix + keys.FRAGMENT):
            if keys.seq_of(pointer) == fragment_seq:
                self.batch.delete(pointer)

    def _commit(self, txn: Txn, offset: int, scn: int, ts_ms: int, thread: int) -> list[Action]:
        if scn > self.watermark:  # _advance_watermark, inline: once per transaction
            self.watermark = scn
        txn.commit = _new_commit(scn, ts_ms, thread, offset)
        del self.open[txn.xid]
        if txn.filtered:
            self._drop_all(txn)
            self.stats.filtered_txns += 1
            self._forget_incomplete(txn.xid)
            return [self._finish(txn.xid, offset, FILTERED)]
        if self.incomplete and txn.xid in self.incomplete:
            return self._commit_incomplete(txn, offset)
        if txn.staged is None:
            self._dirty.add(txn.xid)
            if len(self.pending) > self._stored_pending:  # committed after a staged one
                self._commit_order_check = True
            self._stored_pending += 1
        self.pending[txn.xid] = txn
        self.stats.committed += 1
        return [_committed(txn)]

    def _rollback(self, txn: Txn, offset: int, scn: int) -> Finished:
        """ROLLBACK of an open transaction: its buffered events go."""
        if scn > self.watermark:  # _advance_watermark, inline
            self.watermark = scn
        self._drop_all(txn)
        del self.open[txn.xid]
        self._forget_incomplete(txn.xid)
        self.stats.rolled_back += 1
        return self._finish(txn.xid, offset, ROLLED_BACK)

    # ------------------------------------------------------------------ incomplete transactions

    def _mark_incomplete(self, txn: Txn, e: codec.RawFields) -> list[Action]:
        """A source could not write one of this transaction's events: it must never be emitted."""
        seen = self.incomplete.get(txn.xid)
        if seen is None:
            self.incomplete[txn.xid] = [incomplete.describe(e), 1]
        else:
            seen[1] += 1
        self._pos_dirty = True
        return []

    def _commit_incomplete(self, txn: Txn, offset: int) -> list[Action]:
        """The whole transaction goes to the DLQ as one record (its events stay on the raw topic
        between first_offset and offset); it finishes as abandoned: reported, never emitted."""
        reason, markers = self.incomplete.pop(txn.xid)
        self._pos_dirty = True
        more = f" (and {markers - 1} more)" if markers > 1 else ""
        dropped = txn.events
        self._drop_all(txn)
        self.stats.abandoned += 1
        self.stats.incomplete += 1
        dead = self._dead(
            offset,
            txn.xid.encode(),
            None,
            f"incomplete: {reason}{more}; transaction {txn.xid} (raw partition {self.partition}, "
            f"offsets {txn.first_offset}..{offset}) dead-lettered whole, {dropped} buffered events not emitted",
        )
        return [*dead, self._finish(txn.xid, offset, ABANDONED)]

    def _forget_incomplete(self, xid: str) -> None:
        if self.incomplete and self.incomplete.pop(xid, None) is not None:
            self._pos_dirty = True

    # ------------------------------------------------------------------ outcomes

    def acknowledged(self, txn: Txn) -> Finished:
        """Every output of a committed transaction is acknowledged: drop its buffered events."""
        self.acknowledged_all((txn,))
        assert txn.commit is not None
        return _finished(self.partition, txn.xid, txn.commit.offset, COMMITTED)

    def acknowledged_all(self, txns: Iterable[Txn]) -> None:
        """acknowledged() of each of txns, in order, without a Finished action each: the emitter
        finishes what a settlement acknowledged in one call per engine. Per transaction, the calls
        and lookups of acknowledged() cost more than its work (~3 µs a transaction, ~75k
        transactions a second at steady: docs/benchmarks.md, session 51)."""
        pending, finished = self.pending, []
        for txn in txns:
            if txn.staged is not None:  # the common case: _drop_all's, inline
                txn.staged = None
                txn.events = txn.bytes = 0
                pending.pop(txn.xid, None)
            else:
                if pending.pop(txn.xid, None) is not None:
                    self._stored_pending -= 1
                self._drop_all(txn)
            assert txn.commit is not None
            finished.append((txn.xid, txn.commit.offset))
        self._finish_all(finished, COMMITTED)

    def abandon_older_than(self, max_age_ms: int) -> list[DeadLetter | Finished]:
        """Retention policy: open transactions older than max_age_ms in source time (the partition's
        newest ts_ms) are dropped, each reported by a dead letter, so none holds the low watermark
        and the buffer forever. A later COMMIT of one is reported, never half-emitted."""
        actions: list[DeadLetter | Finished] = []
        for txn in [t for t in self.open.values() if t.first_ts_ms and self.last_ts_ms - t.first_ts_ms > max_age_ms]:
            reason = (
                f"abandoned: transaction {txn.xid} open for {self.last_ts_ms - txn.first_ts_ms} ms "
                f"(source time) > max_open_age_ms={max_age_ms}; {txn.events} buffered "
                f"events dropped; a later COMMIT will be reported, not emitted"
            )
            del self.open[txn.xid]
            self._drop_all(txn)
            self._forget_incomplete(txn.xid)
            self.stats.abandoned += 1
            actions.append(DeadLetter(self.partition, txn.first_offset, txn.xid.encode(), None, reason))
            actions.append(self._finish(txn.xid, self.next_offset - 1, ABANDONED))
        return actions

    def mark_completed(self, xid: str, offset: int, outcome: str = COMMITTED) -> None:
        """Record a transaction another run already finished (rebuilt from END or outcome records)."""
        if xid not in self.completed and xid not in self.open and xid not in self.pending:
            self._finish(xid, offset, outcome)

    def cursor_moved(self, txn: Txn) -> None:
        if txn.staged is None:  # a staged one's metadata is not stored; _spill marks it when it goes there
            self._dirty.add(txn.xid)

    def _drop_all(self, txn: Txn) -> None:
        if txn.staged is None:
            self.batch.delete_range(txn.prefix, keys.upper_bound(txn.prefix))
        else:
            txn.staged = None  # never spilled: the store holds nothing of it
        txn.events = txn.bytes = 0

    # ------------------------------------------------------------------ staging
    # A transaction keeps its writes in txn.staged, in memory, from its BEGIN until it finishes or
    # a checkpoint spills it: one that commits, is emitted and acknowledged (or rolls back) before
    # then never touches the store. A checkpoint spills those that began more than stage_horizon
    # offsets or STAGE_MAX_AGE_MS ago (that bounds memory and the re-read below; a committed one in
    # flight counts from its commit), a committed one in flight also to keep commit order
    # (_spill_for_commit_order), and all of them at a stop or a revoke (spill_all). A crash re-reads
    # and emits again a committed one left staged, as at_least_once allows. The store then holds every other
    # transaction it knows, and the position record says where a restart must re-read from to
    # rebuild the staged ones: next_offset is the first offset of the oldest staged transaction,
    # replay_to the offset the store is complete to for all others (apply() skips their records
    # below it). The ops that read a transaction's events back (undo, fragments, partial rollbacks)
    # spill it first; once spilled, it writes to the store directly.

    def _spill(self, txn: Txn) -> None:
        staged, txn.staged = txn.staged, None
        self._dirty.add(txn.xid)  # now in the store: its metadata goes there with it
        if txn.commit is not None:  # only a pending one is spilled once committed
            self._stored_pending += 1
            if len(self.pending) > self._stored_pending:  # others are staged
                self._commit_order_check = True
        if staged:
            put = self.batch.put
            for key, value in staged.items():
                put(key, value)

    def _spill_due(self, spill_all: bool) -> int:
        """Spill what must not stay staged past this checkpoint; return the offset a restart must
        re-read from (the first offset of the oldest transaction still staged, else next_offset).

        _staging is in the order the transactions began, so the due ones by offset are a prefix of it,
        and the scan stops at the first open one kept: its first offset is the lowest kept. A later one
        that is due by age only (source timestamps out of log order) waits until the scan reaches it.
        So a checkpoint costs what changed since the last one, not what is open (100k open
        transactions were scanned at every batch).

        A committed one whose outputs are in flight is due by its commit instead (offset and age): it
        finishes within a few batches, and spilling it would write its changes and its metadata (its
        cursor at each settlement) only to delete them (100k transactions committed in a row, each
        begun 50k offsets before: a checkpoint took 1.6 s of the 4 s run). Kept, it holds the restart's
        re-read at its first offset until it finishes."""
        staging = self._staging
        if not staging:
            return self.next_offset
        if spill_all:
            for txn in staging:
                if txn.staged is not None:
                    self._spill(txn)
            staging.clear()
            self._commit_order_check = False  # every one is in the store
            return self.next_offset
        horizon = self.next_offset - self.stage_horizon
        born_before = self.last_ts_ms - STAGE_MAX_AGE_MS
        resume = self.next_offset
        done = -1  # staging[:done] is finished or spilled: dropped; -1 while none is kept
        for i, txn in enumerate(staging):
            if txn.staged is None:  # finished, or spilled already
                continue
            commit = txn.commit
            if commit is None:
                if txn.first_offset >= horizon and not 0 < txn.first_ts_ms < born_before:
                    done = i if done < 0 else done
                    resume = min(resume, txn.first_offset)
                    break
            elif commit.offset >= horizon and not 0 < commit.ts_ms < born_before:
                done = i if done < 0 else done
                resume = min(resume, txn.first_offset)
                continue
            self._spill(txn)
        del staging[: len(staging) if done < 0 else done]
        self._spill_for_commit_order()
        return resume

    def _spill_for_commit_order(self) -> None:
        """A committed transaction whose outputs are in flight stays staged (a restart re-reads and
        emits it again, as at_least_once allows), unless one committed after it is in the store: a
        restart emits the stored ones first (resume_pending), before the re-read commits the staged
        ones, so those must be in the store too to go out in commit order."""
        if not self._commit_order_check:  # no transaction was stored after a staged one committed
            return
        earlier: list[Txn] = []  # staged, committed before the next stored one
        for txn in self.pending.values():  # in commit order
            if txn.staged is not None:
                earlier.append(txn)
            elif earlier:
                for staged in earlier:
                    self._spill(staged)
                earlier.clear()
        self._commit_order_check = False

    def buffered(self, txn: Txn, begin: bytes, end: bytes) -> Iterable[tuple[bytes, Any]]:
        """The transaction's (key, value) pairs in [begin, end), in key order: staged or stored.
        The store's range must be flushed (flush_data) before."""
        staged = txn.staged
        if staged is None:
            return self.store.scan(begin, end)
        return codec.staged_range(staged, begin, end)

    def _finish(self, xid: str, offset: int, outcome: str) -> Finished:
        self._finish_all(((xid, offset),), outcome)
        return _finished(self.partition, xid, offset, outcome)

    def _finish_all(self, finished: Iterable[tuple[str, int]], outcome: str) -> None:
        """Record each (xid, offset) as finished with `outcome`: the completed index and its FIFO
        entry, which the next checkpoint writes (_put_fifo_batch)."""
        completed, fifo, batch, meta_stored = self.completed, self.fifo, self._fifo_batch, self._meta_stored
        before = len(fifo)
        for xid, offset in finished:
            completed[xid] = (offset, outcome)
            fifo.append((offset, xid, batch, outcome))
            if xid in meta_stored:  # its metadata goes; one never stored has none (and most are not)
                self._dirty.add(xid)
        self._fifo_unwritten += len(fifo) - before

    def _put_fifo_batch(self) -> None:
        """Put the FIFO entries finished since the last checkpoint (the tail of fifo) as one record,
        in the checkpoint's batch, with the position that covers them. (What flush_data writes
        before is marked AHEAD: a crash before the checkpoint rebuilds the partition.)"""
        fifo, number = self.fifo, self._fifo_batch
        unwritten = min(self._fifo_unwritten, len(fifo))  # a prune may have taken the first of them
        self._fifo_unwritten = 0
        if not unwritten:
            return
        tail = list(itertools.islice(reversed(fifo), unwritten))
        tail.reverse()
        self.batch.put(keys.fifo_batch_key(self.partition, number), keys.fifo_batch_value(tail))
        self._fifo_batch = number + 1

    def _dead(self, offset: int, key: bytes | None, value: bytes | None, reason: str) -> list[Action]:
        self.stats.dead_letters += 1
        return [DeadLetter(self.partition, offset, key, value, reason)]

    def _advance_watermark(self, scn: int) -> None:
        if scn > self.watermark:
            self.watermark = scn

    # ------------------------------------------------------------------ positions

    def applied_to(self) -> int:
        """The next offset a running engine applies; after a restore that re-reads staged
        transactions, the offset the store was complete to (it continues from there)."""
        return max(self.next_offset, self._replay_to)

    def low_watermark(self) -> int:
        """The input offset to commit: first offset of the oldest unfinished transaction, else next.

        Never past next_offset: while a restore re-reads the staged transactions, those not re-read
        yet are not in `open`, and a commit of the stored ones' low watermark would skip them."""
        oldest = self.oldest_open()
        low = self.next_offset
        if oldest is not None and oldest.first_offset < low:
            low = oldest.first_offset
        for txn in self.pending.values():  # committed, not yet acknowledged: few, in commit order
            if txn.first_offset < low:
                low = txn.first_offset
        return low

    def oldest_open(self) -> Txn | None:
        open_txns = self.open
        if not open_txns:
            return None
        if not self._open_ordered:
            if self.next_offset < self._replay_to:  # still re-reading: more may come out of order
                return min(open_txns.values(), key=lambda t: t.first_offset)
            ordered = sorted(open_txns.values(), key=lambda t: t.first_offset)
            open_txns.clear()  # in place: the lane holds this dict
            open_txns.update((t.xid, t) for t in ordered)
            self._open_ordered = True
        return next(iter(open_txns.values()))

    def buffered_events(self) -> int:
        return sum(t.events for t in self.open.values()) + sum(t.events for t in self.pending.values())

    def buffered_bytes(self) -> int:
        return sum(t.bytes for t in self.open.values()) + sum(t.bytes for t in self.pending.values())

    # ------------------------------------------------------------------ persistence

    def flush_data(self) -> None:
        """Write pending data so reads see it (an undo, a fragment or an emission reads the store).

        The store then holds effects of records past its position. A restart cannot re-apply those
        records over them: it skips the records of a transaction the store holds below replay_to
        and applies the later ones to data that already went further. A delete landing early (a
        transaction re-sent from its BEGIN, a partial rollback, an undo) removed what those later
        records still read: an undo or a LOB fragment then found no row to act on, and was
        dead-lettered (bench.chaos, a crash between this write and the checkpoint). So the write
        carries the AHEAD mark: a marked store is rebuilt from the committed offsets, not restored
        (runtime.partitions.restore_partition), and the next checkpoint, which writes the position,
        clears the mark."""
        if len(self.batch):
            if not self._ahead:
                self.batch.put(keys.ahead_key(self.partition), b"")
                self._ahead = True
            self.store.write(self.batch)
            self.batch = self.store.batch()

    def checkpoint(self, spill_all: bool = False) -> None:
        """Write data, transaction metadata, completed index and position in one batch. spill_all
        (a clean stop, a revoke): staged transactions too, so a restart has nothing to re-read."""
        if self.next_offset < self._replay_to:
            # Still re-reading after a restore: the store's position already covers these records
            # for every transaction it knows, so it stays where it is until the re-read is done.
            return
        resume = self._spill_due(spill_all)
        if not (len(self.batch) or self._dirty or self._pos_dirty or self._ahead or self._fifo_unwritten):
            return  # an idle loop writes nothing
        stored = self._meta_stored
        for xid in self._dirty:
            txn = self.open.get(xid) or self.pending.get(xid)
            if txn is None:
                if xid in stored:  # most finish before a checkpoint spills them: nothing to delete
                    stored.discard(xid)
                    self.batch.delete(keys.meta_key(self.partition, xid))
            elif txn.staged is None:
                stored.add(xid)
                self.batch.put(keys.meta_key_of(txn.prefix), txn.to_bytes())
            # else staged: not in the store; a restart rebuilds it from the raw topic
        self._dirty.clear()
        self._prune_completed()
        self._put_fifo_batch()
        pos: dict[str, Any] = {
            "next_offset": resume,
            "watermark": self.watermark,
            "version": FORMAT_VERSION,
        }
        if resume < self.next_offset:
            pos["replay_to"] = self.next_offset
        if self.incomplete:
            pos["incomplete"] = self.incomplete
        self.batch.put(keys.pos_key(self.partition), json.dumps(pos).encode())
        if self._ahead:  # the position now covers everything flushed before it
            self.batch.delete(keys.ahead_key(self.partition))
            self._ahead = False
        self._pos_dirty = False
        self.store.write(self.batch)
        self.batch = self.store.batch()

    def _prune_completed(self) -> None:
        """Drop the oldest entries of the completed index that are below the low watermark, down to
        min_completed, once it holds a chunk (a tenth of min_completed) more than that: it keeps
        between min_completed and min_completed plus a chunk. Completion order is not quite offset
        order (a commit finishes once its outputs are acknowledged, a rollback at once), so the prune
        stops at the first entry at or above the low watermark.

        The FIFO batches before the first kept entry's go with one range delete; that batch, if it
        lost entries, is written again with the rest, so the store holds exactly the index in memory.

        While an open transaction holds the low watermark, each checkpoint could prune only the few
        entries it passed; the prune waits until a chunk of them is below it (the chunk's last one
        is: a trigger, not a count), so the store gets one range delete per chunk, not per checkpoint."""
        fifo, keep = self.fifo, self.min_completed
        chunk = max(1, keep // 10)
        if len(fifo) <= keep + chunk:
            return
        low = self.low_watermark()
        if fifo[chunk - 1][0] >= low:
            return
        completed = self.completed
        last = None
        while len(fifo) > keep and fifo[0][0] < low:
            last = fifo.popleft()
            offset, xid = last[0], last[1]
            if completed.get(xid, (None,))[0] == offset:
                del completed[xid]
        if last is None:
            return
        first_kept = fifo[0][2] if fifo else self._fifo_batch
        start = keys.partition_prefix(keys.FIFO, self.partition)
        self.batch.delete_range(start, keys.fifo_batch_key(self.partition, first_kept))
        if last[2] == first_kept and first_kept < self._fifo_batch:  # a written batch lost its first entries
            rest = list(itertools.takewhile(lambda entry: entry[2] == first_kept, fifo))
            self.batch.put(keys.fifo_batch_key(self.partition, first_kept), keys.fifo_batch_value(rest))

    @classmethod
    def restore(
        cls,
        partition: int,
        store: Store,
        filters: Filters = Filters(),
        min_completed: int = 10000,
        stage_horizon: int = STAGE_HORIZON,
    ) -> PartitionEngine | None:
        """Load a partition's state, or None when the store holds no position for it."""
        raw_pos = store.get(keys.pos_key(partition))
        if raw_pos is None:
            return None
        pos = json.loads(raw_pos)
        if pos.get("version") != FORMAT_VERSION:
            return None  # written by another format: rebuilt, never misread
        eng = cls(partition, store, filters, min_completed, stage_horizon)
        eng.next_offset, eng.watermark = pos["next_offset"], pos["watermark"]
        eng._replay_to = pos.get("replay_to", 0)
        eng.incomplete = {str(x): list(v) for x, v in pos.get("incomplete", {}).items()}
        pending = []
        for _, raw in store.scan_prefix(keys.partition_prefix(keys.META, partition)):
            txn = Txn.from_bytes(raw)
            if txn.commit is None:
                eng.open[txn.xid] = txn
            else:
                pending.append(txn)
        for txn in sorted(pending, key=lambda t: t.require_commit().offset):
            eng.pending[txn.xid] = txn
        eng._stored_pending = len(eng.pending)
        # Loaded in key order; a re-read of staged ones (replay_to) adds earlier ones after them.
        eng._open_ordered = False
        eng._meta_stored = set(eng.open) | set(eng.pending)
        if eng._replay_to:  # a staged transaction's markers come back with its re-read records
            eng.incomplete = {x: v for x, v in eng.incomplete.items() if x in eng._meta_stored}
        for batch_key, value in store.scan_prefix(keys.partition_prefix(keys.FIFO, partition)):
            number = keys.fifo_batch_of(batch_key)
            for offset, xid, _, outcome in keys.fifo_batch_entries(value, number):
                eng.fifo.append((offset, xid, number, outcome))
                eng.completed[xid] = (offset, outcome)  # in completion order: the newest entry wins
            eng._fifo_batch = number + 1
        return eng

    @staticmethod
    def written_ahead(partition: int, store: Store) -> bool:
        """The store holds data written past its position (flush_data) that no checkpoint covered:
        it cannot be restored, only rebuilt."""
        return store.get(keys.ahead_key(partition)) is not None

    @staticmethod
    def wipe(partition: int, store: Store) -> None:
        """Forget everything of a partition (its state is rebuilt from the low watermark)."""
        batch = store.batch()
        for kind in (keys.TXN, keys.META, keys.DONE, keys.FIFO, keys.POS, keys.AHEAD):
            prefix = keys.partition_prefix(kind, partition)
            batch.delete_range(prefix, keys.upper_bound(prefix))
        store.write(batch)
