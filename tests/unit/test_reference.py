"""Hand-written cases for the reference model, one or more per rule of docs/semantics.md."""

from __future__ import annotations

import pytest

from processor.core import events
from processor.runtime.config import ProcessorConfig
from processor.testing.reference import COMMITTED, FILTERED, ROLLED_BACK, ReferenceModel, apply_fragment

T = "app.t"


def ev(xid: str, op: str, seq: int, scn: int | None = None, **fields) -> dict:
    return events.raw_event(xid, op, seq, seq if scn is None else scn, **fields)


def ins(xid, seq, k, **fields):
    fields.setdefault("after", {"id": k, "v": f"v{seq}"})
    return ev(xid, events.INSERT, seq, table=T, key={"id": k}, **fields)


def upd(xid, seq, k, **fields):
    fields.setdefault("after", {"id": k, "v": f"u{seq}"})
    return ev(xid, events.UPDATE, seq, table=T, key={"id": k}, **fields)


def run(*evs, model: ReferenceModel | None = None, partition: int = 0) -> ReferenceModel:
    model = model or ReferenceModel()
    offset = model.next_offset.get(partition, 0)
    for i, e in enumerate(evs):
        model.feed(partition, offset + i, e)
    return model


def seqs(model: ReferenceModel, partition: int = 0) -> list[tuple[str, list[int]]]:
    return [(t.xid, [c["source"]["seq"] for c in t.changes]) for t in model.committed.get(partition, [])]


def only_change(model: ReferenceModel) -> dict:
    [txn] = model.committed[0]
    [change] = txn.changes
    return change


# ---- lifecycle -------------------------------------------------------------------------------------


def test_commit_emits_change_events_with_the_envelope_fields():
    m = run(
        ev("x", "BEGIN", 0, 10, user="alice", client="app"),
        ins("x", 1, 7, scn=11, ts_ms=111, row_id="R7", attrs={"rs_id": "a"}),
        ev("x", "DDL", 2, 12, table=T, ddl="ALTER TABLE t ADD c INT", ts_ms=112),
        upd("x", 3, 7, scn=13, before={"id": 7, "v": "v1"}, ts_ms=113),
        ev("x", "COMMIT", 4, 20, ts_ms=999, thread=2),
    )
    [txn] = m.committed[0]
    assert (txn.xid, txn.commit_scn, txn.commit_ts_ms, txn.thread, txn.commit_offset) == ("x", 20, 999, 2, 4)
    first, ddl, update = txn.changes
    assert first == {
        "event_id": "2:20:x:1",
        "op": "c",
        "ts_ms": 111,
        "key": {"id": 7},
        "before": None,
        "after": {"id": 7, "v": "v1"},
        "ddl": None,
        "source": {
            "table": T,
            "xid": "x",
            "seq": 1,
            "scn": 11,
            "commit_scn": 20,
            "commit_ts_ms": 999,
            "thread": 2,
            "user": "alice",
            "row_id": "R7",
            "attrs": {"rs_id": "a"},
        },
        "transaction": {"id": "x", "total_order": 1, "data_collection_order": 1},
    }
    assert (ddl["op"], ddl["ddl"], ddl["key"]) == ("ddl", "ALTER TABLE t ADD c INT", None)
    assert (update["op"], update["before"], update["transaction"]["total_order"]) == ("u", {"id": 7, "v": "v1"}, 3)
    assert txn.end_record()["data_collections"] == [{"name": T, "event_count": 3}]
    assert m.outcomes(0) == {"x": COMMITTED}


def test_changes_are_emitted_in_seq_order_whatever_the_arrival_order():
    m = run(ev("x", "BEGIN", 0), ins("x", 3, 3), ins("x", 1, 1), ins("x", 2, 2), ev("x", "COMMIT", 9))
    assert seqs(m) == [("x", [1, 2, 3])]


def test_same_seq_twice_later_event_replaces_earlier():
    m = run(
        ins("x", 1, 1, after={"id": 1, "v": "first"}),
        ins("x", 1, 1, after={"id": 1, "v": "second"}),
        ev("x", "COMMIT", 2),
    )
    assert only_change(m)["after"] == {"id": 1, "v": "second"}


