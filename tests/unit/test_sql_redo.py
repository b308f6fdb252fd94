"""The SQL_REDO parser: LogMiner's reconstructed DML and LOB snippets -> typed row images."""

import pytest

from processor.sources import sql_redo
from processor.sources.redo_values import SqlRedoError
from processor.sources.sql_redo import parse_dml


def test_insert_handles_quotes_null_and_functions():
    dml = parse_dml(
        """insert into "HR"."EMP"("ID","NAME","HIRED","TS","PIC","DOC","BLOB","N","NEG","NOTE") values """
        """('1','O''Brien',TO_DATE('2024-01-02 03:04:05', 'YYYY-MM-DD HH24:MI:SS'),"""
        """TO_TIMESTAMP('2024-01-02 03:04:05.123456789', 'YYYY-MM-DD HH24:MI:SS.FF'),"""
        """HEXTORAW('0aff'),EMPTY_CLOB(),EMPTY_BLOB(),42,-12.5,NULL);"""
    )
    assert dml.op == "INSERT" and dml.table == "HR.EMP" and dml.before is None
    assert dml.after == {
        "ID": "1",
        "NAME": "O'Brien",
        "HIRED": "2024-01-02T03:04:05",
        "TS": "2024-01-02T03:04:05.123456",
        "PIC": b"\n\xff",
        "DOC": "",
        "BLOB": b"",
        "N": 42,
        "NEG": -12.5,
        "NOTE": None,
    }


def test_update_after_keeps_unchanged_columns_and_reads_rowid():
    dml = parse_dml(
        """update "HR"."EMP" set "NAME" = 'x', "SAL" = NULL where "ID" = '1' and "NAME" = 'it''s' """
        """and "SAL" IS NULL and "DEPT" = '7' and ROWID = 'AAAx';"""
    )
    assert dml.op == "UPDATE"
    assert dml.before == {"ID": "1", "NAME": "it's", "SAL": None, "DEPT": "7"}
    assert dml.after == {"ID": "1", "NAME": "x", "SAL": None, "DEPT": "7"}
    assert dml.row_id == "AAAx"


def test_delete_before_image_from_where_clause():
    dml = parse_dml("""delete from "HR"."EMP" where "ID" = '3' and "NOTE" = 'a "quoted" and; semicolon';""")
    assert dml.op == "DELETE" and dml.after is None
    assert dml.before == {"ID": "3", "NOTE": 'a "quoted" and; semicolon'}


def test_quoted_identifiers_keep_case_unquoted_fold_to_upper():
    dml = parse_dml("""insert into hr."MixedCase"("lower", plain) values ('a', 'b');""")
    assert dml.table == "HR.MixedCase"
    assert dml.after == {"lower": "a", "PLAIN": "b"}


def test_unknown_function_keeps_its_sql_text():
    dml = parse_dml("""insert into "S"."T"("A","B") values (UNISTR('caf\\00e9'), SYS_GUID());""")
    assert dml.after["A"] == "café"
    assert "SYS_GUID" in dml.after["B"].upper()


@pytest.mark.parametrize(
    "sql, message",
    [
        ('insert into "S"."T" values garbage', "column list"),
        ('update "S"."T" set', "SET"),
        ('delete from "S"."T"', "WHERE"),
        ('delete from "S"."T" where "A" = 1 or "B" = 2', "WHERE term"),
        ('insert into "S"."T"("A","B") values (1)', "2 columns but 1 values"),
        ('insert into "S"."T"("A") values ("B")', "not a value"),
        ("select 1 from dual", "not an INSERT"),
        ('insert into "S"."T"("A") values (\'unterminated', "unparsable"),
        ("", "empty"),
        ('insert into "S"."T"("A") values (HEXTORAW(\'zz\'))', "HEXTORAW"),
    ],
)
def test_malformed_statements_are_rejected(sql, message):
    with pytest.raises(SqlRedoError, match=message):
        parse_dml(sql)


def test_lob_locator_write_trim_erase():
    loc = sql_redo.parse_lob_locator(
        'DECLARE\n loc_b BLOB;\n buf_b RAW(6426);\nBEGIN\n select "PIC" into loc_b from "HR"."EMP" '
        "where \"ID\" = '1' and ROWID = 'AAAx' for update;\nEND;"
    )
    assert (loc.table, loc.column, loc.where, loc.binary, loc.row_id) == ("HR.EMP", "PIC", {"ID": "1"}, True, "AAAx")
    w = sql_redo.parse_lob_write(" buf_c := 'it''s'; \n dbms_lob.write(loc_c, 4, 10, buf_c);\nEND;", False)
    assert (w.data, w.offset, w.length) == ("it's", 9, 4)  # 1-based in Oracle, 0-based here
    b = sql_redo.parse_lob_write(" buf_b := HEXTORAW('00ff'); dbms_lob.write(loc_b, 2, 1, buf_b);", True)
    assert b.data == b"\x00\xff" and b.offset == 0
    assert sql_redo.parse_lob_trim(" dbms_lob.trim(loc_c, 12);").length == 12
    e = sql_redo.parse_lob_erase(" dbms_lob.erase(loc_c, 2, 6);")
    assert (e.offset, e.length) == (5, 2)


def test_xml_and_32k_snippets():
    loc = sql_redo.parse_xml_begin('XML DOC BEGIN:  select "BODY" from "HR"."DOCS" where "ID" = \'10\'')
    assert (loc.table, loc.column, loc.where) == ("HR.DOCS", "BODY", {"ID": "10"})
    assert sql_redo.parse_xml_write("XML_REDO := '<a>it''s</a>' :14").data == "<a>it's</a>"
    # LogMiner may leave the HEXTORAW quote unclosed; the bytes are UTF-8 XML.
    assert sql_redo.parse_xml_write("XML_REDO := HEXTORAW('3c612f3e) :4").data == "<a/>"
    big = sql_redo.parse_32k_begin(
        'DECLARE\n Stmt VARCHAR2(4000);\nBEGIN\n Stmt := \'update "HR"."BIG" set "TXT" = NULL where "ID" = \'\'5\'\'\';'
    )
    assert (big.table, big.column, big.where) == ("HR.BIG", "TXT", {"ID": "5"})
    assert sql_redo.parse_32k_write(" buf_c := 'a''b';").data == "a'b"


@pytest.mark.parametrize(
    "fn, sql",
    [
        (sql_redo.parse_lob_locator, "select nothing"),
        (sql_redo.parse_lob_write, "dbms_lob.write(loc_c, 1, 1, buf_c);"),  # no data assignment
        (sql_redo.parse_lob_trim, "dbms_lob.erase(loc_c, 1, 1);"),
        (sql_redo.parse_lob_erase, "dbms_lob.trim(loc_c, 1);"),
        (sql_redo.parse_xml_begin, 'select "X" from "T"'),
        (sql_redo.parse_xml_write, "buf := 'x'"),
    ],
)
def test_malformed_lob_snippets_are_rejected(fn, sql):
    with pytest.raises(SqlRedoError):
        fn(sql, False) if fn is sql_redo.parse_lob_write else fn(sql)
