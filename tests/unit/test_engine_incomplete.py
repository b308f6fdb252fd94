"""A transaction that lost an event at the source (the incomplete marker) is never emitted."""

from __future__ import annotations

import pytest

from processor.core import events as ev
from processor.core import incomplete, keys
from processor.core.engine import DeadLetter, Finished, PartitionEngine
from processor.core.txn import ABANDONED, ROLLED_BACK

from ..enginekit import R, ins, new_run


def lost(xid: str, seq: int, pk: int = 9) -> dict:
    """The marker a source writes for an INSERT it could not put on the raw topic."""
    big = ins(xid, seq, pk, table="s.docs", after={"id": pk, "doc": "x" * 64})
    return incomplete.marker(big, "record too large for txbuffer.raw: 2000000 bytes", 2_000_000)


def test_marker_is_a_savepoint_of_the_same_transaction_and_position():
    m = lost("a", 3)
    assert (m["xid"], m["op"], m["seq"], m["scn"], m["savepoint"]) == ("a", ev.SAVEPOINT, 3, 3, incomplete.MARK)
    assert m["after"] is None and m["table"] == "s.docs"
    assert m["attrs"][incomplete.ATTR_OP] == ev.INSERT and m["attrs"][incomplete.ATTR_SIZE] == "2000000"
    ev.decode_raw(ev.encode_raw(m))  # a valid RawEvent


def test_incomplete_transaction_is_dead_lettered_whole_at_commit_and_others_emitted(store):
    run = new_run(store)
    run.feed(
        R("a", ev.BEGIN, 0, 1),
        ins("a", 1, 1),
        ins("b", 1, 2),
        lost("a", 2),
        ins("a", 3, 3),
        R("a", ev.COMMIT, 4, 10),
        R("b", ev.COMMIT, 2, 11),
    )
    assert [c["source"]["xid"] for c in run.changes] == ["b"]
    assert [t["id"] for t in run.transactions] == ["b", "b"]  # BEGIN and END of b only
    (dead,) = run.dead
    assert dead.offset == 5 and dead.key == b"a" and dead.value is None
    assert dead.reason.startswith("incomplete: event seq 2 (INSERT s.docs, scn 2, 2000000 bytes) oversized at source")
    assert "offsets 0..5" in dead.reason and "2 buffered events not emitted" in dead.reason
    assert run.engine.completed["a"] == (5, ABANDONED)
    assert run.engine.incomplete == {}
    assert run.engine.stats.abandoned == 1 and run.engine.stats.dead_letters == 1
    assert [k for k, _ in store.scan_prefix(keys.TXN)] == []  # nothing of "a" (or "b") left buffered


def test_commit_action_is_a_dead_letter_and_an_abandoned_outcome_record(store):
    engine = PartitionEngine(0, store)
    for offset, e in enumerate([ins("a", 1, 1), lost("a", 2)]):
        assert engine.apply(offset, b"a", ev.encode_raw(e)) == []
    dead, finished = engine.apply(2, b"a", ev.encode_raw(R("a", ev.COMMIT, 3)))
    assert isinstance(dead, DeadLetter) and dead.reason.startswith("incomplete: ")
    assert finished == Finished(0, "a", 2, ABANDONED) and finished.needs_record  # a rebuild knows it


def test_several_lost_events_are_counted_in_the_one_dead_letter(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), lost("a", 2), lost("a", 5), R("a", ev.COMMIT, 6))
    (dead,) = run.dead
    assert "event seq 2 " in dead.reason and "(and 1 more)" in dead.reason


def test_rolled_back_incomplete_transaction_lost_nothing_and_ends_as_usual(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), lost("a", 2), R("a", ev.ROLLBACK, 3))
    assert run.dead == [] and run.engine.incomplete == {}
    assert run.engine.completed["a"][1] == ROLLED_BACK


def test_a_restarted_transaction_forgets_the_marker_of_its_first_attempt(store):
    run = new_run(store)
    run.feed(R("a", ev.BEGIN, 0), lost("a", 1), R("a", ev.BEGIN, 0), ins("a", 1, 1), R("a", ev.COMMIT, 2))
    assert run.dead == [] and [c["source"]["xid"] for c in run.changes] == ["a"]


@pytest.mark.parametrize("spilled", [True, False], ids=["spilled", "staged"])
def test_the_mark_survives_a_restart_from_the_store(store, spilled):
    run = new_run(store)
    events_ = [ins("a", 1, 1), lost("a", 2), ins("a", 3, 3)]
    run.feed(*events_)
    if spilled:
        run.engine.checkpoint(spill_all=True)
    restored = PartitionEngine.restore(0, store)
    assert restored is not None
    if not spilled:  # still staged: the store does not have it; the restart re-reads it, mark included
        assert restored.incomplete == {} and restored.next_offset == 0 and restored.applied_to() == 3
        for offset, e in enumerate(events_):
            assert restored.apply(offset, b"a", ev.encode_raw(e)) == []
    assert restored.incomplete == {"a": [restored.incomplete["a"][0], 1]}  # one marker, not counted twice
    actions = restored.apply(3, b"a", ev.encode_raw(R("a", ev.COMMIT, 4)))
    assert [type(a) for a in actions] == [DeadLetter, Finished]
    restored.checkpoint()
    again = PartitionEngine.restore(0, store)
    assert again is not None and again.incomplete == {} and again.completed["a"][1] == ABANDONED


def test_a_plain_savepoint_is_not_a_marker(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), R("a", ev.SAVEPOINT, 2, savepoint="s1"), ins("a", 3, 2), R("a", ev.COMMIT, 4))
    assert run.dead == [] and len(run.changes) == 2


def test_stripped_control_event_keeps_everything_but_its_attrs():
    commit = R("a", ev.COMMIT, 7, 70, ts_ms=5, attrs={"huge": "x" * 100}, user="u")
    s = incomplete.stripped(commit, 1234)
    assert s == {**commit, "attrs": {incomplete.ATTR_STRIPPED: "1234"}}
    assert incomplete.stripped(ins("a", 1, 1), 1234) is None
    assert incomplete.stripped(R("a", ev.LOB_WRITE, 2, lob_column="C", lob_data="x"), 1234) is None
