"""Oracle LogMiner replay: rows shaped like V$LOGMNR_CONTENTS -> RawEvents.

The operation codes follow Debezium's LogMiner adapter (EventType): START, COMMIT, ROLLBACK, DML,
DDL, the LOB/XML/32K fragment families, the GoldenGate replication marker (drops the transaction),
MISSING_SCN (a warning). INTERNAL and SELECT_FOR_UPDATE rows change no user data and are counted
and skipped. An UNSUPPORTED row, or a change row whose STATUS is not 0 (LogMiner could not rebuild
its SQL, e.g. a dictionary mismatch), is a change we cannot apply: it goes to the DLQ with INFO as
the reason. Everything here is pure: OracleMapper.map_row(row) returns
events or raises BadRow; the replay driver does the I/O.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from processor.core import events as ev
from processor.sources import sql_redo
from processor.sources.redo_values import SqlRedoError
from processor.sources.replay import BadRow, SourceRow, as_int, key_of

log = structlog.get_logger(__name__)

# V$LOGMNR_CONTENTS.OPERATION_CODE
INTERNAL, INSERT, DELETE, UPDATE, DDL, START, COMMIT = 0, 1, 2, 3, 5, 6, 7
SEL_LOB_LOCATOR, LOB_WRITE, LOB_TRIM, SELECT_FOR_UPDATE = 9, 10, 11, 25
REPLICATION_MARKER, LOB_ERASE, MISSING_SCN, ROLLBACK = 27, 29, 34, 36
LOB_ERASE_DOCUMENTED = 28  # Oracle's reference says 28; databases write 29 (Debezium reads 29)
XML_BEGIN, XML_WRITE, XML_END = 68, 70, 71
EXT_BEGIN, EXT_WRITE, EXT_END = 91, 92, 93  # 32K extended strings
UNSUPPORTED = 255

KNOWN_CODES = frozenset(
    {
        INTERNAL,
        SELECT_FOR_UPDATE,
        LOB_ERASE_DOCUMENTED,
        INSERT,
        DELETE,
        UPDATE,
        DDL,
        START,
        COMMIT,
        SEL_LOB_LOCATOR,
        LOB_WRITE,
        LOB_TRIM,
        REPLICATION_MARKER,
        LOB_ERASE,
        MISSING_SCN,
        ROLLBACK,
        XML_BEGIN,
        XML_WRITE,
        XML_END,
        EXT_BEGIN,
        EXT_WRITE,
        EXT_END,
        UNSUPPORTED,
    }
)

_DML_OP = {INSERT: ev.INSERT, DELETE: ev.DELETE, UPDATE: ev.UPDATE}
# Rows that change no user data: a lock (SELECT ... FOR UPDATE) or the dictionary's own bookkeeping.
_SKIPPED = {INTERNAL: "internal", SELECT_FOR_UPDATE: "select_for_update"}
# Rows that carry a change of a table; only these are refused when LogMiner marks their SQL invalid.
_CHANGE_CODES = frozenset(
    {INSERT, DELETE, UPDATE, DDL, SEL_LOB_LOCATOR, LOB_WRITE, LOB_TRIM, LOB_ERASE, LOB_ERASE_DOCUMENTED}
    | {XML_BEGIN, XML_WRITE, EXT_BEGIN, EXT_WRITE}
)
_ATTR_COLUMNS = {
    "RS_ID": "rs_id",
    "SSN": "ssn",
    "SQL_REDO": "redo_sql",
    "SEQUENCE#": "sequence",
    "INFO": "info",
    "OPERATION_CODE": "operation_code",
    "COMMIT_SCN": "commit_scn",
}


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """Upper-case column names (JSON exports often use lower case) and map THREAD/SEQUENCE to THREAD#/SEQUENCE#."""
    out = {}
    for k, v in row.items():
        name = str(k).strip().upper()
        if name in ("THREAD", "SEQUENCE"):
            name += "#"
        out[name] = None if v == "" else v
    return out


