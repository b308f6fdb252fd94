"""The fast SQL_REDO parser against the sqlglot one: the same Dml for every statement it accepts.

parse_dml tries processor.sources.redo_parser first and sqlglot for what it declines, so the fast
parser must never differ from sqlglot where it answers. Compared by repr, which tells int from float
from bool, -0.0 from 0.0 and key order. Two generators: LogMiner-shaped statements, which the fast
parser must also accept, and fuzzed ones (odd spacing, case, tokens LogMiner never writes), where it
may decline but must not differ, and where parse_dml must still give sqlglot's answer.
"""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.sources import sql_redo
from processor.sources.logminer_csv import LogMinerExport
from processor.sources.oracle import OracleMapper, join_continuations
from processor.sources.redo_values import SqlRedoError
from processor.sources.replay import SourceRow, map_rows, read_rows
from processor.sources.sql_redo import parse_dml, parse_dml_fast, parse_dml_sqlglot

DATA = Path(__file__).resolve().parent.parent / "data"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference(sql):
    """sqlglot's answer: a Dml, or the SqlRedoError it raises."""
    try:
        return parse_dml_sqlglot(sql)
    except SqlRedoError as exc:
        return exc


def public(sql):
    try:
        return parse_dml(sql)
    except SqlRedoError as exc:
        return exc


def same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    return repr(a) == repr(b)


def fast_answer(sql):
    """The fast parser's answer: a Dml, the SqlRedoError it raises itself, or None (declined)."""
    try:
        return parse_dml_fast(sql)
    except SqlRedoError as exc:
        return exc


def check(sql, must_accept=False):
    ref = reference(sql)
    fast = fast_answer(sql)
    if must_accept:
        assert fast is not None, f"declined: {sql!r} (sqlglot: {ref!r})"
    if fast is not None:
        assert same(fast, ref), f"{sql!r}: fast {fast!r}, sqlglot {ref!r}"
    assert same(public(sql), ref), sql


# ---- LogMiner-shaped statements ----------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
names = st.one_of(st.from_regex(r"[A-Z][A-Z0-9_$#]{0,12}", fullmatch=True), text)


def quoted(name):
    return '"' + name.replace('"', '""') + '"'


def lit(value):
    return "'" + value.replace("'", "''") + "'"


tables = st.one_of(
    st.tuples(names, names).map(lambda t: f"{quoted(t[0])}.{quoted(t[1])}"),
    names.map(quoted),
)

