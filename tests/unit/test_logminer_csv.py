"""The logminer-csv replay format: a SQL*Plus CSV spool of V$LOGMNR_CONTENTS -> the Oracle mapper's rows.

The sample export holds four interleaved transactions: one with a SQL_REDO split over two CSF rows
and a LOB written by two LOB_WRITE rows, one with a rollback to savepoint (ROLLBACK=1 rows), one
rolled back whole, and one whose row LogMiner could not rebuild (STATUS 2); plus an UNSUPPORTED,
an INTERNAL and a SELECT_FOR_UPDATE row.
"""

import argparse
import csv
import json

import pytest
from structlog.testing import capture_logs

from processor.cli import replay as replay_cmd
from processor.core import events
from processor.sources.logminer_csv import ExportFormatError, LogMinerExport, detect_format
from processor.sources.oracle import OracleMapper, join_continuations
from processor.sources.replay import map_rows
from processor.testing.reference import ReferenceModel

from ..sourcekit import DATA, KEEP, table_state

EXPORT = DATA / "oracle_logminer_export.csv"


def mapped(path, mapper=None):
    outs = list(map_rows(join_continuations(LogMinerExport(path)), mapper or OracleMapper()))
    return [o.event for o in outs if o.event], [
        {"line": o.source.line, "reason": o.reason} for o in outs if not o.event
    ]


def export_rows():
    with open(EXPORT, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    return list(csv.DictReader(lines[1:]))  # after SQL*Plus's leading blank line


def write_export(path, rows, columns=None, before="\n", after=""):
    columns = columns or list(rows[0])
    with open(path, "w", newline="") as f:
        f.write(before)
        w = csv.DictWriter(f, columns, extrasaction="ignore", quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        f.write(after)
    return path


# ---- the sample export ---------------------------------------------------------------------------


def test_sample_export_maps_to_the_expected_events_and_dead_letters():
    expected = json.loads((DATA / "oracle_logminer_export.expected.json").read_text())
    evs, dlq = mapped(EXPORT)
    assert [{k: e[k] for k in KEEP} for e in evs] == expected["events"]
    assert dlq == expected["dlq"]


def test_sample_export_through_the_reference_model_gives_the_tables():
    expected = json.loads((DATA / "oracle_logminer_export.expected.json").read_text())
    mapper = OracleMapper()
    evs, _ = mapped(EXPORT, mapper)
    model = ReferenceModel()
    for offset, e in enumerate(evs):
        model.feed(0, offset, events.encode_raw(e))
    assert model.dlq == []
    state = table_state(model)
    for table, rows in expected["tables"].items():
        assert state.get(table, {}) == {json.dumps({"ID": r["ID"]}): r for r in rows}, table
    assert model.outcomes(0) == {
        "0A000100B0030000": "committed",  # CSF-joined INSERT, LOB written in two pieces
        "0B001200C4040000": "committed",  # ROLLBACK TO SAVEPOINT undid an INSERT and an UPDATE
        "0C000500D2000000": "rolled_back",
        "0300070063000000": "committed",  # its only change went to the DLQ (STATUS 2)
    }
    [partial] = [t for t in model.all_committed() if t.xid == "0B001200C4040000"]
    assert [(c["op"], c["after"]["SALARY"]) for c in partial.changes] == [("c", "4000"), ("u", "4500")]
    assert mapper.stats["internal"] == 1 and mapper.stats["select_for_update"] == 1
    assert mapper.stats["undo"] == 3


def test_export_rows_carry_timestamp_as_epoch_ms_and_the_joined_statement():
    evs, _ = mapped(EXPORT)
    assert evs[0]["ts_ms"] == 1709287200000  # 2024-03-01 10:00:00, read as UTC
    [insert] = [e for e in evs if e["op"] == "INSERT" and e["key"] == {"ID": "1"}]
    assert insert["attrs"]["csf_pieces"] == "2"
    assert insert["attrs"]["redo_sql"].startswith('insert into "HR"."EMP"') and insert["attrs"]["redo_sql"].endswith(
        ");"
    )


def test_detect_format_tells_the_export_from_the_rows_format(tmp_path):
    assert detect_format(EXPORT) == "logminer-csv"
    assert detect_format(DATA / "oracle_logminer.csv") == "rows"
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"SCN": 1, "XIDUSN": 1}\n')
    assert detect_format(jsonl) == "rows"


# ---- transaction ids and operation names -----------------------------------------------------------


def test_xid_is_built_from_xidusn_xidslt_xidsqn_when_the_raw_column_is_absent(tmp_path):
    rows = export_rows()
    columns = [c for c in rows[0] if c != "XID"]
    with_raw, _ = mapped(EXPORT)
    without, dlq = mapped(write_export(tmp_path / "x.csv", rows, columns))
    assert [e["xid"] for e in without] == [e["xid"] for e in with_raw]
    assert len(dlq) == 2


def test_xid_that_contradicts_its_parts_goes_to_the_dlq(tmp_path):
    rows = export_rows()
    rows[0]["XIDSQN"] = "945"
    _, dlq = mapped(write_export(tmp_path / "x.csv", rows))
    assert dlq[0] == {"line": 3, "reason": "XID 0A000100B0030000 is not XIDUSN.XIDSLT.XIDSQN 10.1.945"}


def test_big_endian_raw_xid_matches_its_parts(tmp_path):
    rows = export_rows()[:1]
    rows[0]["XID"] = "000A0001000003B0"  # 10.1.944 as AIX or SPARC write it
    evs, dlq = mapped(write_export(tmp_path / "x.csv", rows))
    assert dlq == [] and evs[0]["xid"] == "000A0001000003B0"


def test_operation_name_stands_in_for_a_missing_operation_code(tmp_path):
    rows = export_rows()
    columns = [c for c in rows[0] if c != "OPERATION_CODE"]
    by_code, _ = mapped(EXPORT)
    by_name, _ = mapped(write_export(tmp_path / "x.csv", rows, columns))
    assert by_name == by_code


def test_operation_name_that_contradicts_the_code_goes_to_the_dlq(tmp_path):
    rows = export_rows()
    rows[0]["OPERATION"] = "COMMIT"
    _, dlq = mapped(write_export(tmp_path / "x.csv", rows))
    assert dlq[0] == {"line": 3, "reason": "OPERATION COMMIT does not match OPERATION_CODE 6"}


# ---- what SQL*Plus leaves in a spool ---------------------------------------------------------------


def test_echoed_command_repeated_heading_and_feedback_lines_are_skipped(tmp_path):
    rows = export_rows()
    columns = list(rows[0])
    heading = ",".join(f'"{c}"' for c in columns) + "\n"
    path = write_export(tmp_path / "x.csv", rows[:5], before="SQL> @mine.sql\n\n")
    with open(path, "a", newline="") as f:
        f.write("\n" + heading)  # the heading again, as a page break prints it
        w = csv.DictWriter(f, columns, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        w.writerows(rows[5:])
        f.write("\n37 rows selected.\n")
    export = LogMinerExport(path)
    evs, dlq = mapped(path)
    assert detect_format(path) == "logminer-csv"  # the echoed command above the heading does not hide it
    assert export.skipped_lines == 1
    assert [{k: e[k] for k in KEEP} for e in evs] == [{k: e[k] for k in KEEP} for e in mapped(EXPORT)[0]]
    assert [d["reason"] for d in dlq] == [d["reason"] for d in mapped(EXPORT)[1]]


def test_a_record_with_the_wrong_number_of_fields_goes_to_the_dlq(tmp_path):
    path = write_export(tmp_path / "x.csv", export_rows()[:2], after='5099,"stray"\n')
    _, dlq = mapped(path)
    assert dlq == [{"line": 5, "reason": "2 fields where the heading has 26"}]


# ---- settings that spoil the whole file: refused before anything is replayed -------------------------


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("TIMESTAMP", "01-MAR-24", "NLS_DATE_FORMAT"),  # the default DD-MON-RR has no time of day
        ("SCN", "1.2346E+13", "NUMWIDTH"),
        ("SCN", "##########", "NUMWIDTH"),
    ],
)
def test_nls_and_numwidth_damage_is_refused_up_front(tmp_path, column, value, message):
    rows = export_rows()
    rows[3][column] = value
    with pytest.raises(ExportFormatError, match=message):
        LogMinerExport(write_export(tmp_path / "x.csv", rows))