def join_continuations(rows: Iterable[SourceRow]) -> Iterator[SourceRow]:
    """Join CSF=1 rows with the rows that continue them: SQL_REDO longer than 4000 bytes is split."""
    pending: list[SourceRow] = []
    for src in rows:
        if "__error__" in src.row:  # already a dead letter (unreadable line): pass it on as it is
            yield src
            continue
        row = normalize(src.row)
        src = SourceRow(src.line, row, src.original)
        first = pending[0].row if pending else None
        # The pieces of one statement share its redo record (RS_ID) and SQL sequence number (SSN).
        if first is not None and any(str(row.get(c)) != str(first.get(c)) for c in ("XID", "RS_ID", "SSN")):
            # The continuation never came: the pieces are not a row we can trust.
            yield _bad_group(pending, "CSF continuation not followed by its next piece")
            pending = []
        if str(row.get("CSF") or "0") == "1":
            pending.append(src)
            continue
        if pending:
            pending.append(src)
            merged = dict(row)
            merged["SQL_REDO"] = "".join(p.row.get("SQL_REDO") or "" for p in pending)
            if any(p.row.get("SQL_UNDO") for p in pending):
                merged["SQL_UNDO"] = "".join(p.row.get("SQL_UNDO") or "" for p in pending)
            merged["__pieces__"] = len(pending)
            yield SourceRow(pending[0].line, merged, b"\n".join(p.original for p in pending))
            pending = []
        else:
            yield src
    if pending:
        yield _bad_group(pending, "CSF continuation at end of input")


def _bad_group(pending: list[SourceRow], reason: str) -> SourceRow:
    return SourceRow(
        pending[0].line,
        {"__error__": reason, "XID": pending[0].row.get("XID")},
        b"\n".join(p.original for p in pending),
    )


@dataclass
class _Txn:
    seq: int = 0
    locator: sql_redo.LobLocator | None = None
    locator_kind: int = 0
    locator_key: dict | None = None
    locator_row_id: str | None = None
    touched: set = field(default_factory=set)  # rows with a buffered INSERT/UPDATE (LOB targets)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1


def _ts_ms(value: Any) -> int:
    if value in (None, ""):
        return 0
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    for fmt in (None, "%d-%b-%y %I.%M.%S.%f %p", "%d-%b-%Y %H:%M:%S"):
        try:
            dt = datetime.fromisoformat(text) if fmt is None else datetime.strptime(text, fmt)
        except ValueError:
            continue
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return int(dt.timestamp() * 1000)
    return 0