digits = st.integers(0, 99).map(lambda n: f"{n:02d}")
date_texts = st.one_of(
    st.builds(
        lambda y, mo, d, h, mi, s, frac: f"{y:04d}-{mo}-{d} {h}:{mi}:{s}{frac}",
        st.integers(0, 9999),
        st.sampled_from(["00", "01", "02", "06", "09", "10", "12", "13", "1"]),
        st.sampled_from(["00", "01", "09", "10", "28", "29", "30", "31", "32", "7"]),
        st.sampled_from(["00", "09", "12", "13", "23", "24", "7"]),
        digits,
        digits,
        st.sampled_from(["", ".", ".0", ".1", ".123", ".000000", ".123456", ".1234567", ".123456789", ",5"]),
    ),
    st.sampled_from(["02-JAN-24", "02-JAN-24 03.04.05.123 PM", "2024-01-02", "2024-01-02T03:04:05"]),
    text,
)
MASKS = [
    "YYYY-MM-DD HH24:MI:SS",
    "YYYY-MM-DD HH24:MI:SS.FF",
    "YYYY-MM-DD HH24:MI:SS.FF6",
    "YYYY-MM-DD HH24:MI:SS,FF3",
    "YYYY-MM-DD",
    "yyyy-mm-dd hh24:mi:ss",
    "DD-MON-RR",
    "DD-MON-RR HH.MI.SSXFF AM",
    "YYYY-MM-DD HH:MI:SS AM",
    "YYYY-MM-DD HH24:MI:SS.FF TZH:TZM",
    "%Y-%m-%d",
    "MONTH DD YYYY",
]
numbers = st.one_of(
    st.integers(-(10**25), 10**25).map(str),
    st.integers(0, 10**6).map(lambda n: f"00{n}"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["5.", ".5", "-.5", "1e5", "1E+5", "1.5e-3", "-0", "-0.0", "- 7", "-9223372036854775808"]),
)
datetime_calls = st.builds(
    lambda fn, text, mask: f"{fn}({lit(text)}, {lit(mask)})" if mask is not None else f"{fn}({lit(text)})",
    st.sampled_from(["TO_DATE", "TO_TIMESTAMP", "TO_TIMESTAMP_TZ", "to_date"]),
    date_texts,
    st.one_of(st.none(), st.sampled_from(MASKS), text),
)
values = st.one_of(
    text.map(lit),
    st.just("NULL"),
    numbers,
    datetime_calls,
    st.binary(max_size=12).map(lambda b: f"HEXTORAW('{b.hex()}')"),
    st.sampled_from(["EMPTY_CLOB()", "EMPTY_BLOB()", "EMPTY_NCLOB()", "TRUE", "FALSE", "null"]),
    st.lists(st.one_of(st.from_regex(r"\\[0-9a-f]{4}", fullmatch=True), text), max_size=4).map(
        lambda parts: f"UNISTR({lit(''.join(parts))})"
    ),
    # Calls sqlglot does not know keep their SQL text.
    st.builds(
        lambda fn, args: f"{fn}({', '.join(lit(a) for a in args)})",
        st.sampled_from(["TO_YMINTERVAL", "to_dsinterval", "SYS_GUID", "TO_BINARY_DOUBLE", "HEXTORAW", "MY_FUNC"]),
        st.lists(text, max_size=2),
    ),
)


@st.composite
def conditions(draw, min_size=1):
    terms = []
    for name, value in draw(st.lists(st.tuples(names, values), min_size=min_size, max_size=15)):
        terms.append(
            f"{quoted(name)} IS NULL" if value == "NULL" and draw(st.booleans()) else f"{quoted(name)} = {value}"
        )
    if draw(st.booleans()):
        terms.insert(draw(st.integers(0, len(terms))), f"ROWID = {lit(draw(text))}")
    return " and ".join(terms)


@st.composite
def logminer_statements(draw):
    table = draw(tables)
    end = draw(st.sampled_from(["", ";", " ;", ";\n"]))
    kind = draw(st.sampled_from(["insert", "update", "delete"]))
    if kind == "insert":
        row = draw(st.lists(st.tuples(names, values), min_size=1, max_size=15))
        cols = ",".join(quoted(n) for n, _ in row)
        return f"insert into {table}({cols}) values ({','.join(v for _, v in row)}){end}"
    if kind == "update":
        sets = ", ".join(
            f"{quoted(n)} = {v}" for n, v in draw(st.lists(st.tuples(names, values), min_size=1, max_size=4))
        )
        where = f" where {draw(conditions())}" if draw(st.integers(0, 9)) else ""
        return f"update {table} set {sets}{where}{end}"
    return f"delete from {table} where {draw(conditions())}{end}"


@SETTINGS
@given(logminer_statements())
def test_fast_parser_accepts_logminer_statements_and_agrees_with_sqlglot(sql):
    # Everything sqlglot reads in LogMiner's shape is read by the fast parser too.
    check(sql, must_accept=not isinstance(reference(sql), Exception))


@SETTINGS
@given(
    st.lists(values, min_size=1, max_size=6), st.integers(0, 6), st.sampled_from(["Unsupported Type", "HEXTORAW('zz')"])
)
def test_fast_parser_rejects_what_sqlglot_rejects_in_a_values_list_with_the_same_reason(row, at, bad):
    row.insert(min(at, len(row)), bad)
    cols = ",".join(f'"C{i}"' for i in range(len(row)))
    sql = f'insert into "S"."T"({cols}) values ({",".join(row)});'
    check(sql)
    assert isinstance(fast_answer(sql), (SqlRedoError, type(None)))


