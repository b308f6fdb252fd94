"""A fast parser for the DML that LogMiner writes in SQL_REDO and SQL_UNDO.

LogMiner writes a narrow, regular dialect:

    insert into "S"."T"("A","B") values ('x',NULL);
    update "S"."T" set "A" = 'x', "B" = NULL where "K" = '1' and "C" IS NULL and ROWID = 'AAAx';
    delete from "S"."T" where "K" = '1' and ROWID = 'AAAx';

Regular expressions do the reading in C: one matches the head of the statement (and the SET list),
then `findall` returns every value or condition as a tuple of groups, and a comprehension converts
them. All quantifiers are possessive, so a mismatch never backtracks. `sql_redo.parse_dml` tries this first and sqlglot for whatever it declines, and
the two must give exactly the same result, so the language accepted here is deliberately narrower:

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

import re
from collections.abc import Callable
from typing import Any

# (op, table, before, after, row_id), the fields of sql_redo.Dml.
Parsed = tuple[str, str, dict[str, Any] | None, dict[str, Any] | None, str | None]


class _Decline(Exception):
    """This statement is not in the subset parsed here; sqlglot decides."""


_WS = r"[ \t\r\n]"
# Where a bare word ends for sqlglot's tokenizer: anything but an identifier character.
_WORD_END = r"(?![A-Za-z0-9_$#@]|[^\x00-\x7f])"
# Quoted identifiers and strings with doubled-quote escapes, as unrolled loops (fast in `re`).
_IDENT = r'"[^"]*+(?:""[^"]*+)*+"'
_STR = r"'[^']*+(?:''[^']*+)*+'"
_NUM = r"(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+(?![A-Za-z0-9_$#@.]|[^\x00-\x7f])"

# One value. Groups: string literal (with its quotes), NULL/TRUE/FALSE, minus sign, number,
# function name, first and second argument (string literals with their quotes). The alternatives
# never match at the same place, so a value reads the same with or without what follows it.
_VALUE = (
    rf"({_STR})"
    rf"|((?:NULL|TRUE|FALSE){_WORD_END}(?!{_WS}*+\())"  # NULL( is a call
    rf"|(?:(-){_WS}*+)?+({_NUM})"
    rf"|([A-Z][A-Z0-9_]*+){_WS}*+\({_WS}*+(?:({_STR})(?:{_WS}*+,{_WS}*+({_STR}))?+)?+{_WS}*+\)"
)
_VALUE_NC = re.sub(r"(?<!\\)\((?!\?)", "(?:", _VALUE)  # the same without capturing groups
_FLAGS = re.IGNORECASE | re.ASCII  # ASCII: no Unicode case folding (a Kelvin sign is not a K)

_TABLE = rf"({_IDENT})(?:\.({_IDENT}))?+"
_SET_ITEM = rf"{_IDENT}{_WS}*+={_WS}*+(?:{_VALUE_NC})"
_INSERT = re.compile(
    rf"INSERT{_WS}++INTO{_WS}++{_TABLE}{_WS}*+\({_WS}*+({_IDENT}(?:{_WS}*+,{_WS}*+{_IDENT})*+){_WS}*+\)"
    rf"{_WS}*+VALUES{_WS}*+\(",
    _FLAGS,
)
_UPDATE = re.compile(
    rf"UPDATE{_WS}++{_TABLE}{_WS}++SET{_WS}++({_SET_ITEM}(?:{_WS}*+,{_WS}*+{_SET_ITEM})*+)"
    rf"(?:{_WS}++(WHERE){_WORD_END}|\Z)",
    _FLAGS,
)
_DELETE = re.compile(rf"DELETE{_WS}++FROM{_WS}++{_TABLE}{_WS}++WHERE{_WORD_END}", _FLAGS)

# The items after a head, read by `findall`. Each pattern ends in a catch-all `([\s\S]+)`, so no
# character is skipped and whatever does not parse becomes the last item: checking the last item
# checks them all.
_COLUMNS = re.compile(r'"([^"]*+(?:""[^"]*+)*+)"')
_SETS = re.compile(rf'"([^"]*+(?:""[^"]*+)*+)"{_WS}*+={_WS}*+(?:{_VALUE})', _FLAGS)  # on validated text
# A VALUES item: the value (or LogMiner's `Unsupported Type` marker, which sqlglot reads as an
# alias), then `,` or the closing `)` at the end of the statement.
_VALUES = re.compile(
    rf"{_WS}*+(?:{_VALUE}|(Unsupported{_WS}++Type){_WORD_END}(?!{_WS}*+\()){_WS}*+(?:,|(\)){_WS}*+\Z)|([\s\S]+)",
    _FLAGS,
)
# A WHERE condition: `"C" = value`, `"C" IS NULL` or the same with ROWID, then AND or the end.
_CONDITIONS = re.compile(
    rf'{_WS}*+(?:"([^"]*+(?:""[^"]*+)*+)"|(ROWID){_WORD_END}){_WS}*+(?:={_WS}*+(?:{_VALUE})|IS{_WS}++NULL{_WORD_END})'
    rf"{_WS}*+(?:(AND){_WORD_END}|\Z)|([\s\S]+)",
    _FLAGS,
)

_UNKNOWN = object()  # not yet in the converter cache
_ROWID = object()  # the key of the ROWID condition while the WHERE dict is built


def _unquote(quoted: str) -> str:
    """The text of a quoted identifier or string literal (quotes doubled inside)."""
    text = quoted[1:-1]
    if quoted[0] + quoted[0] in text:
        return text.replace(quoted[0] + quoted[0], quoted[0])
    return text


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
    ValueError to decline.
    """

    def __init__(
        self,
        *,
        number: Callable[[str], Any],
        call: Callable[[str, int, str | None], Callable[[str], Any] | None],
        bare: Callable[[str], Any],
        error: type[ValueError],
    ):
        self._number = number
        self._call = call
        self._bare = bare
        self._error = error
        self._converters: dict[tuple[str, int, str], Any] = {}
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
            columns = _COLUMNS.findall(cols)
            if '""' in cols:
                columns = [c.replace('""', '"') for c in columns]
            items = _VALUES.findall(text, m.end())
            if not items or not items[-1][8] or len(items) != len(columns):
                raise _Decline  # the last item must close the list (a bad one does not)
            return "INSERT", self._table(schema, name), None, dict(zip(columns, self._values(items))), None
        if head in "uU":
            m = _UPDATE.match(text)
            if m is None:
                raise _Decline
            schema, name, sets, where = m.groups()
            conditions = self._conditions(text, m.end()) if where else None
            other = self._other
            changed = {
                (col.replace('""', '"') if '"' in col else col): (
                    (s[1:-1].replace("''", "'") if "''" in s else s[1:-1]) if s else other(w, mi, n, f, a1, a2)
                )
                for col, s, w, mi, n, f, a1, a2 in _SETS.findall(sets)
            }
            before, row_id = self._where(conditions) if conditions else ({}, None)
            return "UPDATE", self._table(schema, name), before, {**before, **changed}, row_id
        if head in "dD":
            m = _DELETE.match(text)
            if m is None:
                raise _Decline
            before, row_id = self._where(self._conditions(text, m.end()))
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

    def _values(self, items: list[tuple[str, ...]]) -> list[Any]:
        other = self._other
        return [
            (s[1:-1].replace("''", "'") if "''" in s else s[1:-1])
            if s
            else None
            if w == "NULL"
            else self._bare(marker)
            if marker
            else other(w, mi, n, f, a1, a2)
            for s, w, mi, n, f, a1, a2, marker, _close, _bad in items
        ]

    @staticmethod
    def _conditions(text: str, pos: int) -> list[tuple[str, ...]]:
        items = _CONDITIONS.findall(text, pos)
        if not items or items[-1][9] or items[-1][10]:  # the last must end the statement
            raise _Decline
        return items

    def _where(self, items: list[tuple[str, ...]]) -> tuple[dict[str, Any], Any]:
        """The WHERE conditions -> (column: value, the value ROWID is compared with, if any)."""
        other = self._other
        before: dict[Any, Any] = {
            (_ROWID if rowid else col.replace('""', '"') if '"' in col else col): (
                (s[1:-1].replace("''", "'") if "''" in s else s[1:-1])
                if s
                else None
                if not (n or f) and w in ("", "NULL")  # IS NULL, = NULL
                else other(w, mi, n, f, a1, a2)
            )
            for col, rowid, s, w, mi, n, f, a1, a2, _and, _bad in items
        }
        return before, before.pop(_ROWID, None)

    def _other(self, word: str, minus: str, num: str, func: str, arg1: str, arg2: str) -> Any:
        """A value other than a string literal."""
        if func:
            nargs = 2 if arg2 else 1 if arg1 else 0
            key = (func, nargs, arg2)
            convert = self._converters.get(key, _UNKNOWN)
            if convert is _UNKNOWN:
                if len(self._converters) >= 1024:  # masks come from the data: keep the cache bounded
                    self._converters.clear()
                convert = self._converters[key] = self._call(func.upper(), nargs, _unquote(arg2) if arg2 else None)
            if convert is None:
                raise _Decline
            return convert(_unquote(arg1) if arg1 else "")
        if word:
            w = word.upper()
            return None if w == "NULL" else w == "TRUE"
        n = self._number(num)
        if minus:
            return "-" + n if isinstance(n, str) else -n
        return n
