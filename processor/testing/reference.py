"""A deliberately simple, in-memory reference model of docs/semantics.md: the test oracle.

It is written independently of the engine and favours clarity over speed: every transaction is a
plain dict of buffered events, and every rule of the contract is a few lines you can check against
the page. Property tests feed the same raw events to the engine and to ReferenceModel and compare
the committed transactions, the DLQ decisions and the watermarks.

Choices the contract leaves open (the engine should agree; change both or neither):
- Record checks (undecodable, wrong type, negative seq or LOB position, empty xid, a field the op
  needs) run first, for every record, so a malformed late event is dead-lettered, not counted late.
- A record whose Kafka key is given and is not its xid's UTF-8 is dead-lettered after those checks
  (the key picks the partition, so its transaction may be elsewhere); a record without a key is not.
- Empty strings and maps count as missing. An undo row needs only `row_id`. A fragment needs
  `row_id`, or `table` and `key`; LOB_ERASE also needs `lob_offset` and `lob_length`, LOB_TRIM
  `lob_length`.
- Table filters apply only to events that carry a table; undo rows and fragments of an excluded
  table are ignored like its changes.
- A transaction becomes filtered as soon as its user or client is known to be excluded; from then
  on its events are ignored (no semantic DLQ). At COMMIT a non-empty include list also filters a
  transaction that never carried a user (or client).
- A bytes piece written into a string value (or the reverse) converts the value to the piece's type.
- `data_collections` and `data_collection_order` group a change without a table under "".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fastavro.validation import ValidationError, validate

from processor.core import events, incomplete
from processor.core.events import (
    BEGIN,
    COMMIT,
    DDL,
    DELETE,
    FRAGMENT_OPS,
    HEARTBEAT,
    INSERT,
    LOB_ERASE,
    LOB_TRIM,
    READ,
    ROLLBACK,
    ROLLBACK_TO_SAVEPOINT,
    ROW_OPS,
    SAVEPOINT,
    SUBTXN_ABORT,
    TRUNCATE,
    UPDATE,
)

COMMITTED = "committed"
ROLLED_BACK = "rolled_back"
FILTERED = "filtered"
ABANDONED = "abandoned"  # never emitted: here, a transaction that lost an event at the source

_ROW_FIELDS = ("table", "key")
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    INSERT: _ROW_FIELDS,
    UPDATE: _ROW_FIELDS,
    DELETE: _ROW_FIELDS,
    READ: _ROW_FIELDS,
    TRUNCATE: ("table",),
    DDL: ("ddl",),
    **{op: ("lob_column",) for op in FRAGMENT_OPS},
    LOB_ERASE: ("lob_column", "lob_offset", "lob_length"),
    LOB_TRIM: ("lob_column", "lob_length"),
    SAVEPOINT: ("savepoint",),
    ROLLBACK_TO_SAVEPOINT: ("savepoint",),
    SUBTXN_ABORT: ("subxid",),
}


@dataclass
class OpenTransaction:
    xid: str
    start_offset: int
    user: str | None = None
    client: str | None = None
    filtered: bool = False
    buffer: dict[int, dict] = field(default_factory=dict)  # seq -> buffered change or fragment
    targets: dict[int, int] = field(default_factory=dict)  # fragment seq -> seq of the change it merges into
    savepoints: list[tuple[str, int]] = field(default_factory=list)
    incomplete: bool = False  # a source wrote the txb.incomplete marker for an event it lost


@dataclass
class CommittedTransaction:
    partition: int
    xid: str
    commit_scn: int
    commit_ts_ms: int
    thread: int
    commit_offset: int
    changes: list[dict]  # ChangeEvent dicts, in emission order

    def data_collections(self) -> list[dict]:
        counts: dict[str, int] = {}
        for change in self.changes:
            name = change["source"]["table"] or ""
            counts[name] = counts.get(name, 0) + 1
        return [{"name": name, "event_count": n} for name, n in sorted(counts.items())]

    def begin_record(self) -> dict:
        return {
            "status": "BEGIN",
            "id": self.xid,
            "commit_scn": self.commit_scn,
            "ts_ms": self.commit_ts_ms,
            "thread": self.thread,
            "event_count": None,
            "data_collections": None,
            "input_partition": None,
            "commit_offset": None,
            "ordering": None,
            "reason": None,
        }

    def end_record(self, ordering: str = "partition") -> dict:
        return {
            "status": "END",
            "id": self.xid,
            "commit_scn": self.commit_scn,
            "ts_ms": self.commit_ts_ms,
            "thread": self.thread,
            "event_count": len(self.changes),
            "data_collections": self.data_collections(),
            "input_partition": self.partition,
            "commit_offset": self.commit_offset,
            "ordering": ordering,
            "reason": None,
        }


class ReferenceModel:
    """Feed RawEvents per partition in offset order; read committed, dlq, watermark, late_events."""

    def __init__(
        self,
        include_users: Iterable[str] = (),
        exclude_users: Iterable[str] = (),
        include_clients: Iterable[str] = (),
        exclude_clients: Iterable[str] = (),
        include_tables: Iterable[str] = (),
        exclude_tables: Iterable[str] = (),
    ):
        self.include_users, self.exclude_users = frozenset(include_users), frozenset(exclude_users)
        self.include_clients, self.exclude_clients = frozenset(include_clients), frozenset(exclude_clients)
        self.include_tables, self.exclude_tables = frozenset(include_tables), frozenset(exclude_tables)
        self.open: dict[int, dict[str, OpenTransaction]] = {}
        self.completed: dict[int, dict[str, str]] = {}  # partition -> xid -> outcome
        self.committed: dict[int, list[CommittedTransaction]] = {}  # partition -> in commit order
        self.dlq: list[tuple[int, int, str]] = []  # (partition, offset, reason)
        self.watermark: dict[int, int] = {}
        self.late_events: dict[int, int] = {}
        self.next_offset: dict[int, int] = {}

    @classmethod
    def from_config(cls, config: Any) -> ReferenceModel:
        """Take the filter sets of a processor.config.ProcessorConfig."""
        return cls(
            config.include_users,
            config.exclude_users,
            config.include_clients,
            config.exclude_clients,
            config.include_tables,
            config.exclude_tables,
        )

    # ---- views -------------------------------------------------------------------------------

    def outcomes(self, partition: int) -> dict[str, str]:
        return dict(self.completed.get(partition, {}))

    def filtered_count(self) -> int:
        return sum(1 for per in self.completed.values() for o in per.values() if o == FILTERED)

    def low_watermark(self, partition: int) -> int:
        """The input offset to commit: first offset of the oldest open transaction, else the next offset."""
        starts = [t.start_offset for t in self.open.get(partition, {}).values()]
        return min(starts) if starts else self.next_offset.get(partition, 0)

    def all_committed(self) -> list[CommittedTransaction]:
        """Every partition's committed transactions, in global (commit_scn, partition) order."""
        merged = [t for per in self.committed.values() for t in per]
        return sorted(merged, key=lambda t: (t.commit_scn, t.partition, t.commit_offset))

    # ---- input -------------------------------------------------------------------------------

    def feed_all(self, records: Iterable[tuple[int, int, dict | bytes]]) -> ReferenceModel:
        for partition, offset, event in records:
            self.feed(partition, offset, event)
        return self

    def feed(self, partition: int, offset: int, event: dict | bytes, key: bytes | None = None) -> None:
        """One raw record; `key` is its Kafka key (None: not given, or the record has none)."""
        if offset < self.next_offset.get(partition, 0):
            raise ValueError(f"partition {partition}: offset {offset} fed after {self.next_offset[partition] - 1}")
        self.next_offset[partition] = offset + 1
        ev, reason = check_record(event)
        if reason is None and key is not None and ev["xid"] and key != ev["xid"].encode():
            reason = "misplaced: the record's key is not its xid"  # its partition is not its XID's
        if reason is not None:
            self.dlq.append((partition, offset, reason))
            return
        op, xid = ev["op"], ev["xid"]
        if op in (COMMIT, ROLLBACK, HEARTBEAT):
            self.watermark[partition] = max(self.watermark.get(partition, ev["scn"]), ev["scn"])
        if op == HEARTBEAT:
            return
        if xid in self.completed.setdefault(partition, {}):
            self.late_events[partition] = self.late_events.get(partition, 0) + 1
            return
        open_txns = self.open.setdefault(partition, {})
        txn = open_txns.get(xid)
        if txn is None or op == BEGIN:  # implicit begin, or a restart that drops everything buffered
            txn = open_txns[xid] = OpenTransaction(xid, offset)
        self._note_identity(txn, ev)
        if op == BEGIN:
            return
        if op == COMMIT:
            self._commit(partition, offset, txn, ev)
        elif op == ROLLBACK or (op == SUBTXN_ABORT and ev["subxid"] == xid):
            self._finish(partition, xid, ROLLED_BACK)
        elif txn.filtered:
            return
        elif op in events.CHANGE_OPS:
            self._change(partition, offset, txn, ev)
        elif op in FRAGMENT_OPS:
            self._fragment(partition, offset, txn, ev)
        elif op == SAVEPOINT and ev["savepoint"] == incomplete.MARK:
            txn.incomplete = True
        elif op == SAVEPOINT:
            txn.savepoints.append((ev["savepoint"], ev["seq"]))
        elif op == ROLLBACK_TO_SAVEPOINT:
            self._rollback_to_savepoint(partition, offset, txn, ev)
        elif op == SUBTXN_ABORT:
            r, subxid = ev["seq"], ev["subxid"]
            self._drop(txn, [s for s, b in txn.buffer.items() if b["subxid"] == subxid and s < r])

    # ---- rules -------------------------------------------------------------------------------

    def _note_identity(self, txn: OpenTransaction, ev: dict) -> None:
        if txn.user is None and ev["user"] is not None:
            txn.user = ev["user"]
        if txn.client is None and ev["client"] is not None:
            txn.client = ev["client"]
        if not txn.filtered and self._identity_excluded(txn, final=False):
            txn.filtered = True
            txn.buffer.clear()
            txn.targets.clear()

    def _identity_excluded(self, txn: OpenTransaction, final: bool) -> bool:
        for value, include, exclude in (
            (txn.user, self.include_users, self.exclude_users),
            (txn.client, self.include_clients, self.exclude_clients),
        ):
            if value is None:
                if final and include:
                    return True
            elif value in exclude or (include and value not in include):
                return True
        return False

    def _table_excluded(self, table: str | None) -> bool:
        if table is None:
            return False
        return table in self.exclude_tables or (bool(self.include_tables) and table not in self.include_tables)

    def _change(self, partition: int, offset: int, txn: OpenTransaction, ev: dict) -> None:
        if self._table_excluded(ev["table"]):
            return
        seq = ev["seq"]
        if ev["undo"]:
            undone = [
                s for s, b in txn.buffer.items() if b["op"] in ROW_OPS and b["row_id"] == ev["row_id"] and s < seq
            ]
            if not undone:
                self.dlq.append((partition, offset, f"undo_without_target: no change of row_id {ev['row_id']}"))
                return
            self._drop(txn, [max(undone)])
            return
        txn.buffer[seq] = ev  # same seq again: the later event replaces the earlier
        txn.targets.pop(seq, None)

    def _fragment(self, partition: int, offset: int, txn: OpenTransaction, ev: dict) -> None:
        if self._table_excluded(ev["table"]):
            return
        seq = ev["seq"]
        candidates = [s for s, b in txn.buffer.items() if b["op"] in ROW_OPS and s < seq and _same_row(ev, b)]
        target = max(candidates) if candidates else None
        if target is None or txn.buffer[target]["op"] == DELETE:
            what = "no earlier change of the row" if target is None else "the row's newest change is a DELETE"
            self.dlq.append((partition, offset, f"fragment_without_target: {what}"))
            return
        txn.buffer[seq] = ev
        txn.targets[seq] = target

    def _rollback_to_savepoint(self, partition: int, offset: int, txn: OpenTransaction, ev: dict) -> None:
        name, r = ev["savepoint"], ev["seq"]
        found = [i for i, (n, _) in enumerate(txn.savepoints) if n == name]
        if not found:
            self.dlq.append((partition, offset, f"unknown_savepoint: {name}"))
            return
        index = found[-1]
        s = txn.savepoints[index][1]
        self._drop(txn, [seq for seq in txn.buffer if s < seq < r])
        del txn.savepoints[index + 1 :]  # the named savepoint itself stays, as in SQL

    def _drop(self, txn: OpenTransaction, seqs: list[int]) -> None:
        """Remove buffered events, and the fragments whose target goes with them."""
        removed = set(seqs)
        removed |= {f for f, target in txn.targets.items() if target in removed}
        for seq in removed:
            txn.buffer.pop(seq, None)
            txn.targets.pop(seq, None)

    def _finish(self, partition: int, xid: str, outcome: str) -> None:
        self.open[partition].pop(xid, None)
        self.completed[partition][xid] = outcome

    def _commit(self, partition: int, offset: int, txn: OpenTransaction, commit: dict) -> None:
        if txn.filtered or self._identity_excluded(txn, final=True):
            self._finish(partition, txn.xid, FILTERED)
            return
        if txn.incomplete:  # dead-lettered whole at its COMMIT, never emitted (docs/contracts.md)
            self.dlq.append((partition, offset, f"incomplete: transaction {txn.xid} lost an event at the source"))
            self._finish(partition, txn.xid, ABANDONED)
            return
        changes = []
        per_table: dict[str, int] = {}
        fragments_of: dict[int, list[int]] = {}
        for fragment_seq, target in txn.targets.items():
            fragments_of.setdefault(target, []).append(fragment_seq)
        for seq in sorted(txn.buffer):
            change = txn.buffer[seq]
            if change["op"] in FRAGMENT_OPS:
                continue
            after = change["after"]
            fragments = [txn.buffer[f] for f in sorted(fragments_of.get(seq, ()))]
            if fragments and change["op"] in (INSERT, UPDATE, READ):  # a row image: not a DELETE
                after = dict(after or {})
                for fragment in fragments:
                    column = fragment["lob_column"]
                    after[column] = apply_fragment(after.get(column), fragment)
            table_name = change["table"] or ""
            per_table[table_name] = per_table.get(table_name, 0) + 1
            changes.append(_change_event(txn, commit, change, after, len(changes) + 1, per_table[table_name]))
        self.committed.setdefault(partition, []).append(
            CommittedTransaction(partition, txn.xid, commit["scn"], commit["ts_ms"], commit["thread"], offset, changes)
        )
        self._finish(partition, txn.xid, COMMITTED)