def test_end_record_counts_changes_per_table_sorted_by_name():
    m = run(
        ev("x", "INSERT", 1, table="b.t", key={"id": 1}),
        ev("x", "INSERT", 2, table="a.t", key={"id": 1}),
        ev("x", "INSERT", 3, table="b.t", key={"id": 2}),
        ev("x", "TRUNCATE", 4, table="a.t"),
        ev("x", "COMMIT", 5),
    )
    [txn] = m.committed[0]
    end = txn.end_record()
    assert end["event_count"] == 4 and end["input_partition"] == 0 and end["commit_offset"] == 4
    assert end["data_collections"] == [{"name": "a.t", "event_count": 2}, {"name": "b.t", "event_count": 2}]
    assert [c["transaction"]["data_collection_order"] for c in txn.changes] == [1, 1, 2, 2]
    assert txn.changes[3]["op"] == "t" and txn.changes[3]["key"] is None
    assert txn.begin_record()["event_count"] is None


def test_rollback_drops_everything_and_finishes_rolled_back():
    m = run(ev("x", "BEGIN", 0), ins("x", 1, 1), ev("x", "ROLLBACK", 2))
    assert m.committed.get(0, []) == [] and m.outcomes(0) == {"x": ROLLED_BACK}


def test_rollback_of_unseen_xid_finishes_it_and_later_events_are_late():
    m = run(ev("x", "ROLLBACK", 5), ins("x", 1, 1), ev("x", "COMMIT", 6))
    assert m.outcomes(0) == {"x": ROLLED_BACK} and m.late_events[0] == 2 and not m.committed.get(0)


def test_first_event_opens_the_transaction_implicitly():
    m = run(ev("y", "BEGIN", 0), ins("x", 1, 1), ev("y", "COMMIT", 1))
    assert m.low_watermark(0) == 1  # x opened implicitly at offset 1
    run(ev("x", "COMMIT", 2), model=m)
    assert seqs(m) == [("y", []), ("x", [1])]
    assert m.low_watermark(0) == 4


def test_commit_of_unseen_xid_is_an_empty_committed_transaction():
    m = run(ev("x", "COMMIT", 3, 30))
    [txn] = m.committed[0]
    assert txn.changes == [] and txn.end_record()["event_count"] == 0 and txn.end_record()["data_collections"] == []


def test_repeated_begin_restarts_the_transaction_at_its_offset():
    m = run(ev("x", "BEGIN", 0), ins("x", 1, 1), ev("x", "SAVEPOINT", 2, savepoint="a"), ev("x", "BEGIN", 0))
    assert m.low_watermark(0) == 3
    run(ins("x", 5, 5), ev("x", "ROLLBACK_TO_SAVEPOINT", 6, savepoint="a"), ev("x", "COMMIT", 7), model=m)
    assert seqs(m) == [("x", [5])]
    assert m.dlq == [(0, 5, "unknown_savepoint: a")]  # the restart dropped the savepoint too


def test_events_of_a_finished_transaction_are_late_and_dropped():
    m = run(
        ins("x", 1, 1),
        ev("x", "COMMIT", 2),
        ev("x", "BEGIN", 0),
        ins("x", 3, 3),
        ev("x", "COMMIT", 2),
        ev("x", "ROLLBACK", 4),
    )
    assert seqs(m) == [("x", [1])] and m.late_events[0] == 4


def test_partitions_hold_independent_transactions_with_the_same_xid():
    m = run(ins("x", 1, 1), ev("x", "COMMIT", 2), partition=0)
    run(ins("x", 1, 1), ev("x", "ROLLBACK", 2), partition=1, model=m)
    assert m.outcomes(0) == {"x": COMMITTED} and m.outcomes(1) == {"x": ROLLED_BACK}


def test_offsets_must_not_go_backwards():
    m = run(ins("x", 1, 1))
    with pytest.raises(ValueError):
        m.feed(0, 0, ins("x", 2, 2))


def test_watermark_is_the_highest_commit_rollback_or_heartbeat_scn():
    m = run(
        ins("x", 1, 1, scn=50),
        ev("x", "COMMIT", 2, 10),
        ev("", "HEARTBEAT", 0, 30),
        ins("y", 1, 1, scn=90),
        ev("z", "ROLLBACK", 1, 20),
    )
    assert m.watermark == {0: 30}
    assert m.outcomes(0) == {"x": COMMITTED, "z": ROLLED_BACK}  # heartbeat touched no transaction
    assert m.low_watermark(0) == 3  # y is still open


