"""IBM i journal replay: entries shaped like a DSPJRN outfile (OUTFILFMT *TYPE5) -> RawEvents.

Columns (outfile name or a readable alias): JOSEQN/sequence, JOCODE/code, JOENTT/entry_type,
JOCCID/commit_cycle, JOOBJ/object, JOLIB/library, JOMBR/member, JOCTRR/rrn (relative record
number), JOTSTP/timestamp, JOUSER/user, JOJOB/job, JOESD/data (the entry-specific data: the record
image, here as a JSON object of column -> value).

Mapping: C/SC BEGIN, C/CM COMMIT, C/RB ROLLBACK; R/PT, R/PX INSERT; R/UB + R/UP one UPDATE with
before and after; R/DL DELETE; R/DR, R/BR + R/UR the rollback images the system writes while it
undoes changes (full or to a savepoint): undo events keyed by the RRN; F/CR (member cleared)
TRUNCATE. Entries outside commitment control (commit cycle 0) are committed at once: each gets a
synthetic XID with BEGIN, the change and COMMIT. Pure: IbmiMapper.map_row returns events or raises BadRow.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from processor.core import events as ev
from processor.sources.replay import BadRow, as_int, key_of

log = structlog.get_logger(__name__)

_ALIASES = {
    "JOSEQN": ("SEQUENCE", "SEQ"),
    "JOCODE": ("CODE", "JOURNAL_CODE"),
    "JOENTT": ("ENTRY_TYPE", "TYPE"),
    "JOCCID": ("COMMIT_CYCLE", "COMMIT_CYCLE_ID", "CCID"),
    "JOOBJ": ("OBJECT", "FILE"),
    "JOLIB": ("LIBRARY",),
    "JOMBR": ("MEMBER",),
    "JOCTRR": ("RRN", "COUNT_RRN"),
    "JOTSTP": ("TIMESTAMP",),
    "JOUSER": ("USER",),
    "JOJOB": ("JOB",),
    "JOPGM": ("PROGRAM",),
    "JOESD": ("DATA", "ENTRY_DATA", "ENTRY_SPECIFIC_DATA"),
    "JORCV": ("RECEIVER",),
    "JOSYNM": ("SYSTEM",),
}
_BY_ALIAS = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}

# Commitment-control entries that carry no change: savepoints are visible through the R/xR rollback
# images, the rest is environment bookkeeping.
_IGNORED_C = frozenset({"SB", "SQ", "SU", "BC", "EC", "LW", "PC", "CN", "DB", "R1", "BA", "EB"})
_INSERT_TYPES = frozenset({"PT", "PX"})


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        name = str(k).strip().upper()
        out[_BY_ALIAS.get(name, name)] = None if v == "" else v
    return out


def _ts_ms(value: Any) -> int:
    if value in (None, ""):
        return 0
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    # DSPJRN writes timestamps as 2024-01-02-10.11.12.123456
    for candidate in (text, text.replace("-", " ", 3).replace(" ", "-", 2).replace(".", ":", 2)):
        try:
            dt = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return int(dt.timestamp() * 1000)
    return 0


@dataclass
class _Pending:
    """A before-image (UB or BR) waiting for its after-image (UP or UR)."""

    entry_type: str
    row: dict
    image: dict | None


class IbmiMapper:
    """Maps journal entries (in sequence order) to RawEvents; one instance per file."""

    def __init__(self, key_columns: dict[str, list[str]] | None = None):
        self.key_columns = key_columns or {}
        self._seqs: dict[str, int] = {}
        self._pending: _Pending | None = None
        self._watermark = 0
        self.stats: Counter = Counter()

    def map_row(self, row: dict[str, Any]) -> list[dict]:
        row = normalize(row)
        seqn = as_int(row, "JOSEQN")
        code = (row.get("JOCODE") or "").strip().upper()
        entry = (row.get("JOENTT") or "").strip().upper()
        if len(code) != 1 or len(entry) != 2:
            raise BadRow(f"bad journal code/entry type {code!r}/{entry!r}")
        out: list[dict] = []
        if self._pending is not None and not _completes(self._pending.entry_type, code, entry):
            # A before-image whose after-image never came: emit what we know rather than lose it.
            out += self._flush_pending()
        if code == "C":
            out += self._commitment(row, entry, seqn)
        elif code == "R":
            out += self._record(row, entry, seqn)
        elif code == "F" and entry == "CR":
            out += self._change(row, seqn, ev.TRUNCATE, table=self._table(row))
        else:
            self.stats[f"ignored_{code}_{entry}"] += 1
        return out

    def finish(self) -> list[dict]:
        return self._flush_pending() if self._pending is not None else []

    def watermarks(self) -> dict[int, int]:
        return {1: self._watermark} if self._watermark else {}

    # ---- commitment control --------------------------------------------------------------

    def _commitment(self, row: dict, entry: str, seqn: int) -> list[dict]:
        ccid = as_int(row, "JOCCID")
        if entry in _IGNORED_C:
            self.stats[f"ignored_C_{entry}"] += 1
            return []
        if entry not in ("SC", "CM", "RB"):
            raise BadRow(f"unknown commitment control entry C/{entry}")
        if not ccid:
            raise BadRow(f"C/{entry} with commit cycle 0")
        xid = _xid(ccid)
        op = {"SC": ev.BEGIN, "CM": ev.COMMIT, "RB": ev.ROLLBACK}[entry]
        event = self._event(row, xid, op, seqn)
        if op != ev.BEGIN:
            self._seqs.pop(xid, None)
            self._watermark = max(self._watermark, seqn)
        return [event]

    # ---- record changes ------------------------------------------------------------------

    def _record(self, row: dict, entry: str, seqn: int) -> list[dict]:
        if entry not in ("PT", "PX", "UB", "UP", "DL", "DR", "BR", "UR"):
            raise BadRow(f"unknown record entry R/{entry}")
        image = _image(row)
        table = self._table(row)
        if entry in ("UB", "BR"):
            self._pending = _Pending(entry, row, image)
            return []
        if entry in _INSERT_TYPES:
            return self._change(
                row, seqn, ev.INSERT, table=table, key=self._key(table, image, row), after=image, row_id=_rrn(row)
            )
        if entry == "UP":
            before = self._take_pending("UB")
            return self._change(
                row,
                seqn,
                ev.UPDATE,
                table=table,
                key=self._key(table, image, row),
                before=before,
                after=image,
                row_id=_rrn(row),
            )
        if entry == "DL":
            return self._change(
                row, seqn, ev.DELETE, table=table, key=self._key(table, image, row), before=image, row_id=_rrn(row)
            )
        if entry == "DR":
            # The system deleting a record it added earlier in this cycle: undo that add.
            return self._undo(row, seqn, ev.DELETE, before=image, after=None)
        before = self._take_pending("BR")  # UR
        return self._undo(row, seqn, ev.UPDATE, before=before, after=image)

    def _undo(self, row: dict, seqn: int, op: str, before: dict | None, after: dict | None) -> list[dict]:
        ccid = as_int(row, "JOCCID", required=False) or 0
        rrn = _rrn(row)
        if not ccid:
            raise BadRow(f"rollback image R/{row.get('JOENTT')} outside commitment control")
        if rrn is None:
            raise BadRow(f"rollback image R/{row.get('JOENTT')} without JOCTRR (relative record number)")
        table = self._table(row)
        image = after or before
        key = self._key(table, image, row) if image else {"RRN": int(rrn)}
        self.stats["undo"] += 1
        return [
            self._event(
                row, _xid(ccid), op, seqn, table=table, key=key, before=before, after=after, undo=True, row_id=rrn
            )
        ]

    def _change(self, row: dict, seqn: int, op: str, **fields: Any) -> list[dict]:
        ccid = as_int(row, "JOCCID", required=False) or 0
        if ccid:
            return [self._event(row, _xid(ccid), op, seqn, **fields)]
        # Not under commitment control: the change is committed when it is written.
        xid = f"J{seqn}"
        self.stats["autocommit"] += 1
        self._watermark = max(self._watermark, seqn)
        return [
            self._event(row, xid, ev.BEGIN, seqn),
            self._event(row, xid, op, seqn, **fields),
            self._event(row, xid, ev.COMMIT, seqn),
        ]

    def _take_pending(self, entry_type: str) -> dict | None:
        pending, self._pending = self._pending, None
        return pending.image if pending is not None and pending.entry_type == entry_type else None

    def _flush_pending(self) -> list[dict]:
        pending, self._pending = self._pending, None
        seqn = as_int(pending.row, "JOSEQN")
        table = self._table(pending.row)
        log.warning("ibmi.unpaired_before_image", entry_type=pending.entry_type, sequence=seqn)
        self.stats["unpaired_before_image"] += 1
        if pending.entry_type == "BR":
            return self._undo(pending.row, seqn, ev.UPDATE, before=pending.image, after=None)
        return self._change(
            pending.row,
            seqn,
            ev.UPDATE,
            table=table,
            key=self._key(table, pending.image, pending.row),
            before=pending.image,
            after=pending.image,
            row_id=_rrn(pending.row),
        )

    # ---- helpers -------------------------------------------------------------------------

    def _table(self, row: dict) -> str:
        obj, lib = row.get("JOOBJ"), row.get("JOLIB")
        if not obj:
            raise BadRow("journal entry without JOOBJ (object)")
        return f"{str(lib).strip()}.{str(obj).strip()}" if lib else str(obj).strip()

    def _key(self, table: str, image: dict | None, row: dict) -> dict:
        rrn = _rrn(row)
        return key_of(table, image, self.key_columns, "RRN", int(rrn) if rrn is not None else None)

    def _event(self, row: dict, xid: str, op: str, seqn: int, **fields: Any) -> dict:
        seq = self._seqs.get(xid, 0)
        self._seqs[xid] = seq + 1
        attrs = {"journal_code": str(row.get("JOCODE")), "entry_type": str(row.get("JOENTT")), "sequence": str(seqn)}
        for col, name in (
            ("JOJOB", "job"),
            ("JOPGM", "program"),
            ("JOMBR", "member"),
            ("JORCV", "receiver"),
            ("JOCCID", "commit_cycle"),
        ):
            if row.get(col) not in (None, ""):
                attrs[name] = str(row[col])
        return ev.raw_event(
            xid,
            op,
            seq,
            seqn,
            ts_ms=_ts_ms(row.get("JOTSTP")),
            user=row.get("JOUSER"),
            client=row.get("JOJOB"),
            attrs=attrs,
            **fields,
        )


def _completes(pending_type: str, code: str, entry: str) -> bool:
    return code == "R" and ((pending_type == "UB" and entry == "UP") or (pending_type == "BR" and entry == "UR"))


def _xid(ccid: int) -> str:
    return f"C{ccid}"


def _rrn(row: dict) -> str | None:
    value = row.get("JOCTRR")
    if value in (None, ""):
        return None
    try:
        return str(int(value))
    except (TypeError, ValueError):
        raise BadRow(f"JOCTRR is not an integer: {value!r}") from None


def _image(row: dict) -> dict | None:
    data = row.get("JOESD")
    if data is None:
        return None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise BadRow(f"JOESD is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRow("JOESD is not a JSON object")
    for k, v in data.items():
        if isinstance(v, (list, dict)):
            raise BadRow(f"JOESD column {k} is not a scalar")
    return data
