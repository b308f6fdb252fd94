"""Oracle LogMiner replay: every mapped OPERATION_CODE, partial rollback, LOB fragments, DLQ cases.

The mapper is pure, so these tests need no broker. The sample file's events are replayed through the
reference model of the transaction semantics, and the resulting tables are checked row for row.
"""

import csv
import json

import pytest
from structlog.testing import capture_logs

from processor.core import events
from processor.sources.oracle import OracleMapper, join_continuations
from processor.sources.replay import SourceRow, map_rows, read_rows
from processor.testing.reference import ReferenceModel

from ..sourcekit import DATA, KEEP, table_state


def _dec(v):
    if isinstance(v, dict) and set(v) == {"$hex"}:
        return bytes.fromhex(v["$hex"])
    if isinstance(v, dict):
        return {k: _dec(x) for k, x in v.items()}
    return v


def run(rows, mapper=None):
    """Map rows (dicts) -> (events, dead letters)."""
    src = [SourceRow(i + 1, r, json.dumps(r).encode()) for i, r in enumerate(rows)]
    outs = list(map_rows(join_continuations(src), mapper or OracleMapper()))
    return [o.event for o in outs if o.event], [(o.source.line, o.reason) for o in outs if o.event is None]


def row(code, xid="X1", scn=100, sql=None, table="HR.EMP", rowid=None, **extra):
    owner, name = table.split(".") if table else (None, None)
    r = {
        "SCN": scn,
        "XID": xid,
        "OPERATION_CODE": code,
        "SEG_OWNER": owner,
        "TABLE_NAME": name,
        "ROW_ID": rowid,
        "ROLLBACK": 0,
        "RS_ID": f" 0x0001.{scn}.0010 ",
        "SSN": 0,
        "CSF": 0,
        "SQL_REDO": sql,
        "USERNAME": "HR",
        "CLIENT_ID": "app",
        "THREAD#": 1,
        "SEQUENCE#": 9,
        "INFO": None,
    }
    r.update(extra)
    return r


INS = """insert into "HR"."EMP"("ID","NAME") values ('{id}','{name}');"""


def feed(evs):
    model = ReferenceModel()
    for offset, e in enumerate(evs):
        model.feed(0, offset, events.encode_raw(e))  # through Avro: every event must fit the schema
    return model


# ---- the sample file -------------------------------------------------------------------------


def test_sample_file_maps_to_the_expected_events_and_dead_letters():
    expected = json.loads((DATA / "oracle_logminer.expected.json").read_text())
    outs = list(map_rows(join_continuations(read_rows(DATA / "oracle_logminer.csv")), OracleMapper()))
    got = [{k: o.event[k] for k in KEEP} for o in outs if o.event]
    assert got == [_dec(e) for e in expected["events"]]
    assert [{"line": o.source.line, "reason": o.reason} for o in outs if o.event is None] == expected["dlq"]


def test_sample_file_replayed_through_the_reference_model_gives_the_tables():
    expected = json.loads((DATA / "oracle_logminer.expected.json").read_text())
    evs = [
        o.event
        for o in map_rows(join_continuations(read_rows(DATA / "oracle_logminer.csv")), OracleMapper())
        if o.event
    ]
    model = feed(evs)
    assert model.dlq == []
    state = table_state(model)
    for table, rows in expected["tables"].items():
        want = {json.dumps({"ID": r["ID"]}, sort_keys=True): _dec(r) for r in rows}
        assert state.get(table, {}) == want, table
    outcomes = model.outcomes(0)
    assert outcomes["0B0003001E040000"] == "rolled_back"  # op 36
    assert outcomes["0A000400D0030000"] == "rolled_back"  # op 27 replication marker