class OracleMapper:
    """Maps V$LOGMNR_CONTENTS rows (after join_continuations) to RawEvents; one instance per file."""

    def __init__(self, key_columns: dict[str, list[str]] | None = None):
        self.key_columns = key_columns or {}
        self._txns: dict[str, _Txn] = {}
        self._dropped: set[str] = set()  # XIDs ended by a replication marker
        self._watermarks: dict[int, int] = {}
        self.stats: Counter = Counter()

    # ---- the Mapper protocol -------------------------------------------------------------

    def map_row(self, row: dict[str, Any]) -> list[dict]:
        row = normalize(row) if "OPERATION_CODE" not in row else row
        code = as_int(row, "OPERATION_CODE")
        if code not in KNOWN_CODES:
            raise BadRow(f"unknown OPERATION_CODE {code}")
        if code in _SKIPPED:
            self.stats[_SKIPPED[code]] += 1
            return []
        scn = as_int(row, "SCN", required=code not in (MISSING_SCN, UNSUPPORTED)) or 0
        xid = row.get("XID")
        if code == MISSING_SCN:
            self.stats["missing_scn"] += 1
            log.warning("oracle.missing_scn", xid=xid, scn=scn, info=row.get("INFO"), sequence=row.get("SEQUENCE#"))
            return []
        if code == UNSUPPORTED:
            # A change LogMiner cannot show (a type or operation it does not support): it happened, so
            # dropping it with a warning would lose it silently downstream; the DLQ keeps it visible.
            self.stats["unsupported"] += 1
            raise BadRow(
                f"UNSUPPORTED operation on {_table(row) or 'an unknown table'}: {row.get('INFO') or 'no INFO'}"
            )
        status = row.get("STATUS")
        undo = code in _DML_OP and str(row.get("ROLLBACK") or "0") == "1"
        # An undo row needs only its ROW_ID (_dml): refusing it would commit a change Oracle rolled back.
        if code in _CHANGE_CODES and status not in (None, "", 0, "0") and not undo:
            self.stats["invalid_sql"] += 1
            raise BadRow(f"STATUS {status} (SQL_REDO not valid): {row.get('INFO') or 'no INFO'}")
        if not xid:
            raise BadRow(f"missing XID for OPERATION_CODE {code}")
        xid = str(xid)
        if xid in self._dropped:
            self.stats["dropped_after_marker"] += 1
            return []
        handler = _HANDLERS[code]
        return handler(self, row, xid, scn)

    def finish(self) -> list[dict]:
        if self._txns:
            log.info("oracle.open_at_end", open=len(self._txns))
        return []

    def watermarks(self) -> dict[int, int]:
        return dict(self._watermarks)

    # ---- helpers -------------------------------------------------------------------------

    def _txn(self, xid: str) -> _Txn:
        return self._txns.setdefault(xid, _Txn())

    def _event(self, row: dict, xid: str, op: str, scn: int, **fields: Any) -> dict:
        txn = self._txn(xid)
        attrs = {name: str(row[col]) for col, name in _ATTR_COLUMNS.items() if row.get(col) not in (None, "")}
        if row.get("__pieces__"):
            attrs["csf_pieces"] = str(row["__pieces__"])
        attrs.update(fields.pop("attrs", {}))
        return ev.raw_event(
            xid,
            op,
            txn.next_seq(),
            scn,
            thread=_thread(row),
            ts_ms=_ts_ms(row.get("TIMESTAMP")),
            user=row.get("USERNAME"),
            client=row.get("CLIENT_ID"),
            attrs=attrs,
            **fields,
        )

    def _key(self, table: str, image: dict | None, row_id: str | None) -> dict:
        return key_of(table, image, self.key_columns, "ROWID", row_id)

    # ---- handlers ------------------------------------------------------------------------

    def _start(self, row: dict, xid: str, scn: int) -> list[dict]:
        txn = self._txns.get(xid)
        if txn is not None:
            # A repeated START restarts the transaction (Debezium resets it too): forget LOB state.
            txn.locator, txn.touched = None, set()
        return [self._event(row, xid, ev.BEGIN, scn)]

    def _commit(self, row: dict, xid: str, scn: int) -> list[dict]:
        commit_scn = as_int(row, "COMMIT_SCN", required=False) or scn
        out = self._event(row, xid, ev.COMMIT, commit_scn)
        self._txns.pop(xid, None)
        thread = _thread(row)
        self._watermarks[thread] = max(self._watermarks.get(thread, 0), commit_scn)
        return [out]

    def _rollback(self, row: dict, xid: str, scn: int) -> list[dict]:
        out = self._event(row, xid, ev.ROLLBACK, scn)
        self._txns.pop(xid, None)
        return [out]

    def _replication_marker(self, row: dict, xid: str, scn: int) -> list[dict]:
        # GoldenGate markers open transactions that never end: drop it, like Debezium, and ignore the rest of it.
        out = self._event(row, xid, ev.ROLLBACK, scn, attrs={"reason": "replication_marker"})
        self._txns.pop(xid, None)
        self._dropped.add(xid)
        self.stats["replication_marker"] += 1
        return [out]

    def _ddl(self, row: dict, xid: str, scn: int) -> list[dict]:
        sql = (row.get("SQL_REDO") or "").strip()
        if (row.get("INFO") or "").upper().startswith("INTERNAL DDL"):
            self.stats["internal_ddl"] += 1
            return []
        if not sql:
            raise BadRow("DDL row without SQL_REDO")
        table = _table(row)
        words = sql.split(None, 2)
        if len(words) >= 2 and words[0].upper() == "TRUNCATE" and words[1].upper() == "TABLE":
            # LogMiner reports TRUNCATE as DDL; Debezium turns it into a truncate event.
            if table is None:
                raise BadRow("TRUNCATE without SEG_OWNER/TABLE_NAME")
            return [self._event(row, xid, ev.TRUNCATE, scn, table=table)]
        return [self._event(row, xid, ev.DDL, scn, table=table, ddl=sql)]

    def _dml(self, row: dict, xid: str, scn: int) -> list[dict]:
        code = as_int(row, "OPERATION_CODE")
        sql = row.get("SQL_REDO")
        row_id = row.get("ROW_ID")
        undo = str(row.get("ROLLBACK") or "0") == "1"
        table = _table(row)
        try:
            dml = sql_redo.parse_dml(sql or "")
        except SqlRedoError as exc:
            if not undo:
                raise BadRow(f"unparsable SQL_REDO: {exc}") from None
            # An undo row only needs its ROW_ID; losing it would commit a change Oracle rolled back.
            dml = sql_redo.Dml(_DML_OP[code], table or "", None, None)
        if dml.op != _DML_OP[code]:
            raise BadRow(f"SQL_REDO is an {dml.op} but OPERATION_CODE {code} is {_DML_OP[code]}")
        table = table or dml.table
        row_id = row_id or dml.row_id
        image = dml.after if dml.op == ev.INSERT else (dml.after or dml.before)
        if undo:
            if not row_id:
                raise BadRow("ROLLBACK=1 row without ROW_ID")
            key = key_of(table, image, self.key_columns, "ROWID", row_id) if image else {"ROWID": row_id}
            self.stats["undo"] += 1
            return [
                self._event(
                    row,
                    xid,
                    dml.op,
                    scn,
                    table=table,
                    key=key,
                    before=dml.before,
                    after=dml.after,
                    undo=True,
                    row_id=row_id,
                )
            ]
        key = self._key(table, image, row_id)
        if dml.op in (ev.INSERT, ev.UPDATE):
            self._txn(xid).touched.add(_identity(table, key, row_id))
        return [
            self._event(row, xid, dml.op, scn, table=table, key=key, before=dml.before, after=dml.after, row_id=row_id)
        ]

    def _locator(self, row: dict, xid: str, scn: int) -> list[dict]:
        code = as_int(row, "OPERATION_CODE")
        sql = row.get("SQL_REDO") or ""
        try:
            loc = {
                SEL_LOB_LOCATOR: sql_redo.parse_lob_locator,
                XML_BEGIN: sql_redo.parse_xml_begin,
                EXT_BEGIN: sql_redo.parse_32k_begin,
            }[code](sql)
        except SqlRedoError as exc:
            raise BadRow(f"unparsable SQL_REDO: {exc}") from None
        table = _table(row) or loc.table
        row_id = row.get("ROW_ID") or loc.row_id
        key = self._key(table, loc.where, row_id)
        txn = self._txn(xid)
        txn.locator, txn.locator_kind, txn.locator_key, txn.locator_row_id = loc, code, key, row_id
        out = []
        if _identity(table, key, row_id) not in txn.touched:
            # The LOB changed without a DML row for it (UPDATE of the LOB column only): as Debezium
            # does, synthesise an UPDATE of the row the locator selects, so the fragments have a target.
            after = {**loc.where, loc.column: None}
            out.append(
                self._event(
                    row,
                    xid,
                    ev.UPDATE,
                    scn,
                    table=table,
                    key=key,
                    after=after,
                    row_id=row_id,
                    attrs={"synthetic": "lob_locator"},
                )
            )
            txn.touched.add(_identity(table, key, row_id))
        if code in (XML_BEGIN, EXT_BEGIN):
            # XML documents and 32K strings are rewritten whole, as a run of appends: start empty.
            out.append(self._fragment(row, xid, scn, ev.LOB_TRIM, lob_length=0))
        return out

    def _fragment(self, row: dict, xid: str, scn: int, op: str, **fields: Any) -> dict:
        txn = self._txn(xid)
        loc = txn.locator
        return self._event(
            row,
            xid,
            op,
            scn,
            table=_table(row) or loc.table,
            key=txn.locator_key,
            row_id=row.get("ROW_ID") or txn.locator_row_id,
            lob_column=loc.column,
            **fields,
        )

    def _lob_op(self, row: dict, xid: str, scn: int) -> list[dict]:
        code = as_int(row, "OPERATION_CODE")
        txn = self._txns.get(xid)
        expected = {
            LOB_WRITE: (SEL_LOB_LOCATOR,),
            LOB_TRIM: (SEL_LOB_LOCATOR,),
            LOB_ERASE: (SEL_LOB_LOCATOR,),
            LOB_ERASE_DOCUMENTED: (SEL_LOB_LOCATOR,),
            XML_WRITE: (XML_BEGIN,),
            EXT_WRITE: (EXT_BEGIN,),
        }[code]
        if txn is None or txn.locator is None or txn.locator_kind not in expected:
            raise BadRow(f"OPERATION_CODE {code} without a preceding locator row ({expected[0]}) in {xid}")
        sql = row.get("SQL_REDO") or ""
        try:
            if code == LOB_WRITE:
                op = sql_redo.parse_lob_write(sql, txn.locator.binary)
                return [self._fragment(row, xid, scn, ev.LOB_WRITE, lob_offset=op.offset, lob_data=op.data)]
            if code == LOB_TRIM:
                op = sql_redo.parse_lob_trim(sql)
                return [self._fragment(row, xid, scn, ev.LOB_TRIM, lob_length=op.length)]
            if code in (LOB_ERASE, LOB_ERASE_DOCUMENTED):
                op = sql_redo.parse_lob_erase(sql)
                return [self._fragment(row, xid, scn, ev.LOB_ERASE, lob_offset=op.offset, lob_length=op.length)]
            if code == XML_WRITE:
                op = sql_redo.parse_xml_write(sql)
                return [self._fragment(row, xid, scn, ev.XML_WRITE, lob_offset=None, lob_data=op.data)]
            op = sql_redo.parse_32k_write(sql)
            return [self._fragment(row, xid, scn, ev.LONG_STRING_WRITE, lob_offset=None, lob_data=op.data)]
        except SqlRedoError as exc:
            raise BadRow(f"unparsable SQL_REDO: {exc}") from None

    def _end_locator(self, row: dict, xid: str, scn: int) -> list[dict]:
        txn = self._txns.get(xid)
        if txn is not None:
            txn.locator = None
        return []