# ---- partial rollback ----------------------------------------------------------------------------------


def test_rollback_to_savepoint_drops_changes_after_it():
    m = run(
        ins("x", 1, 1),
        ev("x", "SAVEPOINT", 2, savepoint="a"),
        ins("x", 3, 3),
        ins("x", 4, 4),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 5, savepoint="a"),
        ins("x", 6, 6),
        ev("x", "COMMIT", 7),
    )
    assert seqs(m) == [("x", [1, 6])]


def test_rollback_to_outer_savepoint_drops_inner_changes_and_inner_savepoints():
    m = run(
        ins("x", 1, 1),
        ev("x", "SAVEPOINT", 2, savepoint="outer"),
        ins("x", 3, 3),
        ev("x", "SAVEPOINT", 4, savepoint="inner"),
        ins("x", 5, 5),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 6, savepoint="outer"),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 7, savepoint="inner"),  # popped: DLQ, nothing dropped
        ins("x", 8, 8),
        ev("x", "COMMIT", 9),
    )
    assert seqs(m) == [("x", [1, 8])]
    assert m.dlq == [(0, 6, "unknown_savepoint: inner")]


def test_rollback_to_inner_savepoint_keeps_outer_changes():
    m = run(
        ev("x", "SAVEPOINT", 1, savepoint="outer"),
        ins("x", 2, 2),
        ev("x", "SAVEPOINT", 3, savepoint="inner"),
        ins("x", 4, 4),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 5, savepoint="inner"),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 6, savepoint="outer"),
        ev("x", "COMMIT", 7),
    )
    assert seqs(m) == [("x", [])]
    assert m.dlq == []


def test_named_savepoint_survives_its_rollback():
    m = run(
        ev("x", "SAVEPOINT", 1, savepoint="a"),
        ins("x", 2, 2),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 3, savepoint="a"),
        ins("x", 4, 4),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 5, savepoint="a"),
        ins("x", 6, 6),
        ev("x", "COMMIT", 7),
    )
    assert seqs(m) == [("x", [6])] and m.dlq == []


def test_a_savepoint_name_declared_twice_rolls_back_to_the_newest():
    m = run(
        ev("x", "SAVEPOINT", 1, savepoint="a"),
        ins("x", 2, 2),
        ev("x", "SAVEPOINT", 3, savepoint="a"),
        ins("x", 4, 4),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 5, savepoint="a"),
        ev("x", "COMMIT", 6),
    )
    assert seqs(m) == [("x", [2])]


def test_unknown_savepoint_goes_to_dlq_and_drops_nothing():
    m = run(ins("x", 1, 1), ev("x", "ROLLBACK_TO_SAVEPOINT", 2, savepoint="nope"), ev("x", "COMMIT", 3))
    assert seqs(m) == [("x", [1])] and m.dlq == [(0, 1, "unknown_savepoint: nope")]


def test_subtxn_abort_drops_only_that_subxid_before_it():
    m = run(
        ins("x", 1, 1),
        ins("x", 2, 2, subxid="s1"),
        ins("x", 3, 3, subxid="s2"),
        ins("x", 4, 4, subxid="s1"),
        ev("x", "SUBTXN_ABORT", 5, subxid="s1"),
        ins("x", 6, 6, subxid="s1"),
        ev("x", "COMMIT", 7),
    )
    assert seqs(m) == [("x", [1, 3, 6])]


def test_subtxn_abort_with_subxid_equal_to_xid_is_a_full_rollback():
    m = run(ins("x", 1, 1), ev("x", "SUBTXN_ABORT", 2, subxid="x"), ev("x", "COMMIT", 3))
    assert m.outcomes(0) == {"x": ROLLED_BACK} and not m.committed.get(0) and m.late_events[0] == 1


