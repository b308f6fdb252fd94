"""The compiled SQL_REDO scanner (_redo_scan.pyx) against the pure-Python one (redo_scan.py).

Both must return identical results: the same items (compared by repr and type, which tells True from
1, None from "NULL", a call's token from a string) or both None. They are compared at every start
position of generated statements, not only where the parser calls them, and the fast parser must
give the same answer on either. Without the build this module is skipped, unless TXBUFFER_CODEC=compiled
or TXBUFFER_REDO_SCAN=compiled (`make test`), where a missing build fails it.
"""

import importlib
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.sources import redo_parser, redo_scan, sql_redo
from processor.sources.redo_values import SqlRedoError
from tests.unit.test_redo_parser_properties import SETTINGS, fuzzed_statements, glued_lists, logminer_statements

REQUIRED = "compiled" in (os.environ.get("TXBUFFER_CODEC", ""), os.environ.get("TXBUFFER_REDO_SCAN", ""))
try:
    compiled = importlib.import_module("processor.sources._redo_scan")
except ImportError:
    if REQUIRED:
        raise
    pytest.skip("the compiled SQL_REDO scanner is not built", allow_module_level=True)


def same(a, b):
    return repr(a) == repr(b) and _types(a) == _types(b)


def _types(x):
    if isinstance(x, (list, tuple)):
        return [_types(v) for v in x]
    return type(x).__name__


def assert_same_scans(text):
    for pos in range(-1, len(text) + 2):
        for fn in ("values", "conditions"):
            py, c = getattr(redo_scan, fn)(text, pos), getattr(compiled, fn)(text, pos)
            assert same(py, c), f"{fn}({text!r}, {pos}): python {py!r}, compiled {c!r}"
        for fn in ("sets", "columns"):
            py, c = getattr(redo_scan, fn)(text[pos:]), getattr(compiled, fn)(text[pos:])
            assert same(py, c), f"{fn}({text[pos:]!r}): python {py!r}, compiled {c!r}"


python_parser = sql_redo.fast_parser(redo_scan)
compiled_parser = sql_redo.fast_parser(compiled)


def answer(parser, sql):
    try:
        return parser.parse(sql)
    except SqlRedoError as exc:
        return f"SqlRedoError: {exc}"


def assert_same_parse(sql):
    py, c = answer(python_parser, sql), answer(compiled_parser, sql)
    assert same(py, c), f"{sql!r}: python scanner {py!r}, compiled {c!r}"


def test_the_parser_uses_the_compiled_scanner_when_built():
    # So the parser-vs-sqlglot agreement tests (test_redo_parser_properties) run on it.
    if os.environ.get("TXBUFFER_REDO_SCAN", "").strip().lower() == "python":
        pytest.skip("TXBUFFER_REDO_SCAN=python chose the Python scanner")
    assert redo_parser.SCANNER is compiled, redo_parser.SCANNER_REASON
    assert sql_redo._fast._scan_values is compiled.values


EVERY_POSITION = settings(SETTINGS, max_examples=100)  # each example scans a few hundred positions


@EVERY_POSITION
@given(logminer_statements())
def test_scanners_agree_on_logminer_statements_at_every_position(sql):
    text = sql.strip().rstrip(";").strip()
    assert_same_scans(text)
    assert_same_parse(sql)


@EVERY_POSITION
@given(fuzzed_statements())
def test_scanners_agree_on_fuzzed_statements_at_every_position(sql):
    assert_same_scans(sql.strip().rstrip(";").strip())
    assert_same_parse(sql)


@SETTINGS
@given(
    st.text(
        st.sampled_from(list("\"'(),=- .0123456789eEaAnNdDIsSlLuUTtRrOoWwFfHhXx_$#@\t\r\n\x00\xa0\u212a")), max_size=40
    )
)
def test_scanners_agree_on_token_soup(soup):
    assert_same_scans(soup)
    for sql in (f'insert into "S"."T"("A") values ({soup})', f'delete from "S"."T" where "A" = {soup}'):
        assert_same_parse(sql)