_HANDLERS = {
    START: OracleMapper._start,
    COMMIT: OracleMapper._commit,
    ROLLBACK: OracleMapper._rollback,
    REPLICATION_MARKER: OracleMapper._replication_marker,
    DDL: OracleMapper._ddl,
    INSERT: OracleMapper._dml,
    UPDATE: OracleMapper._dml,
    DELETE: OracleMapper._dml,
    SEL_LOB_LOCATOR: OracleMapper._locator,
    XML_BEGIN: OracleMapper._locator,
    EXT_BEGIN: OracleMapper._locator,
    LOB_WRITE: OracleMapper._lob_op,
    LOB_TRIM: OracleMapper._lob_op,
    LOB_ERASE: OracleMapper._lob_op,
    LOB_ERASE_DOCUMENTED: OracleMapper._lob_op,
    XML_WRITE: OracleMapper._lob_op,
    EXT_WRITE: OracleMapper._lob_op,
    XML_END: OracleMapper._end_locator,
    EXT_END: OracleMapper._end_locator,
}


def _table(row: dict) -> str | None:
    owner, name = row.get("SEG_OWNER"), row.get("TABLE_NAME")
    if not name:
        return None
    return f"{owner}.{name}" if owner else str(name)


def _thread(row: dict) -> int:
    value = row.get("THREAD#")
    try:
        return int(value) if value not in (None, "") else 1
    except (TypeError, ValueError):
        raise BadRow(f"THREAD# is not an integer: {value!r}") from None


def _identity(table: str, key: dict | None, row_id: str | None) -> Any:
    return ("rowid", row_id) if row_id else ("key", table, json.dumps(key, sort_keys=True, default=repr))