def test_undo_row_removes_the_newest_earlier_change_with_its_row_id():
    m = run(
        ins("x", 1, 1, row_id="R1"),
        upd("x", 2, 1, row_id="R1"),
        ins("x", 3, 2, row_id="R2"),
        ev("x", "UPDATE", 4, table=T, key={"id": 1}, undo=True, row_id="R1"),
        ev("x", "DELETE", 5, table=T, key={"id": 1}, undo=True, row_id="R1"),
        ev("x", "COMMIT", 6),
    )
    assert seqs(m) == [("x", [3])]  # both changes of R1 undone, newest first; undo rows not emitted


def test_undo_row_ignores_changes_at_or_after_its_seq():
    m = run(
        ins("x", 5, 1, row_id="R1"),
        ev("x", "DELETE", 3, table=T, key={"id": 1}, undo=True, row_id="R1"),
        ev("x", "COMMIT", 6),
    )
    assert seqs(m) == [("x", [5])] and m.dlq[0][:2] == (0, 1) and m.dlq[0][2].startswith("undo_without_target")


def test_undo_row_without_a_target_goes_to_dlq_and_the_transaction_continues():
    m = run(
        ins("x", 1, 1, row_id="R1"),
        ev("x", "DELETE", 2, table=T, key={"id": 9}, undo=True, row_id="R9"),
        ev("x", "COMMIT", 3),
    )
    assert seqs(m) == [("x", [1])] and [d[:2] for d in m.dlq] == [(0, 1)]


def test_undo_row_takes_the_fragments_of_its_target_with_it():
    m = run(
        ins("x", 1, 1, row_id="R1"),
        ev("x", "LOB_WRITE", 2, row_id="R1", lob_column="doc", lob_data="abc"),
        ev("x", "DELETE", 3, table=T, key={"id": 1}, undo=True, row_id="R1"),
        ins("x", 4, 1, row_id="R1"),
        ev("x", "COMMIT", 5),
    )
    assert "doc" not in only_change(m)["after"]


# ---- fragments ------------------------------------------------------------------------------------------


def frag(op: str, data=None, offset=None, length=None) -> dict:
    return ev("x", op, 1, lob_column="c", lob_data=data, lob_offset=offset, lob_length=length)


@pytest.mark.parametrize(
    "value, fragment, result",
    [
        ("abc", frag("LOB_WRITE", "XY"), "abcXY"),  # null offset appends
        ("abcdef", frag("LOB_WRITE", "XY", 2), "abXYef"),  # overwrite in place
        ("abc", frag("LOB_WRITE", "XYZ", 2), "abXYZ"),  # overwrite runs past the end
        ("abc", frag("LOB_WRITE", "XY", 5), "abc  XY"),  # gap padded with spaces
        (b"ab", frag("LOB_WRITE", b"\x01", 4), b"ab\x00\x00\x01"),  # bytes pad with zero bytes
        (None, frag("LOB_WRITE", "hi", 0), "hi"),  # null starts as ""
        (None, frag("LOB_WRITE", b"hi"), b"hi"),  # ... or b"" for bytes data
        (None, frag("XML_WRITE", "<a/>", 2), "  <a/>"),
        ("abc", frag("LONG_STRING_WRITE", "d"), "abcd"),
        ("abcdef", frag("LOB_ERASE", offset=1, length=2), "a  def"),  # erase keeps the length
        ("abcdef", frag("LOB_ERASE", offset=4, length=10), "abcd  "),  # only the part inside v
        ("abc", frag("LOB_ERASE", offset=5, length=2), "abc"),  # entirely past the end: no-op
        (b"abcd", frag("LOB_ERASE", offset=0, length=2), b"\x00\x00cd"),
        ("abcdef", frag("LOB_TRIM", length=2), "ab"),
        ("ab", frag("LOB_TRIM", length=5), "ab"),
        (None, frag("LOB_TRIM", length=0), ""),
        ("ab", frag("LOB_WRITE", b"\x01"), b"ab\x01"),  # the piece's type wins
        (b"ab", frag("LOB_WRITE", "c"), "abc"),
    ],
)
def test_apply_fragment(value, fragment, result):
    assert apply_fragment(value, fragment) == result