# ---- pure helpers ------------------------------------------------------------------------------

_OPTIONAL_DEFAULTS = {
    k: v for k, v in events.raw_event("", BEGIN, 0, 0).items() if k not in ("xid", "op", "seq", "scn")
}


def check_record(event: dict | bytes) -> tuple[dict | None, str | None]:
    """(event, None) for a valid RawEvent, else (None, reason) for the DLQ."""
    if isinstance(event, (bytes, bytearray, memoryview)):
        try:
            event = events.decode_raw(bytes(event))
        except events.DecodeError as exc:
            return None, f"undecodable: {exc}"
    if not isinstance(event, dict):
        return None, f"not_a_raw_event: {type(event).__name__}"
    event = {**_OPTIONAL_DEFAULTS, **event}  # a dict may omit fields that have a schema default
    if not validate(event, events.raw_schema(), raise_errors=False):
        try:  # validate again only to name the bad field: raising is slow
            validate(event, events.raw_schema(), raise_errors=True)
        except ValidationError as exc:
            return None, "invalid_field: " + "; ".join(map(str, exc.errors))
    op = event["op"]
    if event["seq"] < 0:
        return None, "negative_seq"
    if op != HEARTBEAT and not event["xid"]:
        return None, "missing_field: xid"
    needed = ("row_id",) if event["undo"] and op in events.CHANGE_OPS else REQUIRED_FIELDS.get(op, ())
    missing = [name for name in needed if event[name] is None or event[name] in ("", {})]
    if missing:
        return None, f"missing_field: {', '.join(missing)} (op {op})"
    if op in FRAGMENT_OPS and not event["row_id"] and not (event["table"] and event["key"]):
        return None, "missing_field: row_id, or table and key (fragment)"
    if op in FRAGMENT_OPS and any((event[f] or 0) < 0 for f in ("lob_offset", "lob_length")):
        return None, "negative_lob_position"
    return event, None


