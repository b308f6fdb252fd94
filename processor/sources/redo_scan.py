"""The lists of LogMiner's SQL_REDO, read into tokens: the pure-Python scanner.

The fast parser (redo_parser) matches the head of a statement itself and hands the rest to a scanner:
the VALUES list of an INSERT, the SET list and the WHERE conditions of an UPDATE or DELETE.
processor/sources/_redo_scan.pyx is the compiled scanner with the same functions; this one,
on Python's `re`, is the reference and the fallback when that one is not built.
tests/unit/test_redo_scan_properties.py holds the two to identical results.

    columns(text) -> [name, ...] | None                   the whole text is an INSERT's column list
    values(text, pos) -> [item, ...] | None               from just after `values (` to the closing `)`
    conditions(text, pos) -> ([name, ...], [item, ...]) | None    from just after WHERE to the end
    sets(text) -> ([name, ...], [item, ...]) | None       the whole text is the SET list

None: the text is not such a list (the parser declines the statement). `text` ends where the statement
ends (no trailing whitespace or `;`). A name is the unquoted column name, None for ROWID. An item is
what a value needs no conversion for, or a tagged tuple the parser converts:

    'text' -> the text (quotes undoubled)      NULL, `IS NULL` -> None      TRUE, FALSE -> True, False
    (NUMBER, "-" or "", "1.5e3")               a number, the minus sign apart
    (CALL, (NAME, nargs, second), first)       NAME(), NAME('first'), NAME('first', 'second'):
                                               NAME as written, arguments unquoted; first is "" and
                                               second None when absent
    (MARKER, "Unsupported Type")               LogMiner's marker for a value it cannot show

The grammar (case-insensitive, ASCII only: a Kelvin sign is not a K):
- whitespace is space, tab, CR and LF;
- identifiers are double-quoted, strings single-quoted, quotes inside doubled;
- a number is digits with an optional fraction (or a fraction alone) and exponent, followed by no
  identifier character and no dot;
- NULL, TRUE and FALSE end where an identifier would, and are not followed by `(`;
- a call is a name of letters, digits and `_` (a letter first), then up to two string arguments;
- a condition is `"C" = value`, `"C" IS NULL` or the same with the bare word ROWID, joined by AND.
"""

from __future__ import annotations

import re
from typing import Any

NUMBER, CALL, MARKER = 1, 2, 3

WS = r"[ \t\r\n]"
# Where a bare word ends for sqlglot's tokenizer: anything but an identifier character.
WORD_END = r"(?![A-Za-z0-9_$#@]|[^\x00-\x7f])"
# Quoted identifiers and strings with doubled-quote escapes, as unrolled loops (fast in `re`).
IDENT = r'"[^"]*+(?:""[^"]*+)*+"'
STR = r"'[^']*+(?:''[^']*+)*+'"
_NUM = r"(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+(?![A-Za-z0-9_$#@.]|[^\x00-\x7f])"

# One value. Groups: string literal (with its quotes), NULL/TRUE/FALSE, minus sign, number,
# function name, first and second argument (string literals with their quotes). All quantifiers are
# possessive and the alternatives never match at the same place, so nothing backtracks and a value
# reads the same with or without what follows it.
_VALUE = (
    rf"({STR})"
    rf"|((?:NULL|TRUE|FALSE){WORD_END}(?!{WS}*+\())"  # NULL( is a call
    rf"|(?:(-){WS}*+)?+({_NUM})"
    rf"|([A-Z][A-Z0-9_]*+){WS}*+\({WS}*+(?:({STR})(?:{WS}*+,{WS}*+({STR}))?+)?+{WS}*+\)"
)
VALUE_NC = re.sub(r"(?<!\\)\((?!\?)", "(?:", _VALUE)  # the same without capturing groups
FLAGS = re.IGNORECASE | re.ASCII

