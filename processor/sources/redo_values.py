"""Values in LogMiner's SQL_REDO: literals and the few functions it writes, as Python values.

Shared by both SQL_REDO parsers (sqlglot's tree in `value_of`, the fast parser through
`datetime_iso`, `number` and `call_value`), so that they convert every value the same way.

Quoted literals stay strings (LogMiner quotes numbers too, and without the data dictionary we do
not guess types), bare numbers become long/double, NULL is None, `TO_DATE`/`TO_TIMESTAMP` become
ISO-8601 strings, `HEXTORAW` becomes bytes, `EMPTY_CLOB()`/`EMPTY_BLOB()` an empty string or bytes
(LOB fragments are then merged into them). Other functions keep their SQL text.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from sqlglot import exp


class SqlRedoError(ValueError):
    """SQL_REDO that does not parse as the statement its operation code promises."""


# Oracle datetime format elements -> strptime; FF (any precision) is handled separately.
_ORA_FORMAT = [
    ("YYYY", "%Y"),
    ("MONTH", "%B"),
    ("MON", "%b"),
    ("MM", "%m"),
    ("DD", "%d"),
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("YY", "%y"),
]


@lru_cache(maxsize=256)
def _ora_to_strptime(fmt: str) -> str:
    out, i, upper = [], 0, fmt.upper()
    while i < len(fmt):
        if upper.startswith("FF", i):
            out.append("%f")
            i += 2
            while i < len(fmt) and fmt[i].isdigit():
                i += 1
            continue
        for ora, py in _ORA_FORMAT:
            if upper.startswith(ora, i):
                out.append(py)
                i += len(ora)
                break
        else:
            out.append("%%" if fmt[i] == "%" else fmt[i])
            i += 1
    return "".join(out)


# The masks Debezium sets for its LogMiner session, read without strptime (40 µs a call). The
# pattern admits only in-range fields in ASCII digits, where strptime gives the same datetime, whose
# isoformat() is then the text itself with a T (and at most 6 fraction digits, none when zero);
# date.fromisoformat checks the day of the month. Anything else goes through strptime.
_DATE_TIME = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]) (?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
_QUICK_DATETIME = {
    "YYYY-MM-DD HH24:MI:SS": re.compile(_DATE_TIME + "()"),
    "YYYY-MM-DD HH24:MI:SS.FF": re.compile(_DATE_TIME + r"\.([0-9]+)"),
}


def datetime_iso(text: str, ora_format: str | None) -> str:
    """TO_DATE/TO_TIMESTAMP text -> ISO-8601; the literal itself when the mask is not understood."""
    if ora_format is None:
        return text
    quick = _QUICK_DATETIME.get(ora_format)
    if quick is not None:
        m = quick.fullmatch(text)
        if m is not None:
            try:
                date.fromisoformat(text[:10])
            except ValueError:
                pass  # no such day: strptime below decides
            else:
                iso = text[:10] + "T" + text[11:19]
                micro = m.group(1)[:6]
                return iso if micro.strip("0") == "" else iso + "." + micro.ljust(6, "0")
    value = text
    if "FF" in ora_format.upper():
        # strptime's %f takes at most 6 digits; Oracle writes up to 9.
        value = re.sub(r"([.,])(\d{6})\d+", r"\1\2", text)
    try:
        return datetime.strptime(value, _ora_to_strptime(ora_format)).isoformat()
    except ValueError:
        return text


def number(text: str) -> Any:
    try:
        n = int(text)
        return n if -(2**63) <= n < 2**63 else text
    except ValueError:
        return float(text)


def arg_strings(node: exp.Expression) -> list[str]:
    return [a.this for a in node.expressions if isinstance(a, exp.Literal)]


def value_of(node: exp.Expression) -> Any:
    """The Python value of a literal-like expression of redo SQL."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else number(str(node.this))
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        v = number(str(node.this.this))
        return -v if not isinstance(v, str) else "-" + v
    if isinstance(node, (exp.StrToDate, exp.StrToTime)):
        # sqlglot already rewrote the Oracle mask to strftime; read the original from the SQL text.
        text = node.this.this if isinstance(node.this, exp.Literal) else node.this.sql("oracle")
        ora = original_format(node)
        return datetime_iso(text, ora)
    if isinstance(node, exp.Anonymous):
        value = call_value(str(node.this).upper(), arg_strings(node), len(node.expressions))
        return node.sql("oracle") if value is SQL_TEXT else value
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Column, exp.Identifier)):
        # A function sqlglot knows by name (e.g. a cast): keep it as SQL text rather than guess.
        return node.sql("oracle")
    raise SqlRedoError(f"not a value: {node.sql('oracle')}")


SQL_TEXT = object()  # call_value: the call keeps its SQL text


def call_value(name: str, args: list[str], nargs: int) -> Any:
    """The value of a call sqlglot does not know (`Anonymous`), from its string-literal arguments."""
    if name == "HEXTORAW" and len(args) == 1:
        try:
            return bytes.fromhex(args[0])
        except ValueError as exc:
            raise SqlRedoError(f"bad HEXTORAW literal: {args[0]!r}") from exc
    if name in ("EMPTY_CLOB", "EMPTY_NCLOB") and not nargs:
        return ""
    if name == "EMPTY_BLOB" and not nargs:
        return b""
    if name in ("TO_DATE", "TO_TIMESTAMP", "TO_TIMESTAMP_TZ") and args:
        return datetime_iso(args[0], args[1] if len(args) > 1 else None)
    if name == "UNISTR" and len(args) == 1:
        return re.sub(r"\\([0-9A-Fa-f]{4})", lambda m: chr(int(m.group(1), 16)), args[0])
    return SQL_TEXT


def original_format(node: exp.Expression) -> str | None:
    fmt = node.args.get("format")
    if not isinstance(fmt, exp.Literal):
        return None
    # Map sqlglot's strftime mask back to Oracle's; FF survives untouched.
    back = {
        "%Y": "YYYY",
        "%m": "MM",
        "%d": "DD",
        "%H": "HH24",
        "%I": "HH",
        "%M": "MI",
        "%S": "SS",
        "%y": "YY",
        "%b": "MON",
        "%B": "MONTH",
        "%p": "AM",
    }
    return re.sub(r"%[A-Za-z]", lambda m: back.get(m.group(0), m.group(0)), fmt.this)
