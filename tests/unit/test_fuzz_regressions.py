"""Sequences where bench.fuzz found the engine and the reference model apart, each cut down to a
few events. Every test checks the engine's concrete output and that the reference agrees."""

from __future__ import annotations

from processor.core import events as ev
from processor.store.memory import MemoryStore
from processor.testing.reference import ReferenceModel
from tests.enginekit import R, ins, new_run


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
