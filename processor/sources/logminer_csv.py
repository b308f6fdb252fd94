"""The `logminer-csv` replay format: V$LOGMNR_CONTENTS spooled to CSV by SQL*Plus or SQLcl.

docs/sources.md gives the spool script (session NLS settings, `SET MARKUP CSV ON` or `SET SQLFORMAT
csv`, the query). `LogMinerExport` turns such a file into the rows OracleMapper reads: the view's
column names, XID as its 16 hex digits (built from XIDUSN/XIDSLT/XIDSQN when the RAW column is not
selected, and checked against them when both are), OPERATION_CODE from OPERATION when only the name
was selected, TIMESTAMP as epoch milliseconds.

Settings that damage the whole file (a date format without the time of day, numbers printed in
scientific notation by a narrow NUMWIDTH, a missing column the semantics depend on) raise
ExportFormatError before a single row is read, rather than sending every row to the DLQ. A row
that is wrong on its own becomes a dead letter with the reason, like any other bad row.
"""

from __future__ import annotations

import csv
import io
import re
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from processor.sources import oracle
from processor.sources.replay import SourceRow

log = structlog.get_logger(__name__)

FORMATS = ("auto", "rows", "logminer-csv")

# Columns only a spool of the view has; the `rows` format (tests/data/oracle_logminer.csv) has none.
EXPORT_ONLY = frozenset(
    {"XIDUSN", "XIDSLT", "XIDSQN", "OPERATION", "STATUS", "SQL_UNDO", "START_SCN", "COMMIT_TIMESTAMP"}
)
# Without these the semantics break silently: no ROLLBACK commits undone changes, no CSF leaves
# statements cut at 4000 bytes, no ROW_ID/RS_ID cannot match undo rows or continuation pieces.
REQUIRED = ("SCN", "SQL_REDO", "SEG_OWNER", "TABLE_NAME", "ROW_ID", "ROLLBACK", "RS_ID", "CSF")
XID_PARTS = ("XIDUSN", "XIDSLT", "XIDSQN")

# V$LOGMNR_CONTENTS.OPERATION -> the OPERATION_CODE values it names.
OPERATION_CODES: dict[str, tuple[int, ...]] = {
    "INTERNAL": (oracle.INTERNAL,),
    "INSERT": (oracle.INSERT,),
    "DELETE": (oracle.DELETE,),
    "UPDATE": (oracle.UPDATE,),
    "DDL": (oracle.DDL,),
    "START": (oracle.START,),
    "COMMIT": (oracle.COMMIT,),
    "SEL_LOB_LOCATOR": (oracle.SEL_LOB_LOCATOR,),
    "LOB_WRITE": (oracle.LOB_WRITE,),
    "LOB_TRIM": (oracle.LOB_TRIM,),
    "SELECT_FOR_UPDATE": (oracle.SELECT_FOR_UPDATE,),
    "LOB_ERASE": (oracle.LOB_ERASE, oracle.LOB_ERASE_DOCUMENTED),
    "MISSING_SCN": (oracle.MISSING_SCN,),
    "ROLLBACK": (oracle.ROLLBACK,),
    "XML DOC BEGIN": (oracle.XML_BEGIN,),
    "XML DOC WRITE": (oracle.XML_WRITE,),
    "XML DOC END": (oracle.XML_END,),
    "UNSUPPORTED": (oracle.UNSUPPORTED,),
}
INTEGER_COLUMNS = ("SCN", "START_SCN", "COMMIT_SCN", "THREAD#", *XID_PARTS, "OPERATION_CODE")
INTEGER_COLUMNS += ("ROLLBACK", "SSN", "CSF", "SEQUENCE#", "STATUS")

_INTEGER = re.compile(r"\s*-?[0-9]+\s*")
_MANGLED_NUMBER = re.compile(r"\s*(?:-?[0-9.]+E[+-]?[0-9]+|#+)\s*", re.I)  # NUMWIDTH too narrow
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]{1,9})?")
_FEEDBACK = re.compile(r"(?:[0-9]+ rows? selected|no rows selected)\.?", re.I)
_PRESCAN_ROWS = 1000  # how many rows decide that the file's settings are sound