# ---- fuzzed statements ------------------------------------------------------------------------

# Mostly what LogMiner writes, sometimes not: most statements stay close to parsable.
spaces = st.sampled_from([" "] * 8 + ["", "  ", "\n", "\t", "\r\n", "\x0b", "\xa0"])
odd_values = st.sampled_from(
    [
        "1e",
        "1.5.3",
        "5d",
        "1.5f",
        "0x1F",
        "--5",
        "+5",
        "-'5'",
        "N'x'",
        "q'[x]'",
        "'a'||'b'",
        "SYS_GUID()",
        "Unsupported Type",
        "sysdate",
        "NULLX",
        "\"HEXTORAW\"('0a')",
        "HEXTORAW('zz')",
        "HEXTORAW('0a', '0b')",
        "HEXTORAW()",
        "HEXTORAW(NULL)",
        "EMPTY_CLOB('x')",
        "TO_DATE('2024-01-02', 'YYYY-MM-DD', 'NLS_DATE_LANGUAGE=AMERICAN')",
        "TO_YMINTERVAL('+01-02')",
        "(1)",
        "TO_NUMBER('1')",
        "NVL('a', 'b')",
        "CAST('1')",
        "IF('x')",
        "NULL('x')",
        "EXISTS('x')",
        "COALESCE('a', 'b')",
        "UPPER('a')",
        "NUMTODSINTERVAL(1, 'DAY')",
        "FOO('a', 'b', 'c')",
        "'C:\\'",
        "'a' /* c */",
        "'unterminated",
        "Unsupported Type",
        "unsupported  type",
        "Unsupported Type('x')",
        "NULL ('x')",
        "TRUE()",
    ]
)
any_values = st.one_of(values, values, values, odd_values)
unquoted = st.sampled_from(
    ["plain", "rowid", "Level", "date", "sysdate", "current_date", "x$y", "a#", "values", "café"]
)
any_names = st.one_of(names.map(quoted), names.map(quoted), names.map(quoted), unquoted)


def case(word, draw):
    return draw(st.sampled_from([word.lower(), word.upper(), word.capitalize()]))


@st.composite
def fuzzed_statements(draw):
    w = lambda: draw(spaces)  # noqa: E731
    table = draw(st.one_of(tables, st.tuples(any_names, any_names).map(".".join), any_names))
    kind = draw(st.sampled_from(["insert", "update", "delete"]))
    if kind == "insert":
        pairs = draw(st.lists(st.tuples(any_names, any_values), min_size=1, max_size=6))
        cols, vals = [n for n, _ in pairs], [v for _, v in pairs]
        if draw(st.integers(0, 9)) == 0:  # a column or a value too many
            (cols if draw(st.booleans()) else vals).append(draw(any_values))
        sql = (
            f"{case('insert', draw)}{w() or ' '}{case('into', draw)}{w() or ' '}{table}{w()}({w()}"
            + f"{w()},{w()}".join(cols)
            + f"{w()}){w()}{case('values', draw)}{w()}({w()}"
            + f"{w()},{w()}".join(vals)
            + f"{w()})"
        )
    else:
        terms = []
        for name, value in draw(st.lists(st.tuples(any_names, any_values), min_size=1, max_size=5)):
            op = draw(st.sampled_from(["="] * 6 + [" IS NULL", " is null", " IS NOT NULL", "=="]))
            terms.append(f"{name}{w()}{op}" if "NULL" in op.upper() else f"{name}{w()}{op}{w()}{value}")
        joiner = draw(st.sampled_from([" and "] * 6 + [" AND ", " And ", "\nand\n", " or ", ", ", " and  and "]))
        where = joiner.join(terms)
        if draw(st.integers(0, 7)) == 0:
            where = f"({where})"
        if kind == "update":
            sets = f"{w()},{w()}".join(
                f"{n}{w()}={w()}{v}"
                for n, v in draw(st.lists(st.tuples(any_names, any_values), min_size=1, max_size=3))
            )
            sql = f"{case('update', draw)}{w() or ' '}{table}{w() or ' '}{case('set', draw)}{w() or ' '}{sets}"
            if draw(st.booleans()):
                sql += f"{w() or ' '}{case('where', draw)}{w() or ' '}{where}"
        else:
            sql = f"{case('delete', draw)}{w() or ' '}{case('from', draw)}{w() or ' '}{table}{w() or ' '}{case('where', draw)}{w() or ' '}{where}"
    return draw(spaces) + sql + draw(st.sampled_from(["", ";"] * 3 + [";;", " ; ", ";\n", "; x"]))