@SETTINGS
@given(glued_lists())
def test_scanners_agree_on_glued_lists(text):
    assert_same_scans(text)
    assert_same_parse(f'insert into "S"."T"("A") values ({text}')
    assert_same_parse(f'delete from "S"."T" where {text}')
    assert_same_parse(f'update "S"."T" set {text}')


@pytest.mark.parametrize(
    "text",
    [
        "'a''b', NULL, null, TRUE, false, -1.5e-3, - 7, .5, 5., 1E+5)",
        "NULLX)",
        "NULL ('x'))",
        "TRUE())",
        "1e)",
        "1e+)",
        "1.5.3)",
        "5x)",
        "5@, 5#, 5$, 5_, 5\xe9)",
        "NULL@)",
        "TRUE#)",
        "FALSE$)",
        "null\xa0)",
        "1\u212a)",  # a Kelvin sign is not an identifier character for ASCII rules, but it is non-ASCII
        "'\x00', '\u212a')",
        "F( 'a' , 'b' ))",
        "F('a', 3))",
        "F('a',)",
        "F('unclosed)",
        "F ())",
        "f_1('x'))",
        "Unsupported\tType)",
        "unsupported type,'x')",
        "Unsupported Type('x'))",
        "UnsupportedType)",
        "'x')  ",
        "'x') y",
        "'x',",
        "'x'",
        "",
    ],
)
def test_scanners_agree_on_value_list_edges(text):
    assert_same_scans(text)


@pytest.mark.parametrize(
    "text",
    [
        '"A" = 1 and "B" IS NULL and ROWID = \'r\'',
        '"A"IS NULL',
        '"A" is\tnull AND rowid is null',
        '"A" IS NULLX',
        '"A" ISNULL',
        '"A" = \'x\'and "B" = 2',
        '"A" = 1and "B" = 2',
        '"A" = 1 and',
        '"A" = 1 or "B" = 2',
        "ROWIDX = 1",
        '"a""b" = "c"',
        '"unclosed = 1',
        '"" = 1',
        "\"A\" = 1, \"B\" = TO_DATE('2024-01-02', 'YYYY-MM-DD')",
        '"A" = 1,',
        '"A", "B"',
        '"A" "B"',
    ],
)
def test_scanners_agree_on_condition_and_set_edges(text):
    assert_same_scans(text)


def test_scan_items_follow_the_documented_tokens():
    assert compiled.values("'O''B', NULL, TRUE, -1.5, HEXTORAW('0a'), EMPTY_CLOB(), Unsupported Type)", 0) == [
        "O'B",
        None,
        True,
        (redo_scan.NUMBER, "-", "1.5"),
        (redo_scan.CALL, ("HEXTORAW", 1, None), "0a"),
        (redo_scan.CALL, ("EMPTY_CLOB", 0, None), ""),
        (redo_scan.MARKER, "Unsupported Type"),
    ]
    assert compiled.conditions("\"A\" = TO_DATE('x', 'YYYY') and \"B\" IS NULL and ROWID = 'r'", 0) == (
        ["A", "B", None],
        [(redo_scan.CALL, ("TO_DATE", 2, "YYYY"), "x"), None, "r"],
    )


def test_a_required_scanner_that_is_not_built_fails_instead_of_falling_back(monkeypatch):
    import processor.sources

    monkeypatch.delattr(processor.sources, "_redo_scan", raising=False)
    monkeypatch.setitem(sys.modules, "processor.sources._redo_scan", None)  # the import fails
    monkeypatch.delenv("TXBUFFER_REDO_SCAN", raising=False)
    monkeypatch.setenv("TXBUFFER_CODEC", "auto")
    scanner, reason = redo_parser._choose_scanner()
    assert scanner is redo_scan and reason.startswith("compiled scanner unavailable")
    for name, value in (("TXBUFFER_CODEC", "compiled"), ("TXBUFFER_REDO_SCAN", "compiled")):
        monkeypatch.setenv(name, value)
        with pytest.raises(ImportError, match="compiled SQL_REDO scanner is required"):
            redo_parser._choose_scanner()
    monkeypatch.setenv("TXBUFFER_REDO_SCAN", "python")  # an explicit choice wins
    assert redo_parser._choose_scanner() == (redo_scan, "TXBUFFER_REDO_SCAN=python")