class ExportFormatError(ValueError):
    """The file is not a usable V$LOGMNR_CONTENTS export; nothing of it has been replayed."""


class _BadValue(ValueError):
    def __init__(self, reason: str, whole_file: bool = False):
        super().__init__(reason)
        self.whole_file = whole_file


def detect_format(path: str | Path) -> str:
    """ "logminer-csv" when the heading names a column only a spool of the view has, else "rows".

    The heading is the first line naming SCN among the first 50 (a spool may start with an echoed
    command); a first line that opens a JSON object means JSON lines."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        seen = 0
        for line in f:
            if not line.strip():
                continue
            if seen == 0 and line.lstrip().startswith("{"):
                return "rows"  # JSON lines
            seen += 1
            if seen > 50:
                break
            header = {_column(c) for c in next(csv.reader([line]))}
            if "SCN" in header:
                return "logminer-csv" if header & EXPORT_ONLY else "rows"
    return "rows"


class LogMinerExport:
    """The rows of a spooled export, as OracleMapper reads them (before join_continuations).

    Raises ExportFormatError at construction when the header or the first rows show settings that
    would spoil every row. `line` of each SourceRow is the file line where its record starts."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.skipped_lines = 0
        rows = self._records()
        try:
            for n, (_, record) in enumerate(rows):
                if n >= _PRESCAN_ROWS:
                    break
                try:
                    self._convert(record)
                except _BadValue as exc:
                    if exc.whole_file:
                        raise ExportFormatError(str(exc)) from None
        finally:
            rows.close()

    def __iter__(self) -> Iterator[SourceRow]:
        for line, record in self._records():
            original = _csv_line(self.header, record)
            try:
                yield SourceRow(line, self._convert(record), original)
            except _BadValue as exc:
                yield SourceRow(line, {"__error__": str(exc), "XID": record.get("XID")}, original)

    # ---- reading ---------------------------------------------------------------------------

    def _records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with open(self.path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            last = 0
            header: list[str] | None = None
            for cells in reader:
                start, last = last + 1, reader.line_num
                if not any(c.strip() for c in cells):
                    continue  # SQL*Plus writes a blank line before the heading
                names = [_column(c) for c in cells]
                if header is None:
                    if "SCN" not in names:  # an echoed command or banner above the heading
                        self.skipped_lines += 1
                        continue
                    self.header = header = self._check_header(names)
                    continue
                if names == header:
                    continue  # the heading again: a PAGESIZE smaller than the file
                if len(cells) == 1 and _FEEDBACK.fullmatch(cells[0].strip()):
                    continue  # `N rows selected.` when FEEDBACK was left on
                if len(cells) != len(header):
                    yield start, {"__cells__": cells}
                    continue
                yield start, dict(zip(header, cells))
            if header is None:
                raise ExportFormatError(f"{self.path}: no heading line naming SCN (SET HEADING ON)")

    def _check_header(self, names: list[str]) -> list[str]:
        missing = [c for c in REQUIRED if c not in names]
        if "OPERATION_CODE" not in names and "OPERATION" not in names:
            missing.append("OPERATION_CODE or OPERATION")
        if "XID" not in names and not all(p in names for p in XID_PARTS):
            missing.append("XID or XIDUSN, XIDSLT, XIDSQN")
        if missing:
            raise ExportFormatError(f"{self.path}: the export lacks column(s) {', '.join(missing)}")
        return names

    # ---- one row ---------------------------------------------------------------------------

    def _convert(self, record: dict[str, Any]) -> dict[str, Any]:
        if "__cells__" in record:
            raise _BadValue(f"{len(record['__cells__'])} fields where the heading has {len(self.header)}")
        row: dict[str, Any] = {k: (None if v == "" else v) for k, v in record.items()}
        for name in INTEGER_COLUMNS:
            value = row.get(name)
            if value is None or _INTEGER.fullmatch(value):
                continue
            if _MANGLED_NUMBER.fullmatch(value):
                raise _BadValue(
                    f"{name} {value!r} lost digits: spool with SET NUMWIDTH 20 (or a COLUMN ... FORMAT of 20 digits)",
                    whole_file=True,
                )
            raise _BadValue(f"{name} is not an integer: {value!r}")
        row["XID"] = _xid(row)
        row["OPERATION_CODE"] = _operation_code(row)
        if row.get("TIMESTAMP") is not None:
            row["TIMESTAMP"] = _epoch_ms(row["TIMESTAMP"])
        return row


def _column(name: str) -> str:
    name = name.strip().strip('"').strip().upper()
    return name + "#" if name in ("THREAD", "SEQUENCE") else name


def _xid(row: dict[str, Any]) -> str | None:
    raw = row.get("XID")
    parts = tuple(row.get(p) for p in XID_PARTS)
    have_parts = all(p is not None for p in parts)
    if have_parts:
        usn, slt, sqn = (int(p) for p in parts)
        if not (0 <= usn < 2**16 and 0 <= slt < 2**16 and 0 <= sqn < 2**32):
            raise _BadValue(f"XIDUSN.XIDSLT.XIDSQN {usn}.{slt}.{sqn} out of range")
    if raw is None:
        # XID is RAW(8): USN and SLT as 2 bytes, SQN as 4, little-endian on Linux/x86 and Windows.
        return struct.pack("<HHI", usn, slt, sqn).hex().upper() if have_parts else None
    text = raw.strip().upper()
    if not re.fullmatch(r"[0-9A-F]{16}", text):
        raise _BadValue(f"XID is not 16 hex digits (RAW(8)): {raw!r}")
    if have_parts:
        data = bytes.fromhex(text)
        # Big-endian platforms (AIX, Solaris SPARC) write the same fields in the other byte order.
        if (usn, slt, sqn) not in (struct.unpack("<HHI", data), struct.unpack(">HHI", data)):
            raise _BadValue(f"XID {text} is not XIDUSN.XIDSLT.XIDSQN {usn}.{slt}.{sqn}")
    return text


def _operation_code(row: dict[str, Any]) -> int:
    code = int(row["OPERATION_CODE"]) if row.get("OPERATION_CODE") is not None else None
    name = (row.get("OPERATION") or "").strip().upper()
    codes = OPERATION_CODES.get(name)
    if code is None:
        if codes is None:
            raise _BadValue(f"no OPERATION_CODE and an unknown OPERATION {name!r}")
        return codes[0]
    if codes is not None and code not in codes:
        raise _BadValue(f"OPERATION {name} does not match OPERATION_CODE {code}")
    return code


def _epoch_ms(text: str) -> int:
    """A DATE printed with NLS_DATE_FORMAT 'YYYY-MM-DD HH24:MI:SS', as UTC epoch milliseconds."""
    value = text.strip()
    if not _DATE_TIME.fullmatch(value):
        raise _BadValue(
            f"TIMESTAMP {text!r} is not YYYY-MM-DD HH24:MI:SS: spool after "
            "ALTER SESSION SET NLS_DATE_FORMAT = 'YYYY-MM-DD HH24:MI:SS'",
            whole_file=True,
        )
    value = value.replace(",", ".")
    if "." in value:
        head, frac = value.split(".")
        value = f"{head}.{frac[:6]}"  # Python reads at most microseconds
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise _BadValue(f"TIMESTAMP {text!r} is not a date") from None
    return int(dt.replace(tzinfo=UTC).timestamp() * 1000)


def _csv_line(header: list[str], record: dict[str, Any]) -> bytes:
    """The record as one CSV line: what the DLQ carries for a bad row."""
    cells = record["__cells__"] if "__cells__" in record else [record.get(h, "") for h in header]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(cells)
    return buf.getvalue().encode()
