"""Staging (PartitionEngine, processor/core/engine.py): a transaction begun in the current batch keeps
its writes in memory until the batch's checkpoint spills them; one that also finishes in that batch
never touches the store. At every checkpoint the store holds every unfinished transaction's events,
so a restart from the store resumes exactly as before."""

from __future__ import annotations

import pytest

from processor.core import codec, keys
from processor.core import events as ev
from processor.core.engine import Committed, PartitionEngine
from processor.runtime.emitter import Emitter
from processor.testing.memsink import MemorySink

from .test_engine_lane import Record


def change(xid: str, seq: int, op: str = ev.INSERT, row_id: str = "", **kw) -> dict:
    row_id = row_id or f"r{seq}"
    return ev.raw_event(xid, op, seq, seq, table="s.t", key={"id": seq}, after={"id": seq}, row_id=row_id, **kw)


def records(*events_: dict, start: int = 0) -> list[Record]:
    return [Record(start + i, e["xid"].encode(), ev.encode_raw(e)) for i, e in enumerate(events_)]


def stored_events(store, txn_prefix: bytes) -> list[bytes]:
    return [k for k, _ in store.scan(txn_prefix, keys.upper_bound(txn_prefix))]


@pytest.fixture(params=["lane", "apply"])
def feed(request):
    """Feed a batch through apply_records (the compiled lane takes the plain changes) or apply()."""
    if request.param == "lane" and codec.BACKEND != "compiled":
        pytest.skip("the lane is compiled")

    def feed(engine: PartitionEngine, recs: list[Record]) -> list:
        if request.param == "lane":
            return engine.apply_records(recs)
        return [a for r in recs for a in engine.apply(r.offset(), r.key(), r.value())]

    return feed


def test_a_transaction_that_ends_in_its_batch_never_reaches_the_store(store, feed):
    engine = PartitionEngine(0, store)
    emitter = Emitter(MemorySink())
    # seqs out of order and one re-sent: the emitter still reads them in seq order, once each
    recs = records(ev.raw_event("x", ev.BEGIN, 0, 1), change("x", 3), change("x", 1), change("x", 2), change("x", 1))
    recs += records(ev.raw_event("x", ev.COMMIT, 4, 4), start=len(recs))
    actions = feed(engine, recs)
    txn = next(a.txn for a in actions if isinstance(a, Committed))
    engine.flush_data()
    assert stored_events(store, txn.prefix) == []  # staged, not written
    assert txn.events == 4
    emitter.release(engine, txn)
    assert [c["source"]["seq"] for c in emitter.sink.change_events()] == [1, 2, 3]
    engine.checkpoint()
    assert stored_events(store, txn.prefix) == []  # finished in the batch (MemorySink acknowledges at once)
    assert engine.completed["x"][1] == "committed"
    assert store.get(keys.meta_key(0, "x")) is None


def test_a_transaction_still_open_at_the_checkpoint_is_spilled_and_survives_a_restart(store, feed):
    engine = PartitionEngine(0, store)
    feed(engine, records(ev.raw_event("x", ev.BEGIN, 0, 1), change("x", 1), change("x", 2, subxid="s")))
    txn = engine.open["x"]
    engine.flush_data()
    assert stored_events(store, txn.prefix) == []
    engine.checkpoint()
    assert txn.staged is None
    assert len(stored_events(store, txn.prefix)) == 5  # 2 events, 2 row_id entries, 1 subxid entry
    # The next batch writes the spilled transaction's changes straight to the store.
    feed(engine, records(change("x", 3), start=3))
    engine.flush_data()
    assert len(stored_events(store, txn.prefix)) == 7
    engine.checkpoint()
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and list(restored.open) == ["x"]
    feed(restored, records(ev.raw_event("x", ev.COMMIT, 4, 4), start=4))
    restored.flush_data()
    emitter = Emitter(MemorySink())
    emitter.release(restored, restored.pending["x"])
    assert [c["source"]["seq"] for c in emitter.sink.change_events()] == [1, 2, 3]


def test_a_committed_transaction_not_acknowledged_by_the_checkpoint_is_spilled(store, feed):
    engine = PartitionEngine(0, store)
    feed(engine, records(ev.raw_event("x", ev.BEGIN, 0, 1), change("x", 1), ev.raw_event("x", ev.COMMIT, 2, 2)))
    txn = engine.pending["x"]
    engine.checkpoint()  # the emitter has not finished it (its outputs are not settled yet)
    assert len(stored_events(store, txn.prefix)) == 2
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and list(restored.pending) == ["x"]
    emitter = Emitter(MemorySink())
    emitter.release(restored, restored.pending["x"])
    assert [c["source"]["seq"] for c in emitter.sink.change_events()] == [1]


def test_a_rolled_back_transaction_of_the_batch_writes_no_range_delete(store, feed):
    engine = PartitionEngine(0, store)
    feed(engine, records(ev.raw_event("x", ev.BEGIN, 0, 1), change("x", 1), ev.raw_event("x", ev.ROLLBACK, 2, 2)))
    assert len(engine.batch) == 2  # its completed-index entries; no event put, no range delete
    engine.checkpoint()
    assert stored_events(store, keys.txn_prefix(0, "x")) == []
    assert engine.completed["x"][1] == "rolled_back"


@pytest.mark.parametrize(
    ("reads_back", "survivors"),
    [
        (change("x", 3, op=ev.UPDATE, undo=True, row_id="r2"), [1]),  # looks up the newest change of its row
        (ev.raw_event("x", ev.ROLLBACK_TO_SAVEPOINT, 3, 3, savepoint="sp"), []),
        (ev.raw_event("x", ev.SUBTXN_ABORT, 3, 3, subxid="s"), [1]),
    ],
    ids=["undo", "rollback_to_savepoint", "subtxn_abort"],
)
def test_an_op_that_reads_the_transaction_back_spills_it_first(store, feed, reads_back, survivors):
    engine = PartitionEngine(0, store)
    feed(
        engine,
        records(
            ev.raw_event("x", ev.BEGIN, 0, 0),
            ev.raw_event("x", ev.SAVEPOINT, 0, 0, savepoint="sp"),
            change("x", 1),
            change("x", 2, subxid="s"),
            reads_back,
            ev.raw_event("x", ev.COMMIT, 4, 4),
        ),
    )
    txn = engine.pending["x"]
    assert txn.staged is None
    engine.flush_data()
    emitter = Emitter(MemorySink())
    emitter.release(engine, txn)
    assert [c["source"]["seq"] for c in emitter.sink.change_events()] == survivors