def _same_row(fragment: dict, change: dict) -> bool:
    if fragment["row_id"] is not None:
        return change["row_id"] == fragment["row_id"]
    return change["table"] == fragment["table"] and change["key"] == fragment["key"]


def apply_fragment(value: str | bytes | None, fragment: dict) -> str | bytes:
    """One fragment's effect on a LOB/XML/long-string value (the table in docs/semantics.md)."""
    data = fragment["lob_data"]
    binary = isinstance(data, bytes) if data is not None else isinstance(value, bytes)
    empty, fill = (b"", b"\x00") if binary else ("", " ")
    v = empty if value is None else value
    if data is None:
        data = empty
    elif isinstance(v, bytes) != binary:  # a bytes piece into a CLOB value or the reverse: the piece's type wins
        v = v.encode() if binary else v.decode("utf-8", "replace")
    off = len(v) if fragment["lob_offset"] is None else fragment["lob_offset"]
    op = fragment["op"]
    if op == LOB_TRIM:
        return v[: fragment["lob_length"]]
    if op == LOB_ERASE:
        end = min(off + fragment["lob_length"], len(v))
        return v[:off] + fill * (end - off) + v[end:] if off < end else v
    if off > len(v):
        v = v + fill * (off - len(v))
    return v[:off] + data + v[off + len(data) :]


def _change_event(
    txn: OpenTransaction, commit: dict, change: dict, after: dict | None, total_order: int, data_collection_order: int
) -> dict:
    return {
        "event_id": events.event_id(commit["thread"], commit["scn"], txn.xid, change["seq"]),
        "op": events.ENVELOPE_OP[change["op"]],
        "ts_ms": change["ts_ms"],
        "key": change["key"],
        "before": change["before"],
        "after": after,
        "ddl": change["ddl"],
        "source": {
            "table": change["table"],
            "xid": txn.xid,
            "seq": change["seq"],
            "scn": change["scn"],
            "commit_scn": commit["scn"],
            "commit_ts_ms": commit["ts_ms"],
            "thread": commit["thread"],
            "user": txn.user,
            "row_id": change["row_id"],
            "attrs": change["attrs"],
        },
        "transaction": {"id": txn.xid, "total_order": total_order, "data_collection_order": data_collection_order},
    }
