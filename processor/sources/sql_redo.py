"""Parsing Oracle LogMiner SQL_REDO into typed row images.

LogMiner reconstructs each change as a SQL statement (`insert into "S"."T"("A","B") values (...)`,
`update ... set ... where ...`, `delete from ... where ...`) and the LOB/XML/32K operations as small
PL/SQL snippets. DML goes through sqlglot's Oracle dialect, so quoting (`'O''Brien'`), NULL,
`IS NULL` and function calls are handled by a real parser; the statement shape is then validated
strictly, because sqlglot accepts much that LogMiner never writes. sqlglot takes 250-400 µs a row,
so `parse_dml` first tries redo_parser.FastParser, which reads the regular subset LogMiner writes
some 60 times faster (on its compiled scanner) and gives exactly the same result (a property test
holds the two together);
sqlglot parses what the fast parser declines, and `stats` counts both.

This module knows the statement shapes; what each value in them becomes is redo_values' concern.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from processor.sources.redo_parser import FastParser
from processor.sources.redo_values import (
    SQL_TEXT,
    SqlRedoError,
    arg_strings,
    call_value,
    datetime_iso,
    number,
    original_format,
    value_of,
)


@dataclass
class Dml:
    op: str  # INSERT | UPDATE | DELETE
    table: str  # "OWNER.TABLE" as written in the statement
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    row_id: str | None = None  # a `ROWID = '...'` term of the WHERE clause, if any


@dataclass
class LobLocator:
    """The row and column a run of LOB/XML/32K fragments writes to (SEL_LOB_LOCATOR, XML DOC BEGIN, 32K_BEGIN)."""

    table: str
    column: str
    where: dict[str, Any] = field(default_factory=dict)
    binary: bool = False
    row_id: str | None = None


@dataclass
class LobOp:
    kind: str  # WRITE | TRIM | ERASE
    data: str | bytes | None = None
    offset: int | None = None  # 0-based
    length: int | None = None


# ---- DML -----------------------------------------------------------------------------------


def _ident(node: exp.Expression) -> str:
    ident = node if isinstance(node, exp.Identifier) else node.this
    if not isinstance(ident, exp.Identifier):
        raise SqlRedoError(f"not a column name: {node.sql('oracle')}")
    # Oracle folds unquoted names to upper case.
    return ident.this if ident.quoted else ident.this.upper()


def _table_name(table: exp.Expression) -> str:
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise SqlRedoError("no target table")
    parts = [table.args.get("db"), table.this]
    return ".".join(_ident(p) for p in parts if p is not None)


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]


def parse_where(where: exp.Expression | None) -> tuple[dict[str, Any], str | None]:
    """`"A" = 'x' and "B" IS NULL and ROWID = '...'` -> ({A: 'x', B: None}, rowid)."""
    values: dict[str, Any] = {}
    row_id = None
    for term in _conjuncts(where.this if isinstance(where, exp.Where) else where):
        if isinstance(term, exp.EQ) and isinstance(term.this, exp.Column):
            name, value = _ident(term.this), value_of(term.expression)
        elif isinstance(term, exp.Is) and isinstance(term.this, exp.Column) and isinstance(term.expression, exp.Null):
            name, value = _ident(term.this), None
        else:
            raise SqlRedoError(f"unexpected WHERE term: {term.sql('oracle')}")
        if name == "ROWID" and not term.this.this.quoted:
            row_id = value
        else:
            values[name] = value
    return values, row_id


def _parse_one(sql: str) -> exp.Expression:
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise SqlRedoError("empty SQL_REDO")
    try:
        statements = sqlglot.parse(text, read="oracle")
    except SqlglotError as exc:
        raise SqlRedoError(f"unparsable SQL_REDO: {exc}".splitlines()[0]) from exc
    if len(statements) != 1 or statements[0] is None:
        raise SqlRedoError(f"expected one statement, got {len(statements)}")
    return statements[0]


@dataclass
class ParseStats:
    """How parse_dml got its statements parsed, for the replay to report."""

    fast: int = 0  # by the fast parser
    fallback: int = 0  # declined by the fast parser, parsed by sqlglot
    failed: int = 0  # parsed by neither: SqlRedoError

    def as_dict(self) -> dict[str, int]:
        return {"fast": self.fast, "fallback": self.fallback, "failed": self.failed}


stats = ParseStats()


def _sql_call(name: str, args: list[str]) -> str:
    """A call with string-literal arguments as sqlglot writes it back (Anonymous.sql)."""
    return name + "(" + ", ".join("'" + a.replace("'", "''") + "'" for a in args) + ")"


@lru_cache(maxsize=1024)
def _sqlglot_call(name: str, nargs: int, second: str | None) -> tuple[str, str | None]:
    """How sqlglot reads NAME('...'[, 'second']): ("datetime", Oracle mask), ("anonymous", None) or ("other", None).

    Asked once per function, argument count and second argument, so that the fast path takes the
    sqlglot path's turns: sqlglot rewrites TO_DATE/TO_TIMESTAMP masks to strftime and value_of maps
    them back, which is not always the identity (FF6 and %Y change on the way); a function sqlglot
    knows by name (TO_NUMBER, CAST...) keeps SQL text the fast path cannot reproduce.
    """
    args = ["", second or ""][:nargs]
    try:
        node = sqlglot.parse_one(_sql_call(name, args), read="oracle")
    except SqlglotError:
        return "other", None
    if isinstance(node, (exp.StrToDate, exp.StrToTime)) and isinstance(node.this, exp.Literal):
        return "datetime", original_format(node)
    if (
        isinstance(node, exp.Anonymous)
        and str(node.this).upper() == name
        and arg_strings(node) == args
        and node.sql("oracle") == _sql_call(name, args)
    ):
        return "anonymous", None
    return "other", None


def _fast_converter(name: str, nargs: int, second: str | None) -> Callable[[str], Any] | None:
    """For the fast parser: NAME('first'[, 'second']) as a function of first, converted as value_of
    converts what sqlglot makes of the call; None where the fast path cannot follow sqlglot."""
    kind, ora_format = _sqlglot_call(name, nargs, second)
    if kind == "datetime":
        return lambda first: datetime_iso(first, ora_format)
    if kind != "anonymous":
        return None

    def convert(first: str) -> Any:
        args = [first, second or ""][:nargs]
        value = call_value(name, args, nargs)
        return _sql_call(name, args) if value is SQL_TEXT else value

    return convert


@lru_cache(maxsize=64)
def _bare_outcome(words: str) -> tuple[bool, Any]:
    try:
        return True, parse_dml_sqlglot(f'insert into "S"."T"("A") values ({words})').after["A"]
    except SqlRedoError as exc:
        return False, str(exc)


def _fast_bare(words: str) -> Any:
    """For the fast parser: bare words in a VALUES list (`Unsupported Type`), as the sqlglot path takes them."""
    ok, outcome = _bare_outcome(words)
    if ok:
        return outcome
    raise SqlRedoError(outcome)


def fast_parser(scanner: ModuleType | None = None) -> FastParser:
    """A fast parser with this module's conversions, on `scanner` (redo_parser's chosen one by default)."""
    return FastParser(number=number, call=_fast_converter, bare=_fast_bare, error=SqlRedoError, scanner=scanner)


_fast = fast_parser()


def parse_dml_fast(sql: str) -> Dml | None:
    """The fast parser alone: the same Dml (or SqlRedoError) as parse_dml_sqlglot, or None where it declines."""
    parsed = _fast.parse(sql)
    return None if parsed is None else Dml(*parsed)


def parse_dml(sql: str) -> Dml:
    """Parse one INSERT/UPDATE/DELETE of SQL_REDO (or SQL_UNDO) into before/after images.

    The fast parser first, sqlglot for what it declines; SqlRedoError when neither can.
    """
    if isinstance(sql, str):
        try:
            parsed = _fast.parse(sql)
        except SqlRedoError:
            stats.failed += 1
            raise
        if parsed is not None:
            stats.fast += 1
            return Dml(*parsed)
    try:
        dml = parse_dml_sqlglot(sql)
    except SqlRedoError:
        stats.failed += 1
        raise
    stats.fallback += 1
    return dml


def parse_dml_sqlglot(sql: str) -> Dml:
    """parse_dml through sqlglot only: the reference the fast parser is held to."""
    if not isinstance(sql, str):
        raise SqlRedoError(f"SQL_REDO is not text but {type(sql).__name__}")
    try:
        return _parse_dml_sqlglot(sql)
    except SqlRedoError:
        raise
    except Exception as exc:  # untrusted text: any failure of sqlglot or of the tree walk is a bad row
        raise SqlRedoError(f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc


def _parse_dml_sqlglot(sql: str) -> Dml:
    stmt = _parse_one(sql)
    if isinstance(stmt, exp.Insert):
        target = stmt.this
        if not isinstance(target, exp.Schema) or not target.expressions:
            raise SqlRedoError("INSERT without a column list")
        columns = [_ident(c) for c in target.expressions]
        values = stmt.expression
        if not isinstance(values, exp.Values) or len(values.expressions) != 1:
            raise SqlRedoError("INSERT without exactly one VALUES row")
        row = values.expressions[0].expressions
        if len(row) != len(columns):
            raise SqlRedoError(f"INSERT has {len(columns)} columns but {len(row)} values")
        after = {c: value_of(v) for c, v in zip(columns, row)}
        return Dml("INSERT", _table_name(target.this), None, after)
    if isinstance(stmt, exp.Update):
        sets = stmt.expressions
        if not sets:
            raise SqlRedoError("UPDATE without SET")
        changed = {}
        for s in sets:
            if not isinstance(s, exp.EQ) or not isinstance(s.this, exp.Column):
                raise SqlRedoError(f"unexpected SET term: {s.sql('oracle')}")
            changed[_ident(s.this)] = value_of(s.expression)
        before, row_id = parse_where(stmt.args.get("where"))
        # Columns not in SET keep their before value, as in Debezium's LogMiner parser.
        return Dml("UPDATE", _table_name(stmt.this), before, {**before, **changed}, row_id)
    if isinstance(stmt, exp.Delete):
        where = stmt.args.get("where")
        if where is None:
            raise SqlRedoError("DELETE without WHERE")
        before, row_id = parse_where(where)
        return Dml("DELETE", _table_name(stmt.this), before, None, row_id)
    raise SqlRedoError(f"not an INSERT/UPDATE/DELETE: {type(stmt).__name__}")


# ---- LOB, XML and 32K snippets -------------------------------------------------------------

_SELECT_LOCATOR = re.compile(
    r"select\s+(?P<col>.+?)\s+into\s+(?P<var>\w+)\s+from\s+(?P<rest>.+?)\s+for\s+update", re.I | re.S
)
_XML_BEGIN = re.compile(r"XML\s+DOC\s+BEGIN:\s*(?P<select>select\s+.+)$", re.I | re.S)
_STMT = re.compile(r"Stmt\s*:=\s*'(?P<stmt>.*)'\s*;", re.I | re.S)
_LOB_WRITE = re.compile(r"dbms_lob\.write\(\s*\w+\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*\w+\s*\)", re.I)
_LOB_TRIM = re.compile(r"dbms_lob\.trim\(\s*\w+\s*,\s*(\d+)\s*\)", re.I)
_LOB_ERASE = re.compile(r"dbms_lob\.erase\(\s*\w+\s*,\s*(\d+)\s*,\s*(\d+)\s*\)", re.I)
_ASSIGN = re.compile(r":=\s*(?P<value>HEXTORAW\(\s*'[0-9A-Fa-f]*'?\s*\)|'(?:[^']|'')*')", re.I | re.S)


def _select_locator(select_sql: str, binary: bool) -> LobLocator:
    stmt = _parse_one(select_sql)
    if not isinstance(stmt, exp.Select) or len(stmt.expressions) != 1:
        raise SqlRedoError("LOB locator select must name exactly one column")
    from_ = stmt.args.get("from_") or stmt.args.get("from")
    if from_ is None:
        raise SqlRedoError("LOB locator select without FROM")
    where, row_id = parse_where(stmt.args.get("where"))
    return LobLocator(_table_name(from_.this), _ident(stmt.expressions[0]), where, binary, row_id)


def parse_lob_locator(sql: str) -> LobLocator:
    """SEL_LOB_LOCATOR: `... select "COL" into loc_c from "S"."T" where ... for update; ...`."""
    m = _SELECT_LOCATOR.search(sql)
    if not m:
        raise SqlRedoError("no `select ... into loc_x from ... for update` in SEL_LOB_LOCATOR")
    binary = m.group("var").lower().startswith("loc_b")
    return _select_locator(f"select {m.group('col')} from {m.group('rest')}", binary)


def parse_xml_begin(sql: str) -> LobLocator:
    """XML_BEGIN: `XML DOC BEGIN:  select "COL" from "S"."T" where ...`."""
    m = _XML_BEGIN.search(sql.strip())
    if not m:
        raise SqlRedoError("XML_BEGIN without `XML DOC BEGIN: select ...`")
    return _select_locator(m.group("select"), False)


def parse_32k_begin(sql: str) -> LobLocator:
    """32K_BEGIN: a PL/SQL block with `Stmt := 'update "S"."T" set "COL" = ... where ...';`."""
    m = _STMT.search(sql)
    inner = m.group("stmt").replace("''", "'") if m else sql
    stmt = _parse_one(inner)
    if not isinstance(stmt, exp.Update) or len(stmt.expressions) != 1:
        raise SqlRedoError("32K_BEGIN must hold an update of exactly one column")
    where, row_id = parse_where(stmt.args.get("where"))
    return LobLocator(_table_name(stmt.this), _ident(stmt.expressions[0].this), where, False, row_id)


def _assigned_value(sql: str, binary: bool) -> str | bytes:
    m = _ASSIGN.search(sql)
    if not m:
        raise SqlRedoError("no `:= '...'` or `:= HEXTORAW(...)` data in fragment")
    raw = m.group("value")
    if raw.upper().startswith("HEXTORAW"):
        # LogMiner sometimes omits the closing quote of HEXTORAW('...) in XML writes.
        hexdigits = re.search(r"'([0-9A-Fa-f]*)", raw).group(1)
        data = bytes.fromhex(hexdigits)
        return data if binary else data.decode("utf-8")
    text = raw[1:-1].replace("''", "'")
    return text.encode("latin-1") if binary else text


def parse_lob_write(sql: str, binary: bool) -> LobOp:
    """LOB_WRITE: `buf_c := 'data'; dbms_lob.write(loc_c, <amount>, <1-based offset>, buf_c);`."""
    m = _LOB_WRITE.search(sql)
    if not m:
        raise SqlRedoError("no dbms_lob.write(...) in LOB_WRITE")
    data = _assigned_value(sql, binary)
    return LobOp("WRITE", data=data, offset=int(m.group(2)) - 1, length=int(m.group(1)))


def parse_lob_trim(sql: str) -> LobOp:
    m = _LOB_TRIM.search(sql)
    if not m:
        raise SqlRedoError("no dbms_lob.trim(...) in LOB_TRIM")
    return LobOp("TRIM", length=int(m.group(1)))


def parse_lob_erase(sql: str) -> LobOp:
    """LOB_ERASE: `dbms_lob.erase(loc_c, <amount>, <1-based offset>);`."""
    m = _LOB_ERASE.search(sql)
    if not m:
        raise SqlRedoError("no dbms_lob.erase(...) in LOB_ERASE")
    return LobOp("ERASE", offset=int(m.group(2)) - 1, length=int(m.group(1)))


def parse_xml_write(sql: str) -> LobOp:
    """XML_WRITE: `XML_REDO := '<doc/>'` or `XML_REDO := HEXTORAW('...')`, optionally followed by `:<length>`."""
    if not re.match(r"\s*XML_REDO\s*:=", sql, re.I):
        raise SqlRedoError("XML_WRITE does not start with XML_REDO :=")
    if re.match(r"\s*XML_REDO\s*:=\s*NULL\b", sql, re.I):
        return LobOp("WRITE", data="", offset=None)
    return LobOp("WRITE", data=_assigned_value(sql, False), offset=None)


def parse_32k_write(sql: str) -> LobOp:
    """32K_WRITE: `buf_c := '...';` appended to the column."""
    return LobOp("WRITE", data=_assigned_value(sql, False), offset=None)