def test_fragments_merge_into_their_target_in_seq_order_and_keep_its_seq():
    m = run(
        ins("x", 1, 1, after={"id": 1, "doc": "hello"}),
        ev("x", "LOB_WRITE", 3, table=T, key={"id": 1}, lob_column="doc", lob_data="!", lob_offset=None),
        ev("x", "LOB_WRITE", 2, table=T, key={"id": 1}, lob_column="doc", lob_data="J", lob_offset=0),
        ev("x", "LOB_TRIM", 4, table=T, key={"id": 1}, lob_column="doc", lob_length=5),
        ev("x", "COMMIT", 5),
    )
    change = only_change(m)
    assert change["after"] == {"id": 1, "doc": "Jello"} and change["source"]["seq"] == 1
    assert m.committed[0][0].end_record()["event_count"] == 1


def test_fragment_targets_the_newest_earlier_insert_or_update_of_its_row():
    m = run(
        ins("x", 1, 1),
        upd("x", 2, 1),
        ins("x", 3, 2),
        ev("x", "LOB_WRITE", 4, table=T, key={"id": 1}, lob_column="doc", lob_data="z"),
        ev("x", "COMMIT", 5),
    )
    first, second, third = m.committed[0][0].changes
    assert "doc" not in first["after"] and second["after"]["doc"] == "z" and "doc" not in third["after"]


def test_fragment_matches_by_row_id_when_it_has_one():
    m = run(
        ins("x", 1, 1, row_id="R1"),
        ins("x", 2, 2, row_id="R2"),
        ev("x", "LOB_WRITE", 3, table=T, key={"id": 2}, row_id="R1", lob_column="doc", lob_data="z"),
        ev("x", "COMMIT", 4),
    )
    assert [c["after"].get("doc") for c in m.committed[0][0].changes] == ["z", None]


def test_fragment_without_a_target_goes_to_dlq():
    m = run(
        ev("x", "LOB_WRITE", 1, table=T, key={"id": 1}, lob_column="doc", lob_data="z"),
        ins("x", 2, 1),
        ev("x", "COMMIT", 3),
    )
    assert m.dlq[0][:2] == (0, 0) and m.dlq[0][2].startswith("fragment_without_target")
    assert "doc" not in only_change(m)["after"]


def test_fragment_after_a_delete_of_its_row_goes_to_dlq():
    m = run(
        ins("x", 1, 1),
        ev("x", "DELETE", 2, table=T, key={"id": 1}),
        ev("x", "LOB_WRITE", 3, table=T, key={"id": 1}, lob_column="doc", lob_data="z"),
        ev("x", "COMMIT", 4),
    )
    assert [d[:2] for d in m.dlq] == [(0, 2)] and seqs(m) == [("x", [1, 2])]


def test_fragment_is_dropped_with_its_target_on_subtxn_abort():
    m = run(
        ins("x", 1, 1, subxid="s1"),
        ev("x", "LOB_WRITE", 2, table=T, key={"id": 1}, lob_column="doc", lob_data="z", subxid="s2"),
        ev("x", "SUBTXN_ABORT", 3, subxid="s1"),
        ins("x", 4, 1),
        ev("x", "COMMIT", 5),
    )
    assert "doc" not in only_change(m)["after"]


def test_fragment_is_dropped_with_its_target_on_rollback_to_savepoint():
    m = run(
        ev("x", "SAVEPOINT", 1, savepoint="a"),
        ins("x", 2, 1),
        ev("x", "LOB_WRITE", 3, table=T, key={"id": 1}, lob_column="doc", lob_data="z"),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 4, savepoint="a"),
        ev("x", "COMMIT", 5),
    )
    assert seqs(m) == [("x", [])]


def test_fragment_on_update_without_after_starts_from_an_empty_row():
    m = run(
        ev("x", "UPDATE", 1, table=T, key={"id": 1}),
        ev("x", "LOB_WRITE", 2, table=T, key={"id": 1}, lob_column="doc", lob_data=b"\x01"),
        ev("x", "COMMIT", 3),
    )
    assert only_change(m)["after"] == {"doc": b"\x01"}


# ---- filters ---------------------------------------------------------------------------------------------


def test_excluded_user_filters_the_whole_transaction():
    m = run(
        ev("x", "BEGIN", 0, user="batch"),
        ins("x", 1, 1),
        ev("x", "COMMIT", 2),
        ev("y", "BEGIN", 0, user="alice"),
        ins("y", 1, 1),
        ev("y", "COMMIT", 2),
        model=ReferenceModel(exclude_users={"batch"}),
    )
    assert seqs(m) == [("y", [1])] and m.outcomes(0)["x"] == FILTERED and m.filtered_count() == 1