# Each list pattern ends in a catch-all `([\s\S]+)`, so `findall` skips no character and whatever
# does not parse becomes the last item: checking the last item checks them all.
# A VALUES item: the value (or the `Unsupported Type` marker, which sqlglot reads as an alias), then
# `,` or the closing `)` at the end of the statement.
_VALUES = re.compile(
    rf"{WS}*+(?:{_VALUE}|(Unsupported{WS}++Type){WORD_END}(?!{WS}*+\()){WS}*+(?:,|(\)){WS}*+\Z)|([\s\S]+)",
    FLAGS,
)
# A WHERE condition: `"C" = value`, `"C" IS NULL` or the same with ROWID, then AND or the end.
_CONDITIONS = re.compile(
    rf'{WS}*+(?:"([^"]*+(?:""[^"]*+)*+)"|(ROWID){WORD_END}){WS}*+(?:={WS}*+(?:{_VALUE})|IS{WS}++NULL{WORD_END})'
    rf"{WS}*+(?:(AND){WORD_END}|\Z)|([\s\S]+)",
    FLAGS,
)
# An INSERT's column list, and one column of it.
_COLUMN_LIST = re.compile(rf"{WS}*+{IDENT}(?:{WS}*+,{WS}*+{IDENT})*+{WS}*+")
_COLUMN = re.compile(r'"([^"]*+(?:""[^"]*+)*+)"')
# A SET item: `"C" = value`, then `,` or the end.
_SETS = re.compile(rf'{WS}*+"([^"]*+(?:""[^"]*+)*+)"{WS}*+={WS}*+(?:{_VALUE}){WS}*+(?:(,)|\Z)|([\s\S]+)', FLAGS)


def _unquote(quoted: str) -> str:
    """The text of a quoted string literal (quotes doubled inside)."""
    text = quoted[1:-1]
    return text.replace("''", "'") if "''" in text else text


def _item(s: str, word: str, minus: str, num: str, func: str, arg1: str, arg2: str) -> Any:
    """One value's groups -> its item (see the module docstring)."""
    if s:
        return s[1:-1].replace("''", "'") if "''" in s else s[1:-1]
    if func:
        nargs = 2 if arg2 else 1 if arg1 else 0
        return CALL, (func, nargs, _unquote(arg2) if arg2 else None), _unquote(arg1) if arg1 else ""
    if word:
        w = word.upper()
        return None if w == "NULL" else w == "TRUE"
    return NUMBER, minus, num


def columns(text: str) -> list[str] | None:
    if _COLUMN_LIST.fullmatch(text) is None:
        return None
    names = _COLUMN.findall(text)
    return [c.replace('""', '"') for c in names] if '""' in text else names


def values(text: str, pos: int) -> list[Any] | None:
    items = _VALUES.findall(text, pos)
    if not items or not items[-1][8]:  # the last item must close the list (a bad one does not)
        return None
    # Strings inline: they are most values, and a call per value is most of the time here.
    return [
        (s[1:-1].replace("''", "'") if "''" in s else s[1:-1])
        if s
        else (MARKER, marker)
        if marker
        else _item(s, w, mi, n, f, a1, a2)
        for s, w, mi, n, f, a1, a2, marker, _close, _bad in items
    ]


def conditions(text: str, pos: int) -> tuple[list[str | None], list[Any]] | None:
    items = _CONDITIONS.findall(text, pos)
    if not items or items[-1][9] or items[-1][10]:  # the last must end the statement
        return None
    names = [None if i[1] else i[0].replace('""', '"') if '"' in i[0] else i[0] for i in items]
    found = [
        (s[1:-1].replace("''", "'") if "''" in s else s[1:-1])
        if s
        else _item(s, w, mi, n, f, a1, a2)
        if w or n or f
        else None  # no value: IS NULL
        for _c, _r, s, w, mi, n, f, a1, a2, _and, _bad in items
    ]
    return names, found


def sets(text: str) -> tuple[list[str], list[Any]] | None:
    items = _SETS.findall(text)
    if not items or items[-1][8] or items[-1][9]:  # the last must end the list
        return None
    names = [i[0].replace('""', '"') if '"' in i[0] else i[0] for i in items]
    return names, [_item(*i[1:8]) for i in items]
