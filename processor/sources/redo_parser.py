"""A fast parser for the DML that LogMiner writes in SQL_REDO and SQL_UNDO.

LogMiner writes a narrow, regular dialect:

    insert into "S"."T"("A","B") values ('x',NULL);
    update "S"."T" set "A" = 'x', "B" = NULL where "K" = '1' and "C" IS NULL and ROWID = 'AAAx';
    delete from "S"."T" where "K" = '1' and ROWID = 'AAAx';

A regular expression matches the head of the statement (and checks the SET list); a scanner then
reads the VALUES list, the SET list or the WHERE conditions into tokens (redo_scan describes them),
which are converted here. The scanner is the compiled one (_redo_scan.pyx, built by setup.py) when it
is built, else redo_scan on Python's `re`: both give identical tokens. TXBUFFER_REDO_SCAN=python
picks the Python one; TXBUFFER_REDO_SCAN=compiled, or TXBUFFER_CODEC=compiled (set by `make test`),
makes a missing build an ImportError instead of a fallback.

`sql_redo.parse_dml` tries this parser first and sqlglot for whatever it declines, and the two must
give exactly the same result, so the language accepted here is deliberately narrower:

- identifiers are double-quoted, as LogMiner writes them; the one bare word is `ROWID` in WHERE;
- values are string literals, NULL, TRUE/FALSE, numbers with an optional minus sign, and function
  calls with up to two string-literal arguments (TO_DATE, TO_TIMESTAMP, HEXTORAW, EMPTY_CLOB(),
  TO_YMINTERVAL...);
- whitespace is space, tab, CR and LF; no comments, no parentheses around conditions.

Everything else, including every malformed statement, is declined and left to sqlglot, which also
produces the error message. How a value converts is not decided here: sql_redo supplies the
conversions, so that both paths share them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from processor.core import codec
from processor.sources import redo_scan
from processor.sources.redo_scan import CALL, FLAGS, IDENT, NUMBER, VALUE_NC, WORD_END, WS

# (op, table, before, after, row_id), the fields of sql_redo.Dml.
Parsed = tuple[str, str, dict[str, Any] | None, dict[str, Any] | None, str | None]


def _choose_scanner() -> tuple[ModuleType, str]:
    """(scanner module, why): the compiled one when built, unless the environment says otherwise."""
    mode = os.environ.get("TXBUFFER_REDO_SCAN", "auto").strip().lower() or "auto"
    if mode not in ("auto", "compiled", "python"):
        raise ValueError(f"TXBUFFER_REDO_SCAN must be auto, compiled or python, not {mode!r}")
    if mode == "python":
        return redo_scan, "TXBUFFER_REDO_SCAN=python"
    required = mode == "compiled" or codec.builds_required()
    try:
        from processor.sources import _redo_scan  # type: ignore[attr-defined]
    except ImportError as exc:
        if required:
            raise ImportError(f"the compiled SQL_REDO scanner is required but not built: {exc}") from exc
        return redo_scan, f"compiled scanner unavailable: {exc}"
    return _redo_scan, "built"


SCANNER, SCANNER_REASON = _choose_scanner()


class _Decline(Exception):
    """This statement is not in the subset parsed here; sqlglot decides."""


_TABLE = rf"({IDENT})(?:\.({IDENT}))?+"
_SET_ITEM = rf"{IDENT}{WS}*+={WS}*+(?:{VALUE_NC})"
_INSERT = re.compile(
    rf"INSERT{WS}++INTO{WS}++{_TABLE}{WS}*+\({WS}*+({IDENT}(?:{WS}*+,{WS}*+{IDENT})*+){WS}*+\)"
    rf"{WS}*+VALUES{WS}*+\(",
    FLAGS,
)
_UPDATE = re.compile(
    rf"UPDATE{WS}++{_TABLE}{WS}++SET{WS}++({_SET_ITEM}(?:{WS}*+,{WS}*+{_SET_ITEM})*+)"
    rf"(?:{WS}++(WHERE){WORD_END}|\Z)",
    FLAGS,
)
_DELETE = re.compile(rf"DELETE{WS}++FROM{WS}++{_TABLE}{WS}++WHERE{WORD_END}", FLAGS)

_UNKNOWN = object()  # not yet in the converter cache


def _unquote(quoted: str) -> str:
    """The text of a quoted identifier (quotes doubled inside)."""
    text = quoted[1:-1]
    return text.replace('""', '"') if '""' in text else text


class FastParser:
    """Parses the LogMiner subset; `parse` returns None for anything else.

    The conversions come from sql_redo, so that both parsers share them:
    - `number(text)`: an unsigned numeric literal;
    - `call(NAME, nargs, second)`: how a call with string-literal arguments converts, as a function
      of its first argument (unquoted; "" when there is none), or None where the fast path must
      leave the call to sqlglot. Asked once per name, argument count and second argument;
    - `bare(words)`: the value of a marker such as `Unsupported Type` in a VALUES list.
    A conversion raises `error` where sqlglot would reject the statement with the same message
    (conversions run in sqlglot's order, after the whole statement has been read), and any other
    ValueError to decline. `scanner` reads the lists (redo_scan's interface); the chosen one by default.
    """

    def __init__(
        self,
        *,
        number: Callable[[str], Any],
        call: Callable[[str, int, str | None], Callable[[str], Any] | None],
        bare: Callable[[str], Any],
        error: type[ValueError],
        scanner: ModuleType | None = None,
    ):
        self._number = number
        self._call = call
        self._bare = bare
        self._error = error
        scanner = scanner or SCANNER
        self._scan_columns, self._scan_values = scanner.columns, scanner.values
        self._scan_conditions, self._scan_sets = scanner.conditions, scanner.sets
        self._converters: dict[tuple[str, int, str | None], Any] = {}
        self._tables: dict[tuple[str, str], str] = {}  # ('"S"', '"T"') -> "S.T"

    def parse(self, sql: str) -> Parsed | None:
        """The statement's (op, table, before, after, row_id); None where it is left to sqlglot."""
        try:
            return self._parse(sql)
        except _Decline:
            return None
        except self._error:
            raise
        except ValueError:
            return None

    def _parse(self, sql: str) -> Parsed:
        text = sql.strip().rstrip(";").strip()
        head = text[:1]
        if head in "iI":
            m = _INSERT.match(text)
            if m is None:
                raise _Decline
            schema, name, cols = m.groups()
            columns = self._scan_columns(cols)
            items = self._scan_values(text, m.end())
            if columns is None or items is None or len(items) != len(columns):
                raise _Decline
            return "INSERT", self._table(schema, name), None, dict(zip(columns, self._converted(items))), None
        if head in "uU":
            m = _UPDATE.match(text)
            if m is None:
                raise _Decline
            schema, name, sets, where = m.groups()
            conditions = self._scan_conditions(text, m.end()) if where else ([], [])
            set_list = self._scan_sets(sets)
            if conditions is None or set_list is None:
                raise _Decline
            # sqlglot's order: SET values convert before the WHERE values.
            changed = dict(zip(set_list[0], self._converted(set_list[1])))
            before, row_id = self._where(conditions)
            return "UPDATE", self._table(schema, name), before, {**before, **changed}, row_id
        if head in "dD":
            m = _DELETE.match(text)
            if m is None:
                raise _Decline
            conditions = self._scan_conditions(text, m.end())
            if conditions is None:
                raise _Decline
            before, row_id = self._where(conditions)
            return "DELETE", self._table(*m.groups()), before, None, row_id
        raise _Decline

    def _table(self, schema: str, name: str | None) -> str:
        """ "OWNER.TABLE" of the quoted parts; remembered, since a stream names few tables."""
        key = (schema, name or "")
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) >= 4096:
                self._tables.clear()
            table = self._tables[key] = _unquote(schema) if name is None else _unquote(schema) + "." + _unquote(name)
        return table

    def _where(self, conditions: tuple[list[str | None], list[Any]]) -> tuple[dict[str, Any], Any]:
        """The scanned WHERE conditions -> (column: value, the value ROWID is compared with, if any)."""
        names, items = conditions
        before: dict[Any, Any] = dict(zip(names, self._converted(items)))
        return before, before.pop(None, None)  # ROWID's name is None

    def _converted(self, items: list[Any]) -> list[Any]:
        """The scanner's items as values, in order (a conversion may raise)."""
        token = self._token
        return [token(v) if v.__class__ is tuple else v for v in items]

    def _token(self, token: tuple[Any, ...]) -> Any:
        """The value of a tagged item: a call, a number or a marker (see redo_scan)."""
        tag = token[0]
        if tag == CALL:
            key = token[1]
            convert = self._converters.get(key, _UNKNOWN)
            if convert is _UNKNOWN:
                if len(self._converters) >= 1024:  # masks come from the data: keep the cache bounded
                    self._converters.clear()
                convert = self._converters[key] = self._call(key[0].upper(), key[1], key[2])
            if convert is None:
                raise _Decline
            return convert(token[2])
        if tag == NUMBER:
            n = self._number(token[2])
            if token[1]:
                return "-" + n if isinstance(n, str) else -n
            return n
        return self._bare(token[1])
