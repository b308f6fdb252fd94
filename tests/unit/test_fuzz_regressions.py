"""Sequences where bench.fuzz found the engine and the reference model apart, each cut down to a
few events. Every test checks the engine's concrete output and that the reference agrees."""

from __future__ import annotations

from processor.core import events as ev
from processor.store.memory import MemoryStore
from processor.testing.reference import ReferenceModel
from tests.enginekit import R, dele, ins, new_run, upd


def run_both(feed: list[dict]):
    run = new_run(MemoryStore())
    run.feed(*feed)
    model = ReferenceModel()
    for offset, event in enumerate(feed):
        model.feed(0, offset, event)
    expected = [c for t in model.committed.get(0, []) for c in t.changes]
    assert [d.offset for d in run.dead] == [o for _, o, _ in model.dlq]
    assert sorted(run.changes, key=lambda c: c["event_id"]) == sorted(expected, key=lambda c: c["event_id"])
    return run


def test_undo_skips_a_change_whose_seq_was_reused_by_another_row():
    # bench.fuzz seed 21: a bit-flipped copy of an INSERT replaced it under the same seq with
    # another row_id, so the undo row that followed has no change of its row_id left.
    feed = [
        R("x", ev.BEGIN, 0),
        ins("x", 1, 7, row_id="r7"),
        ins("x", 2, 8, row_id="r8"),
        ins("x", 2, 8, row_id="r9"),  # the same seq again: replaces the change of r8
        R("x", ev.DELETE, 3, table="s.t", key={"id": 8}, undo=True, row_id="r8"),
        R("x", ev.COMMIT, 4),
    ]
    run = run_both(feed)
    assert [d.offset for d in run.dead] == [4]
    assert [(c["source"]["seq"], c["source"]["row_id"]) for c in run.changes] == [(1, "r7"), (2, "r9")]


def test_undo_reaches_past_a_reused_seq_to_the_rows_earlier_change():
    feed = [
        R("x", ev.BEGIN, 0),
        ins("x", 1, 8, row_id="r8"),
        ins("x", 2, 8, row_id="r8"),
        ins("x", 2, 8, row_id="r9"),  # seq 2 now belongs to r9: r8's newest change is seq 1
        R("x", ev.DELETE, 3, table="s.t", key={"id": 8}, undo=True, row_id="r8"),
        R("x", ev.COMMIT, 4),
    ]
    run = run_both(feed)
    assert run.dead == []
    assert [(c["source"]["seq"], c["source"]["row_id"]) for c in run.changes] == [(2, "r9")]


def test_fragment_by_row_id_has_no_target_when_its_rows_seq_was_reused():
    # bench.fuzz seed 21: the same replacement, followed by XML/LOB fragments of the first row.
    feed = [
        R("y", ev.BEGIN, 0),
        ins("y", 1, 5, after={"id": 5, "body": "ab"}, row_id="d5"),
        ins("y", 1, 5, after={"id": 5, "body": "ab"}, row_id="dX"),
        R("y", ev.XML_WRITE, 2, row_id="d5", table="s.t", key={"id": 5}, lob_column="body", lob_data="cd"),
        R("y", ev.COMMIT, 3),
    ]
    run = run_both(feed)
    assert [d.offset for d in run.dead] == [3]
    assert [c["after"] for c in run.changes] == [{"id": 5, "body": "ab"}]


def test_subtransaction_abort_keeps_a_change_whose_seq_was_reused_by_another_subtransaction():
    # bench.fuzz seed 1 (100k): a copy of an INSERT with another subxid replaced it under the same
    # seq; the abort of the first subtransaction must not drop the change that replaced it.
    feed = [
        R("s", ev.BEGIN, 0),
        ins("s", 1, 1, subxid="s.1"),
        ins("s", 2, 2, subxid="s.1"),
        ins("s", 2, 2, subxid="s.2"),
        R("s", ev.SUBTXN_ABORT, 3, subxid="s.1"),
        R("s", ev.COMMIT, 4),
    ]
    run = run_both(feed)
    assert [(c["source"]["seq"], c["after"]) for c in run.changes] == [(2, {"id": 2, "v": "s-2"})]