@SETTINGS
@given(fuzzed_statements())
def test_fast_parser_never_differs_from_sqlglot_on_fuzzed_statements(sql):
    check(sql)


@SETTINGS
@given(st.text(st.sampled_from(list("\"'(),;=- .0123456789aeInNsLTUWHERrowidvalue\n")), max_size=60))
def test_fast_parser_never_differs_on_token_soup(soup):
    for sql in (soup, f'insert into "S"."T"("A") values ({soup})', f'delete from "S"."T" where "A" = {soup}'):
        check(sql)


# Lists in the dialect's shape whose parts are glued with and without whitespace (`1and`, `'x'and`,
# `NULL(`): readings can differ only where a list reads to its end, so the lists are nearly right.
glue_values = st.one_of(values, values, odd_values, st.sampled_from(["NULL", "null", "TRUE", "1", "1e5", ".5"]))
glue_ws = st.sampled_from(["", "", " ", "  ", "\t", "\n", "\r\n", "\xa0"])


@st.composite
def glued_lists(draw):
    kind = draw(st.sampled_from(["values", "conditions", "sets", "columns"]))
    n = draw(st.integers(1, 6))
    if kind == "values":
        parts = [draw(glue_ws) + draw(glue_values) + draw(glue_ws) for _ in range(n)]
        return ",".join(parts) + draw(st.sampled_from([")", ") ", ")x", ",", ""]))
    if kind == "columns":
        return ",".join(draw(glue_ws) + quoted(draw(names)) + draw(glue_ws) for _ in range(n))
    terms = []
    for _ in range(n):
        name = draw(st.one_of(names.map(quoted), st.sampled_from(["ROWID", "rowid", "ROWIDX", "plain"])))
        op = draw(st.sampled_from(["=", " = ", "= ", " IS NULL", "IS NULL", " is\tnull", " IS NULLX", "=="]))
        terms.append(f"{name}{op}" if "NULL" in op.upper() else f"{name}{op}{draw(glue_values)}")
    if kind == "sets":
        return ",".join(draw(glue_ws) + t + draw(glue_ws) for t in terms if "NULL" not in t.upper() or "=" in t)
    return (
        "".join(
            t + draw(st.sampled_from(["and", " and ", "AND", "and ", " and", "\tAND\n", " or ", "and\xa0"]))
            for t in terms[:-1]
        )
        + terms[-1]
    )


@SETTINGS
@given(glued_lists())
def test_fast_parser_never_differs_on_glued_lists(text):
    for sql in (
        f'insert into "S"."T"("A") values ({text}',
        f'delete from "S"."T" where {text}',
        f'update "S"."T" set {text}',
    ):
        check(sql)


# ---- the sample file, declines, errors ---------------------------------------------------------


def _sample_dml():
    rows = join_continuations(read_rows(DATA / "oracle_logminer.csv"))
    return [r.row["SQL_REDO"] for r in rows if str(r.row.get("OPERATION_CODE")) in ("1", "2", "3")]


def test_every_dml_statement_of_the_sample_file_agrees():
    statements = _sample_dml()
    assert len(statements) >= 10
    for sql in statements:
        check(sql)
    fast = [s for s in statements if parse_dml_fast(s) is not None]
    # Only the deliberately broken row (`values garbage`) is left to sqlglot.
    assert len(fast) == len(statements) - 1