def test_user_comes_from_the_first_event_that_carries_one():
    m = run(
        ins("x", 1, 1),
        ins("x", 2, 2, user="batch"),
        ins("x", 3, 3, user="alice"),
        ev("x", "COMMIT", 4),
        model=ReferenceModel(exclude_users={"batch"}),
    )
    assert m.outcomes(0) == {"x": FILTERED} and not m.committed.get(0)


def test_filtered_transaction_ignores_its_semantic_errors():
    m = run(
        ev("x", "BEGIN", 0, user="batch"),
        ev("x", "ROLLBACK_TO_SAVEPOINT", 1, savepoint="a"),
        ev("x", "COMMIT", 2),
        model=ReferenceModel(exclude_users={"batch"}),
    )
    assert m.dlq == [] and m.outcomes(0) == {"x": FILTERED}


def test_include_users_filters_other_users_and_transactions_without_a_user():
    m = run(
        ins("a", 1, 1, user="alice"),
        ev("a", "COMMIT", 2),
        ins("b", 1, 1, user="bob"),
        ev("b", "COMMIT", 2),
        ins("n", 1, 1),
        ev("n", "COMMIT", 2),
        model=ReferenceModel(include_users={"alice"}),
    )
    assert seqs(m) == [("a", [1])] and m.outcomes(0) == {"a": COMMITTED, "b": FILTERED, "n": FILTERED}


def test_client_filters():
    m = run(
        ins("a", 1, 1, client="psql"),
        ev("a", "COMMIT", 2),
        ins("b", 1, 1, client="loader"),
        ev("b", "COMMIT", 2),
        model=ReferenceModel(exclude_clients={"loader"}),
    )
    assert seqs(m) == [("a", [1])]
    m = run(
        ins("a", 1, 1, client="psql"),
        ev("a", "COMMIT", 2),
        ins("b", 1, 1, client="loader"),
        ev("b", "COMMIT", 2),
        model=ReferenceModel(include_clients={"loader"}),
    )
    assert seqs(m) == [("b", [1])]


def test_excluded_table_changes_are_not_buffered_but_the_rest_is_emitted():
    m = run(
        ins("x", 1, 1),
        ev("x", "INSERT", 2, table="app.secret", key={"id": 1}, row_id="S"),
        ev("x", "LOB_WRITE", 3, table="app.secret", key={"id": 1}, lob_column="c", lob_data="z"),
        ev("x", "DELETE", 4, table="app.secret", key={"id": 1}, undo=True, row_id="S"),
        ev("x", "DDL", 5, ddl="CREATE INDEX i"),
        ev("x", "COMMIT", 6),
        model=ReferenceModel(exclude_tables={"app.secret"}),
    )
    assert seqs(m) == [("x", [1, 5])] and m.dlq == []


def test_include_tables_keeps_only_those_tables():
    m = run(
        ins("x", 1, 1),
        ev("x", "INSERT", 2, table="app.other", key={"id": 1}),
        ev("x", "COMMIT", 3),
        model=ReferenceModel(include_tables={T}),
    )
    assert seqs(m) == [("x", [1])]


def test_filters_come_from_the_processor_config():
    config = ProcessorConfig(exclude_users="batch,etl", include_tables=T)
    model = ReferenceModel.from_config(config)
    assert model.exclude_users == {"batch", "etl"} and model.include_tables == {T}