@pytest.mark.parametrize(
    "drop, message",
    [
        (("ROLLBACK",), "ROLLBACK"),
        (("CSF",), "CSF"),
        (("XID", "XIDSQN"), "XID or XIDUSN, XIDSLT, XIDSQN"),
        (("OPERATION_CODE", "OPERATION"), "OPERATION_CODE or OPERATION"),
    ],
)
def test_an_export_without_a_column_the_semantics_need_is_refused(tmp_path, drop, message):
    rows = export_rows()
    columns = [c for c in rows[0] if c not in drop]
    with pytest.raises(ExportFormatError, match=message):
        LogMinerExport(write_export(tmp_path / "x.csv", rows, columns))


def test_a_spool_without_a_heading_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('\n5000,,,"2024-03-01 10:00:00"\n')
    with pytest.raises(ExportFormatError, match="SET HEADING ON"):
        LogMinerExport(path)


def test_replay_command_exits_2_on_a_spoiled_export_without_touching_kafka(tmp_path):
    rows = export_rows()
    rows[0]["TIMESTAMP"] = "01-MAR-24"
    path = write_export(tmp_path / "x.csv", rows)
    parser = argparse.ArgumentParser()
    replay_cmd.register(parser.add_subparsers())
    # Port 9 (discard) has no broker: exit 2 shows the file was refused before any connection.
    args = parser.parse_args(["replay", "oracle", str(path), "--format", "logminer-csv", "--bootstrap", "127.0.0.1:9"])
    with capture_logs() as logs:
        assert args.func(args) == 2
    assert [(line["event"], "NLS_DATE_FORMAT" in line["error"]) for line in logs] == [("config.invalid", True)]


def test_a_windows_spool_with_bom_and_crlf_reads_the_same(tmp_path):
    path = tmp_path / "win.csv"
    path.write_bytes(b"\xef\xbb\xbf" + EXPORT.read_bytes().replace(b"\n", b"\r\n"))
    assert detect_format(path) == "logminer-csv"
    (evs, dlq), (want, want_dlq) = mapped(path), mapped(EXPORT)
    # Line breaks inside the PL/SQL of LOB rows are CRLF too; the values read the same.
    assert [{k: e[k] for k in KEEP} for e in evs] == [{k: e[k] for k in KEEP} for e in want]
    assert dlq == want_dlq