def test_every_redo_and_undo_statement_of_the_sample_export_agrees_and_takes_the_fast_path():
    rows = join_continuations(LogMinerExport(DATA / "oracle_logminer_export.csv"))
    dml = [r.row for r in rows if r.row["OPERATION_CODE"] in (1, 2, 3)]
    statements = [r["SQL_REDO"] for r in dml] + [r["SQL_UNDO"] for r in dml if r.get("SQL_UNDO")]
    assert len(statements) >= 15
    for sql in statements:
        check(sql, must_accept=True)


@pytest.mark.parametrize(
    "sql",
    [
        """insert into hr."MixedCase"("lower", plain) values ('a', 'b');""",
        """insert into "S"."T"("A","B") values (TO_NUMBER('1'), NVL('a', 'b'));""",
        """insert into "S"."T"("A") values ("HEXTORAW"('0aff'))""",
        """insert into "S"."T"("A") values (HEXTORAW(NULL))""",
        """insert into "S"."T"("A") values (EMPTY_CLOB(), )""",
        """delete from "S"."T" where ("A" = 1 and "B" = 2)""",
        """delete from "S"."T" where "T"."A" = 1""",
        """update "S"."T" set "A"=1where"B"=2""",
        """insert into "S"."T"("A") values (TO_TIMESTAMP('2024-01-02 03:04:05', 'YYYY-MM-DD HH24:MI:SS', 'x'))""",
    ],
)
def test_declined_statements_are_parsed_by_sqlglot(sql):
    assert parse_dml_fast(sql) is None
    before = sql_redo.stats.as_dict()
    assert repr(parse_dml(sql)) == repr(parse_dml_sqlglot(sql))
    after = sql_redo.stats.as_dict()
    assert (after["fallback"] - before["fallback"], after["fast"] - before["fast"]) == (1, 0)


@pytest.mark.parametrize(
    "sql, reason",
    [
        ("""insert into "S"."T"("A","B") values ('1',Unsupported Type)""", "not a value"),
        ("""insert into "S"."T"("A") values (1e)""", "ValueError"),  # sqlglot's tree held "1e"
        ("""insert into "S"."T"("A") values (HEXTORAW('zz'))""", "HEXTORAW"),
        ("""insert into "S"."T"("A","B") values ('x')""", "2 columns but 1 values"),
        ("""delete from "S"."T" where "A" IS NOT NULL""", "WHERE term"),
        (12345, "not text"),
    ],
)
def test_statements_neither_parser_reads_raise_sql_redo_error(sql, reason):
    before = sql_redo.stats.failed
    with pytest.raises(SqlRedoError, match=reason):
        parse_dml(sql)
    assert sql_redo.stats.failed == before + 1


def test_counts_split_fast_and_fallback():
    before = sql_redo.stats.as_dict()
    parse_dml("""insert into "S"."T"("A") values ('x')""")
    parse_dml("""insert into s.t(a) values ('x')""")
    after = sql_redo.stats.as_dict()
    assert {k: after[k] - before[k] for k in after} == {"fast": 1, "fallback": 1, "failed": 0}


def test_a_row_whose_statement_crashed_sqlglot_goes_to_the_dlq_with_the_reason():
    sql = """insert into "HR"."EMP"("ID") values (1e);"""
    row = {
        "SCN": 5,
        "XID": "X1",
        "OPERATION_CODE": 1,
        "SEG_OWNER": "HR",
        "TABLE_NAME": "EMP",
        "ROW_ID": "AAA",
        "ROLLBACK": 0,
        "RS_ID": "r",
        "SSN": 0,
        "CSF": 0,
        "SQL_REDO": sql,
    }
    begin = dict(row, OPERATION_CODE=6, SQL_REDO="set transaction read write;", SCN=4)
    src = [SourceRow(i + 1, r, json.dumps(r).encode()) for i, r in enumerate([begin, row])]
    outs = list(map_rows(join_continuations(src), OracleMapper()))
    dead = [o for o in outs if o.event is None]
    assert len(dead) == 1 and dead[0].source.line == 2
    assert dead[0].reason.startswith("unparsable SQL_REDO: ValueError")
    assert json.loads(dead[0].source.original)["SQL_REDO"] == sql