# ---- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record, reason",
    [
        (b"\xff\xff\xff", "undecodable"),
        (b"", "undecodable"),
        ("not a dict", "not_a_raw_event"),
        ({**ins("x", 1, 1), "scn": "12"}, "invalid_field"),
        ({**ins("x", 1, 1), "op": "MERGE"}, "invalid_field"),
        ({"op": "INSERT", "seq": 1, "scn": 1}, "invalid_field"),
        (ins("x", -1, 1), "negative_seq"),
        (ins("", 1, 1), "missing_field: xid"),
        (ev("x", "INSERT", 1, table=T), "missing_field: key"),
        (ev("x", "DELETE", 1, key={"id": 1}), "missing_field: table"),
        (ev("x", "TRUNCATE", 1), "missing_field: table"),
        (ev("x", "DDL", 1, table=T), "missing_field: ddl"),
        (ev("x", "SAVEPOINT", 1), "missing_field: savepoint"),
        (ev("x", "ROLLBACK_TO_SAVEPOINT", 1), "missing_field: savepoint"),
        (ev("x", "SUBTXN_ABORT", 1), "missing_field: subxid"),
        (ev("x", "LOB_WRITE", 1, table=T, key={"id": 1}), "missing_field: lob_column"),
        (ev("x", "LOB_TRIM", 1, table=T, key={"id": 1}, lob_column="c"), "missing_field: lob_length"),
        (
            ev("x", "LOB_ERASE", 1, table=T, key={"id": 1}, lob_column="c", lob_offset=-1, lob_length=1),
            "negative_lob_position",
        ),
        (ev("x", "DELETE", 1, table=T, key={"id": 1}, undo=True), "missing_field: row_id"),
        (ev("x", "UPDATE", 1, table=T, key={}), "missing_field: key"),
        (ev("x", "LOB_ERASE", 1, table=T, key={"id": 1}, lob_column="c", lob_length=1), "missing_field: lob_offset"),
        (ev("x", "LOB_WRITE", 1, table=T, lob_column="c", lob_data="z"), "missing_field: row_id, or table and key"),
    ],
)
def test_bad_records_go_to_dlq_and_the_transaction_continues(record, reason):
    m = run(ins("x", 0, 0), record, ev("x", "COMMIT", 5))
    assert len(m.dlq) == 1 and m.dlq[0][:2] == (0, 1) and m.dlq[0][2].startswith(reason), m.dlq
    assert seqs(m) == [("x", [0])]


def test_encoded_records_are_decoded_and_a_dict_may_omit_defaulted_fields():
    m = run(events.encode_raw(ins("x", 1, 1)), {"xid": "x", "op": "COMMIT", "seq": 2, "scn": 2})
    assert seqs(m) == [("x", [1])] and m.dlq == []


def test_a_malformed_late_event_is_dead_lettered_not_counted_late():
    m = run(ins("x", 1, 1), ev("x", "COMMIT", 2), ev("x", "SAVEPOINT", 3))
    assert [d[:2] for d in m.dlq] == [(0, 2)] and m.late_events.get(0, 0) == 0


def test_a_transaction_with_the_incomplete_marker_is_dead_lettered_whole_like_the_engine_does():
    from processor.core import incomplete
    from processor.core.actions import Committed, DeadLetter, Finished
    from processor.core.engine import PartitionEngine
    from processor.store.memory import MemoryStore

    lost = ins("a", 2, 2)
    evs = [
        ins("a", 1, 1),
        incomplete.marker(lost, "too large for the raw topic", 2_000_000),
        ins("a", 3, 3),
        ev("a", events.COMMIT, 4),
        ins("b", 1, 4),
        incomplete.marker(ins("b", 2, 5), "too large", 2_000_000),
        ev("b", events.ROLLBACK, 3),  # nothing was lost: it ends as usual
        ins("c", 1, 6),
        ev("c", events.COMMIT, 2),
    ]
    model = run(*evs)
    assert seqs(model) == [("c", [1])]
    assert model.outcomes(0) == {"a": "abandoned", "b": ROLLED_BACK, "c": COMMITTED}
    assert [(o, r.split(":")[0]) for _, o, r in model.dlq] == [(3, "incomplete")]

    engine = PartitionEngine(0, MemoryStore())
    actions = [a for i, e in enumerate(evs) for a in engine.apply(i, e["xid"].encode(), events.encode_raw(e))]
    assert [a.txn.xid for a in actions if isinstance(a, Committed)] == ["c"]
    assert {a.xid: a.outcome for a in actions if isinstance(a, Finished)} == {"a": "abandoned", "b": ROLLED_BACK}
    assert [(a.offset, a.reason.split(":")[0]) for a in actions if isinstance(a, DeadLetter)] == [(3, "incomplete")]
    assert (engine.stats.abandoned, engine.stats.incomplete) == (1, 1)  # txbuffer_transactions_incomplete_total