def _lob(xid: str, seq: int, data: str = "cd", **fields) -> dict:
    return R(
        xid, ev.LOB_WRITE, seq, row_id="r7", table="s.t", key={"id": 7}, lob_column="body", lob_data=data, **fields
    )


def _undo_r7(xid: str, seq: int) -> dict:
    return R(xid, ev.DELETE, seq, table="s.t", key={"id": 7}, undo=True, row_id="r7")


def test_fragment_of_an_undone_change_stays_dropped_when_the_change_is_sent_again():
    feed = [
        R("f", ev.BEGIN, 0),
        ins("f", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        _lob("f", 2),
        _undo_r7("f", 3),  # drops seq 1 and, with it, the fragment at seq 2
        ins("f", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),  # re-sent: a change without fragments
        R("f", ev.COMMIT, 4),
    ]
    run = run_both(feed)
    assert [c["after"] for c in run.changes] == [{"id": 7, "body": "ab"}]


def test_fragment_of_a_change_a_subtransaction_abort_dropped_stays_dropped():
    feed = [
        R("f", ev.BEGIN, 0),
        ins("f", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7", subxid="f.1"),
        _lob("f", 2),  # no subxid: it goes because its target goes
        R("f", ev.SUBTXN_ABORT, 3, subxid="f.1"),
        ins("f", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        R("f", ev.COMMIT, 4),
    ]
    run = run_both(feed)
    assert [c["after"] for c in run.changes] == [{"id": 7, "body": "ab"}]


def test_fragment_beyond_the_savepoint_range_goes_with_its_target():
    feed = [
        R("f", ev.BEGIN, 0),
        R("f", ev.SAVEPOINT, 1, savepoint="a"),
        ins("f", 2, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        _lob("f", 9),  # its seq is past the rollback's, its target inside the rolled-back range
        R("f", ev.ROLLBACK_TO_SAVEPOINT, 4, savepoint="a"),
        ins("f", 2, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        R("f", ev.COMMIT, 10),
    ]
    run = run_both(feed)
    assert [c["after"] for c in run.changes] == [{"id": 7, "body": "ab"}]


def test_resent_fragment_merges_into_its_new_target_only():
    feed = [
        R("f", ev.BEGIN, 0),
        ins("f", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        _lob("f", 3),  # target: seq 1
        upd("f", 2, 7, after={"id": 7, "body": "q"}, row_id="r7"),
        _lob("f", 3),  # sent again: now the newest earlier change of the row is seq 2
        R("f", ev.COMMIT, 4),
    ]
    run = run_both(feed)
    assert [c["after"] for c in run.changes] == [{"id": 7, "body": "ab"}, {"id": 7, "body": "qcd"}]


def test_fragment_is_not_merged_into_a_delete_that_replaced_its_target():
    feed = [
        R("f", ev.BEGIN, 0),
        ins("f", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        _lob("f", 2),
        dele("f", 1, 7, row_id="r7"),  # the same seq again, now a DELETE: no after image to merge into
        R("f", ev.COMMIT, 3),
    ]
    run = run_both(feed)
    assert [(c["op"], c["after"]) for c in run.changes] == [("d", None)]


def test_fragment_merges_into_a_snapshot_row():
    feed = [
        R("f", ev.BEGIN, 0),
        R("f", ev.READ, 1, table="s.t", key={"id": 7}, after={"id": 7, "body": "ab"}, row_id="r7"),
        _lob("f", 2),
        R("f", ev.COMMIT, 3),
    ]
    run = run_both(feed)
    assert [(c["op"], c["after"]) for c in run.changes] == [("r", {"id": 7, "body": "abcd"})]