def test_json_lines_input_maps_like_csv(tmp_path):
    with open(DATA / "oracle_logminer.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({k.lower(): v for k, v in r.items()}) + "\n" for r in rows))
    from_csv = [o.event for o in map_rows(join_continuations(read_rows(DATA / "oracle_logminer.csv")), OracleMapper())]
    from_json = [o.event for o in map_rows(join_continuations(read_rows(path)), OracleMapper())]
    assert from_json == from_csv


# ---- operation codes ---------------------------------------------------------------------------


def test_start_dml_commit_codes_6_1_3_2_7():
    evs, dlq = run(
        [
            row(6, scn=1),
            row(1, scn=2, sql=INS.format(id=1, name="a"), rowid="R1"),
            row(3, scn=3, rowid="R1", sql="""update "HR"."EMP" set "NAME" = 'b' where "ID" = '1' and "NAME" = 'a';"""),
            row(2, scn=4, rowid="R1", sql="""delete from "HR"."EMP" where "ID" = '1' and "NAME" = 'b';"""),
            row(7, scn=5, COMMIT_SCN=5, table=None),
        ]
    )
    assert dlq == []
    assert [(e["op"], e["seq"], e["scn"]) for e in evs] == [
        ("BEGIN", 0, 1),
        ("INSERT", 1, 2),
        ("UPDATE", 2, 3),
        ("DELETE", 3, 4),
        ("COMMIT", 4, 5),
    ]
    ins, upd, dele = evs[1:4]
    assert ins["key"] == {"ID": "1"} and ins["after"] == {"ID": "1", "NAME": "a"} and ins["row_id"] == "R1"
    assert upd["before"] == {"ID": "1", "NAME": "a"} and upd["after"] == {"ID": "1", "NAME": "b"}
    assert dele["before"] == {"ID": "1", "NAME": "b"} and dele["after"] is None
    assert all(e["user"] == "HR" and e["client"] == "app" for e in evs)


def test_commit_uses_commit_scn_and_heartbeat_watermark_per_thread():
    mapper = OracleMapper()
    evs, _ = run(
        [
            row(6, scn=10, **{"THREAD#": 2}),
            row(7, scn=11, COMMIT_SCN=12, table=None, **{"THREAD#": 2}),
            row(6, xid="X2", scn=13),
            row(7, xid="X2", scn=14, table=None),
        ],
        mapper,
    )
    assert [(e["op"], e["scn"], e["thread"]) for e in evs] == [
        ("BEGIN", 10, 2),
        ("COMMIT", 12, 2),
        ("BEGIN", 13, 1),
        ("COMMIT", 14, 1),
    ]
    assert mapper.watermarks() == {2: 12, 1: 14}


def test_rollback_code_36_ends_the_transaction():
    evs, _ = run([row(6), row(1, sql=INS.format(id=1, name="a"), rowid="R1"), row(36, table=None)])
    assert [e["op"] for e in evs] == ["BEGIN", "INSERT", "ROLLBACK"]
    assert feed(evs).outcomes(0) == {"X1": "rolled_back"}


def test_replication_marker_27_drops_the_transaction_and_what_follows():
    evs, dlq = run(
        [
            row(6),
            row(1, sql=INS.format(id=1, name="a"), rowid="R1"),
            row(27, table=None),
            row(1, sql=INS.format(id=2, name="b"), rowid="R2"),
            row(7, table=None),
        ]
    )
    assert dlq == []
    assert [e["op"] for e in evs] == ["BEGIN", "INSERT", "ROLLBACK"]
    assert evs[-1]["attrs"]["reason"] == "replication_marker"
    model = feed(evs)
    assert model.all_committed() == []


def test_missing_scn_34_warns_without_events():
    with capture_logs() as logs:
        evs, dlq = run([row(34, xid=None, scn=None, table=None, INFO="Missing SCN 5 - 9")])
    assert evs == [] and dlq == []
    assert [(line["event"], line["log_level"]) for line in logs] == [("oracle.missing_scn", "warning")]


def test_unsupported_255_is_a_lost_change_and_goes_to_the_dlq_with_info():
    mapper = OracleMapper()
    evs, dlq = run([row(6), row(255, rowid="R1", INFO="Object or Data type Unsupported"), row(7, table=None)], mapper)
    assert dlq == [(2, "UNSUPPORTED operation on HR.EMP: Object or Data type Unsupported")]
    assert [e["op"] for e in evs] == ["BEGIN", "COMMIT"]
    assert mapper.stats["unsupported"] == 1


def test_internal_0_and_select_for_update_25_change_no_data_and_are_counted():
    mapper = OracleMapper()
    evs, dlq = run([row(6), row(0, table="SYS.SEG$"), row(25, rowid="R1"), row(7, table=None)], mapper)
    assert dlq == [] and [e["op"] for e in evs] == ["BEGIN", "COMMIT"]
    assert (mapper.stats["internal"], mapper.stats["select_for_update"]) == (1, 1)


def test_status_not_0_on_a_change_row_goes_to_the_dlq_with_info():
    sql = """insert into "UNKNOWN"."OBJ# 7"("COL 1") values (HEXTORAW('c102'));"""
    evs, dlq = run([row(6), row(1, rowid="R1", sql=sql, STATUS=2, INFO="Dictionary Version Mismatch"), row(7)])
    assert dlq == [(2, "STATUS 2 (SQL_REDO not valid): Dictionary Version Mismatch")]
    assert [e["op"] for e in evs] == ["BEGIN", "COMMIT"]


def test_status_not_0_on_an_undo_row_still_undoes_by_row_id():
    evs, dlq = run(
        [
            row(6),
            row(1, sql=INS.format(id=1, name="a"), rowid="R1"),
            row(2, rowid="R1", ROLLBACK=1, sql="delete from garbled", STATUS=2, INFO="Dictionary Version Mismatch"),
            row(7, table=None),
        ]
    )
    assert dlq == [] and [(e["op"], e["undo"]) for e in evs][2] == ("DELETE", True)
    [txn] = feed(evs).all_committed()
    assert txn.changes == []


def test_documented_lob_erase_code_28_reads_like_29():
    evs, dlq = run(
        [
            row(6),
            row(1, rowid="R1", sql="""insert into "HR"."EMP"("ID","NOTES") values ('1',EMPTY_CLOB());"""),
            row(9, rowid="R1", sql=LOC),
            row(10, rowid="R1", sql=" buf_c := 'abcdef'; dbms_lob.write(loc_c, 6, 1, buf_c);"),
            row(28, rowid="R1", sql=" dbms_lob.erase(loc_c, 2, 3);"),
            row(7, table=None),
        ]
    )
    assert dlq == [] and [e["op"] for e in evs] == ["BEGIN", "INSERT", "LOB_WRITE", "LOB_ERASE", "COMMIT"]
    [txn] = feed(evs).all_committed()
    assert txn.changes[0]["after"]["NOTES"] == "ab  ef"


def test_ddl_code_5_and_truncate():
    evs, _ = run(
        [
            row(5, sql="alter table HR.EMP add (X NUMBER);"),
            row(5, sql="TRUNCATE TABLE HR.EMP;"),
            row(5, sql="grant select on x to y", INFO="INTERNAL DDL"),
        ]
    )
    assert [(e["op"], e["table"], e["ddl"]) for e in evs] == [
        ("DDL", "HR.EMP", "alter table HR.EMP add (X NUMBER);"),
        ("TRUNCATE", "HR.EMP", None),
    ]


def test_rollback_flag_rows_become_undo_events_and_undo_the_newest_change_of_the_row():
    evs, dlq = run(
        [
            row(6),
            row(1, sql=INS.format(id=1, name="a"), rowid="R1"),
            row(3, rowid="R1", sql="""update "HR"."EMP" set "NAME" = 'b' where "ID" = '1' and "NAME" = 'a';"""),
            row(
                3,
                rowid="R1",
                ROLLBACK=1,
                sql="""update "HR"."EMP" set "NAME" = 'a' where "ID" = '1' and "NAME" = 'b';""",
            ),
            row(1, sql=INS.format(id=2, name="x"), rowid="R2"),
            # undo SQL that does not parse is still an undo: it needs only the ROW_ID
            row(2, rowid="R2", ROLLBACK=1, sql="delete from nowhere"),
            row(7, table=None),
        ]
    )
    assert dlq == []
    undo = [e for e in evs if e["undo"]]
    assert [(e["op"], e["row_id"]) for e in undo] == [("UPDATE", "R1"), ("DELETE", "R2")]
    [txn] = feed(evs).all_committed()
    assert [(c["op"], c["after"]) for c in txn.changes] == [("c", {"ID": "1", "NAME": "a"})]


def test_undo_row_without_row_id_goes_to_dlq():
    _, dlq = run([row(6), row(2, ROLLBACK=1, sql="""delete from "HR"."EMP" where "ID" = '1';""")])
    assert dlq == [(2, "ROLLBACK=1 row without ROW_ID")]


LOC = 'DECLARE\n loc_c CLOB;\nBEGIN\n select "NOTES" into loc_c from "HR"."EMP" where "ID" = \'1\' for update;\nEND;'


def test_lob_codes_9_10_11_29_become_fragments_of_the_inserted_row():
    evs, dlq = run(
        [
            row(6),
            row(1, rowid="R1", sql="""insert into "HR"."EMP"("ID","NOTES") values ('1',EMPTY_CLOB());"""),
            row(9, rowid="R1", sql=LOC),
            row(10, rowid="R1", sql=" buf_c := 'Hello, world'; dbms_lob.write(loc_c, 12, 1, buf_c);"),
            row(10, rowid="R1", sql=" buf_c := '!!'; dbms_lob.write(loc_c, 2, 13, buf_c);"),
            row(29, rowid="R1", sql=" dbms_lob.erase(loc_c, 2, 6);"),
            row(11, rowid="R1", sql=" dbms_lob.trim(loc_c, 12);"),
            row(7, table=None),
        ]
    )
    assert dlq == []
    frags = [e for e in evs if e["op"] in events.FRAGMENT_OPS]
    assert [
        (e["op"], e["lob_column"], e["lob_offset"], e["lob_data"], e["lob_length"], e["row_id"]) for e in frags
    ] == [
        ("LOB_WRITE", "NOTES", 0, "Hello, world", None, "R1"),
        ("LOB_WRITE", "NOTES", 12, "!!", None, "R1"),
        ("LOB_ERASE", "NOTES", 5, None, 2, "R1"),
        ("LOB_TRIM", "NOTES", None, None, 12, "R1"),
    ]
    [txn] = feed(evs).all_committed()
    assert txn.changes[0]["after"] == {"ID": "1", "NOTES": "Hello  world"}


def test_lob_locator_without_dml_synthesises_an_update():
    evs, _ = run(
        [
            row(6),
            row(9, rowid="R1", sql=LOC),
            row(10, rowid="R1", sql=" buf_c := 'new'; dbms_lob.write(loc_c, 3, 1, buf_c);"),
            row(7, table=None),
        ]
    )
    assert [e["op"] for e in evs] == ["BEGIN", "UPDATE", "LOB_WRITE", "COMMIT"]
    assert evs[1]["attrs"]["synthetic"] == "lob_locator"
    [txn] = feed(evs).all_committed()
    assert [(c["op"], c["after"]) for c in txn.changes] == [("u", {"ID": "1", "NOTES": "new"})]


def test_xml_codes_68_70_71_rewrite_the_document():
    evs, dlq = run(
        [
            row(6),
            row(1, table="HR.DOCS", rowid="D1", sql="""insert into "HR"."DOCS"("ID","BODY") values ('7','<old/>');"""),
            row(
                68, table="HR.DOCS", rowid="D1", sql='XML DOC BEGIN:  select "BODY" from "HR"."DOCS" where "ID" = \'7\''
            ),
            row(70, table="HR.DOCS", rowid="D1", sql="XML_REDO := '<doc>' :5"),
            row(70, table="HR.DOCS", rowid="D1", sql="XML_REDO := HEXTORAW('3c2f646f633e') :6"),
            row(71, table="HR.DOCS", rowid="D1", sql="XML DOC END"),
            row(7, table=None),
        ]
    )
    assert dlq == []
    assert [e["op"] for e in evs] == ["BEGIN", "INSERT", "LOB_TRIM", "XML_WRITE", "XML_WRITE", "COMMIT"]
    [txn] = feed(evs).all_committed()
    assert txn.changes[0]["after"]["BODY"] == "<doc></doc>"


def test_32k_codes_91_92_93_become_long_string_writes():
    begin = 'DECLARE\nBEGIN\n Stmt := \'update "HR"."BIG" set "TXT" = NULL where "ID" = \'\'5\'\'\';'
    evs, dlq = run(
        [
            row(6),
            row(91, table="HR.BIG", rowid="B5", sql=begin),
            row(92, table="HR.BIG", rowid="B5", sql=" buf_c := 'ab';"),
            row(92, table="HR.BIG", rowid="B5", sql=" buf_c := 'cd';"),
            row(93, table="HR.BIG", rowid="B5", sql="32K END"),
            row(7, table=None),
        ]
    )
    assert dlq == []
    assert [e["op"] for e in evs] == ["BEGIN", "UPDATE", "LOB_TRIM", "LONG_STRING_WRITE", "LONG_STRING_WRITE", "COMMIT"]
    [txn] = feed(evs).all_committed()
    assert txn.changes[0]["after"] == {"ID": "5", "TXT": "abcd"}


def test_blob_write_carries_bytes():
    loc = LOC.replace("loc_c", "loc_b").replace('"NOTES"', '"PIC"')
    evs, _ = run(
        [
            row(6),
            row(9, rowid="R1", sql=loc),
            row(10, rowid="R1", sql=" buf_b := HEXTORAW('0001ff'); dbms_lob.write(loc_b, 3, 2, buf_b);"),
        ]
    )
    assert evs[-1]["lob_data"] == b"\x00\x01\xff" and evs[-1]["lob_offset"] == 1


def test_fragment_without_locator_goes_to_dlq():
    _, dlq = run(
        [
            row(6),
            row(10, rowid="R1", sql=" buf_c := 'x'; dbms_lob.write(loc_c, 1, 1, buf_c);"),
            row(70, rowid="R1", sql="XML_REDO := 'x'"),
        ]
    )
    assert [line for line, _ in dlq] == [2, 3]
    assert all("without a preceding locator" in reason for _, reason in dlq)


# ---- continuation rows, seq, attrs, bad rows ----------------------------------------------------


def test_csf_continuation_rows_are_joined():
    sql = INS.format(id=1, name="a very long name")
    evs, dlq = run(
        [
            row(6),
            row(1, rowid="R1", sql=sql[:20], CSF=1),
            row(1, rowid="R1", sql=sql[20:40], CSF=1),
            row(1, rowid="R1", sql=sql[40:], CSF=0),
            row(7, table=None),
        ]
    )
    assert dlq == []
    assert [e["op"] for e in evs] == ["BEGIN", "INSERT", "COMMIT"]
    assert evs[1]["after"] == {"ID": "1", "NAME": "a very long name"}
    assert evs[1]["attrs"]["csf_pieces"] == "3" and evs[1]["attrs"]["redo_sql"] == sql


def test_csf_row_without_its_continuation_goes_to_dlq():
    _, dlq = run([row(6), row(1, rowid="R1", sql="insert into", CSF=1), row(7, table=None, RS_ID="other")])
    assert dlq == [(2, "CSF continuation not followed by its next piece")]


def test_csf_piece_followed_by_another_statement_of_the_same_redo_record_goes_to_dlq():
    sql = INS.format(id=1, name="a")
    _, dlq = run([row(6), row(1, rowid="R1", sql=sql[:20], CSF=1), row(1, rowid="R1", sql=sql[20:], SSN=1)])
    assert dlq[0] == (2, "CSF continuation not followed by its next piece")


def test_seq_is_the_position_within_the_xid_in_file_order():
    evs, _ = run(
        [
            row(6, xid="A"),
            row(6, xid="B"),
            row(1, xid="A", rowid="R1", sql=INS.format(id=1, name="a")),
            row(1, xid="B", rowid="R2", sql=INS.format(id=2, name="b")),
            row(7, xid="B", table=None),
            row(7, xid="A", table=None),
        ]
    )
    assert [(e["xid"], e["seq"]) for e in evs] == [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("B", 2), ("A", 2)]


def test_attrs_carry_rs_id_ssn_redo_sql_and_sequence():
    sql = INS.format(id=1, name="a")
    evs, _ = run([row(1, scn=77, rowid="R1", sql=sql, SSN=3, INFO="note")])
    assert evs[0]["attrs"] == {
        "rs_id": " 0x0001.77.0010 ",
        "ssn": "3",
        "redo_sql": sql,
        "sequence": "9",
        "info": "note",
        "operation_code": "1",
    }


def test_key_columns_can_be_configured():
    mapper = OracleMapper({"HR.EMP": ["NAME"]})
    evs, _ = run([row(1, rowid="R1", sql=INS.format(id=1, name="a"))], mapper)
    assert evs[0]["key"] == {"NAME": "a"}
    # no ID column and no configured key: the ROWID identifies the row
    evs, _ = run([row(1, rowid="R9", sql="""insert into "HR"."EMP"("X") values ('1');""")])
    assert evs[0]["key"] == {"ROWID": "R9"}


@pytest.mark.parametrize(
    "bad, reason",
    [
        (row(4, sql="x"), "unknown OPERATION_CODE 4"),
        (row(8), "unknown OPERATION_CODE 8"),
        (row("abc"), "OPERATION_CODE is not an integer: 'abc'"),
        (row(1, sql='insert into "HR"."EMP" values garbage'), "unparsable SQL_REDO: INSERT without a column list"),
        (
            row(1, sql="""delete from "HR"."EMP" where "ID" = '1';"""),
            "SQL_REDO is an DELETE but OPERATION_CODE 1 is INSERT",
        ),
        (row(1, xid=None, sql=INS.format(id=1, name="a")), "missing XID for OPERATION_CODE 1"),
        (row(1, scn="x", sql=INS.format(id=1, name="a")), "SCN is not an integer: 'x'"),
        (
            row(9, sql="select junk"),
            "unparsable SQL_REDO: no `select ... into loc_x from ... for update` in SEL_LOB_LOCATOR",
        ),
    ],
)
def test_bad_rows_go_to_the_dlq_and_the_replay_continues(bad, reason):
    evs, dlq = run([bad, row(6, xid="OK"), row(7, xid="OK", table=None)])
    assert dlq == [(1, reason)]
    assert [e["op"] for e in evs] == ["BEGIN", "COMMIT"]
