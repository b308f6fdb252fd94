"""Staging (PartitionEngine, processor/core/engine.py): a transaction keeps its writes in memory from its
BEGIN until it finishes or a checkpoint spills it (committed, past the offset horizon or the age
bound, or at a stop); one that finishes first never touches the store. The store's position then
says where a restart re-reads from to rebuild the staged ones, and records of the transactions the
store holds are not applied twice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.core import codec, codec_py, keys
from processor.core import events as ev
from processor.core.engine import Committed, PartitionEngine
from processor.runtime.emitter import Emitter
from processor.testing.memsink import MemorySink

from ..enginekit import Record


def change(xid: str, seq: int, op: str = ev.INSERT, row_id: str = "", **kw) -> dict:
    row_id = row_id or f"r{seq}"
    return ev.raw_event(xid, op, seq, seq, table="s.t", key={"id": seq}, after={"id": seq}, row_id=row_id, **kw)


def records(*events_: dict, start: int = 0) -> list[Record]:
    return [Record(start + i, e["xid"].encode(), ev.encode_raw(e)) for i, e in enumerate(events_)]


def stored_events(store, txn_prefix: bytes) -> list[bytes]:
    return [k for k, _ in store.scan(txn_prefix, keys.upper_bound(txn_prefix))]


@pytest.fixture(params=["batch", "apply"])
def feed(request):
    """Feed a batch through apply_records (the compiled lane takes the plain changes; on the fastavro
    fallback, apply() record by record inside it) or through apply() directly."""

    def feed(engine: PartitionEngine, recs: list[Record]) -> list:
        if request.param == "batch":
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
    emitter.advance()  # the batch's settlement, before its checkpoint (delivery.end_batch)
    engine.checkpoint()
    assert stored_events(store, txn.prefix) == []  # finished in the batch (MemorySink acknowledges at once)
    assert engine.completed["x"][1] == "committed"
    assert store.get(keys.meta_key(0, "x")) is None


def test_a_transaction_open_at_a_checkpoint_stays_staged_and_a_restart_re_reads_it(store, feed):
    engine = PartitionEngine(0, store)
    recs = records(
        ev.raw_event("y", ev.BEGIN, 0, 0),
        change("y", 1, row_id="r1"),
        change("y", 2, op=ev.UPDATE, row_id="r1"),
        ev.raw_event("x", ev.BEGIN, 0, 0),  # offset 3
        change("x", 1),
        change("y", 3, op=ev.UPDATE, undo=True, row_id="r1"),  # reads y back: spills it, undoes seq 2
        change("x", 2, subxid="s"),
    )
    feed(engine, recs)
    engine.checkpoint()
    x, y = engine.open["x"], engine.open["y"]
    assert x.staged is not None and stored_events(store, x.prefix) == []  # still in memory
    assert y.staged is None and len(stored_events(store, y.prefix)) == 3  # seq 1 and the row_id entries
    assert store.get(keys.meta_key(0, "x")) is None and store.get(keys.meta_key(0, "y")) is not None

    restored = PartitionEngine.restore(0, store)
    assert restored is not None and list(restored.open) == ["y"]
    assert (restored.next_offset, restored.applied_to(), restored.low_watermark()) == (3, 7, 0)
    # The consumer re-reads from offset 3: x is rebuilt, y's records there (the undo) are not applied twice.
    recs += records(ev.raw_event("x", ev.COMMIT, 3, 3), ev.raw_event("y", ev.COMMIT, 4, 4), start=len(recs))
    committed = [a.txn for a in feed(restored, recs[restored.next_offset :]) if isinstance(a, Committed)]
    assert [t.xid for t in committed] == ["x", "y"]
    assert committed[0].events == 2
    restored.flush_data()
    emitter = Emitter(MemorySink())
    for txn in committed:
        emitter.release(restored, txn)
    assert [(c["source"]["xid"], c["source"]["seq"]) for c in emitter.sink.change_events()] == [
        ("x", 1),
        ("x", 2),
        ("y", 1),
    ]


def test_a_restore_re_reads_earlier_staged_transactions_and_the_low_watermark_waits_for_them(store, feed):
    """The store's transactions are loaded first, the staged ones re-read after them, and a staged one
    may have begun earlier: the low watermark is never past a transaction not re-read yet, and the
    oldest open transaction is the one that began first."""
    engine = PartitionEngine(0, store)
    recs = records(
        ev.raw_event("x", ev.BEGIN, 0, 0),  # offset 0: stays staged
        change("x", 1),
        ev.raw_event("y", ev.BEGIN, 0, 0),  # offset 2
        change("y", 1, row_id="r1"),
        change("y", 2, op=ev.UPDATE, row_id="r1"),
        change("y", 3, op=ev.UPDATE, undo=True, row_id="r1"),  # reads y back: spills it
    )
    feed(engine, recs)
    engine.checkpoint()
    assert engine.open["x"].staged is not None and engine.open["y"].staged is None

    restored = PartitionEngine.restore(0, store)
    assert restored is not None and list(restored.open) == ["y"]
    # Before the re-read, x is not open yet: committing y's first offset (2) would skip x's start.
    assert (restored.next_offset, restored.low_watermark()) == (0, 0)
    feed(restored, recs[restored.next_offset :])
    assert restored.next_offset == restored.applied_to() == len(recs)
    oldest = restored.oldest_open()
    assert oldest is not None and (oldest.xid, restored.low_watermark()) == ("x", 0)
    assert list(restored.open) == ["x", "y"]  # sorted once the re-read is done
    recs += records(ev.raw_event("x", ev.COMMIT, 2, 2), start=len(recs))
    feed(restored, recs[-1:])
    oldest = restored.oldest_open()
    assert oldest is not None and oldest.xid == "y" and restored.low_watermark() == 0  # x is pending
    restored.acknowledged(restored.pending["x"])
    assert restored.low_watermark() == 2


@pytest.mark.parametrize("why", ["horizon", "age", "spill_all"])
def test_a_staged_transaction_is_spilled_past_the_horizon_or_age_or_when_asked(store, feed, why):
    engine = PartitionEngine(0, store, stage_horizon=5)
    recs = records(ev.raw_event("x", ev.BEGIN, 0, 0, ts_ms=1_000), change("x", 1))
    later = 20_000 if why == "age" else 1_000
    others = 5 if why == "horizon" else 1
    recs += records(*(ev.raw_event(f"o{i}", ev.BEGIN, 0, 0, ts_ms=later) for i in range(others)), start=2)
    feed(engine, recs)
    engine.checkpoint(spill_all=why == "spill_all")
    x = engine.open["x"]
    assert x.staged is None and len(stored_events(store, x.prefix)) == 2
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and "x" in restored.open and restored.open["x"].events == 1


def test_a_staged_transaction_within_its_bounds_stays_in_memory(store, feed):
    engine = PartitionEngine(0, store, stage_horizon=5)
    feed(engine, records(ev.raw_event("x", ev.BEGIN, 0, 0, ts_ms=1_000), change("x", 1), change("x", 2)))
    engine.checkpoint()
    assert engine.open["x"].staged is not None
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and restored.open == {} and restored.next_offset == 0


def test_nothing_is_checkpointed_until_the_re_read_is_done(store, feed):
    engine = PartitionEngine(0, store)
    recs = records(ev.raw_event("x", ev.BEGIN, 0, 0), change("x", 1), change("x", 2), change("x", 3))
    feed(engine, recs)
    engine.checkpoint()
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and (restored.next_offset, restored.applied_to()) == (0, 4)
    feed(restored, recs[:2])
    restored.checkpoint()  # part way: the store's position must not move (it covers offsets 0..3)
    again = PartitionEngine.restore(0, store)
    assert again is not None and (again.next_offset, again.applied_to()) == (0, 4)
    feed(restored, recs[2:])
    restored.checkpoint()
    assert restored.open["x"].events == 3
    again = PartitionEngine.restore(0, store)
    assert again is not None and (again.next_offset, again.applied_to()) == (0, 4)  # x is staged again


def test_a_committed_transaction_in_flight_at_a_checkpoint_stays_staged_and_a_restart_emits_it(store, feed):
    """Its outputs are not acknowledged yet (the emitter has not finished it): the checkpoint writes
    nothing of it, and its position makes a restart re-read it, commit included, and emit it again."""
    engine = PartitionEngine(0, store)
    recs = records(ev.raw_event("w", ev.BEGIN, 0, 0), ev.raw_event("w", ev.COMMIT, 1, 1))
    recs += records(ev.raw_event("x", ev.BEGIN, 2, 1), change("x", 1), ev.raw_event("x", ev.COMMIT, 2, 2), start=2)
    feed(engine, recs)
    engine.acknowledged(engine.pending["w"])  # w finished; x is in flight
    txn = engine.pending["x"]
    engine.checkpoint()
    assert txn.staged is not None and stored_events(store, txn.prefix) == []
    assert store.get(keys.meta_key(0, "x")) is None
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and list(restored.pending) == [] and restored.next_offset == 2
    committed = [a.txn for a in feed(restored, recs[restored.next_offset :]) if isinstance(a, Committed)]
    assert [t.xid for t in committed] == ["x"]  # w is in the completed index: not emitted again
    emitter = Emitter(MemorySink())
    emitter.release(restored, committed[0])
    assert [c["source"]["seq"] for c in emitter.sink.change_events()] == [1]


def test_a_committed_transaction_in_flight_is_due_by_its_commit_not_its_beginning(store, feed):
    """Begun past the horizon but committed within it, it stays staged (it finishes within a few
    batches); once its commit is past the horizon too (the broker never acknowledged it), it is spilled."""
    engine = PartitionEngine(0, store, stage_horizon=5)
    recs = records(ev.raw_event("x", ev.BEGIN, 0, 0), change("x", 1))
    recs += records(*(ev.raw_event(f"o{i}", ev.BEGIN, 0, 0) for i in range(6)), start=2)  # offsets 2..7
    recs += records(ev.raw_event("x", ev.COMMIT, 8, 8), start=8)
    feed(engine, recs)
    x = engine.pending["x"]
    engine.checkpoint()  # x began 9 offsets ago (horizon 5), committed 1 ago: kept, and holds the re-read
    assert x.staged is not None and stored_events(store, x.prefix) == []
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and restored.next_offset == 0
    feed(engine, records(*(ev.raw_event(f"p{i}", ev.BEGIN, 0, 0) for i in range(5)), start=9))
    engine.checkpoint()  # its commit is 6 offsets back now
    assert x.staged is None and len(stored_events(store, x.prefix)) == 2
    assert store.get(keys.meta_key(0, "x")) is not None


def test_a_committed_staged_transaction_is_spilled_when_a_later_committed_one_is_stored(store, feed):
    """A restart emits the stored pending transactions before the re-read commits the staged ones: a
    staged one committed before a stored one goes to the store, so both go out in commit order; one
    committed after the last stored one stays staged."""
    engine = PartitionEngine(0, store)
    recs = records(
        ev.raw_event("big", ev.BEGIN, 0, 0),  # offset 0
        change("big", 1, row_id="r1"),
        change("big", 2, op=ev.UPDATE, row_id="r1"),
        change("big", 3, op=ev.UPDATE, undo=True, row_id="r1"),  # reads big back: spills it
        ev.raw_event("a", ev.BEGIN, 0, 0),  # offset 4
        change("a", 1),
        ev.raw_event("a", ev.COMMIT, 5, 5),  # a commits before big
        ev.raw_event("big", ev.COMMIT, 6, 6),
        ev.raw_event("c", ev.BEGIN, 0, 0),
        change("c", 1),
        ev.raw_event("c", ev.COMMIT, 7, 7),  # c commits after big
    )
    feed(engine, recs)
    a, big, c = engine.pending["a"], engine.pending["big"], engine.pending["c"]
    assert big.staged is None and a.staged is not None and c.staged is not None
    engine.checkpoint()
    assert a.staged is None and len(stored_events(store, a.prefix)) == 2  # its change and its row entry
    assert store.get(keys.meta_key(0, "a")) is not None
    assert c.staged is not None and stored_events(store, c.prefix) == []
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and list(restored.pending) == ["a", "big"]  # resumed in commit order
    committed = [a.txn for a in feed(restored, recs[restored.next_offset :]) if isinstance(a, Committed)]
    assert [t.xid for t in committed] == ["c"]  # then the re-read commits c, after them


def test_a_rolled_back_transaction_of_the_batch_writes_no_range_delete(store, feed):
    engine = PartitionEngine(0, store)
    feed(engine, records(ev.raw_event("x", ev.BEGIN, 0, 1), change("x", 1), ev.raw_event("x", ev.ROLLBACK, 2, 2)))
    assert len(engine.batch) == 0  # no event put, no range delete
    engine.checkpoint()  # with its completed-index entry, in the checkpoint's FIFO batch
    assert stored_events(store, keys.txn_prefix(0, "x")) == []
    assert engine.completed["x"][1] == "rolled_back"
    ((fifo_key, value),) = store.scan_prefix(keys.partition_prefix(keys.FIFO, 0))
    assert keys.fifo_batch_entries(value, keys.fifo_batch_of(fifo_key)) == [(2, "x", 0, "rolled_back")]


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


SHORT_BYTES = st.binary(max_size=4)


@given(staged=st.dictionaries(SHORT_BYTES, st.integers(), max_size=30), begin=SHORT_BYTES, end=SHORT_BYTES)
def test_the_staged_range_is_the_sorted_slice_of_the_staged_writes(staged, begin, end):
    # codec.staged_range is compiled (C byte comparisons, a sort only when out of order) or this.
    assert codec.staged_range(staged, begin, end) == codec_py.staged_range(staged, begin, end)
    assert codec_py.staged_range(staged, begin, end) == sorted((k, v) for k, v in staged.items() if begin <= k < end)


def test_metadata_is_deleted_only_where_it_was_written(store, feed):
    # x is spilled (spill_all), so its metadata is in the store and goes when it finishes; y finishes
    # while staged: it never had metadata there, and no tombstone is written for it.
    engine = PartitionEngine(0, store)
    feed(engine, records(ev.raw_event("x", ev.BEGIN, 0, 0), change("x", 1)))
    engine.checkpoint(spill_all=True)
    assert store.get(keys.meta_key(0, "x")) is not None
    feed(engine, records(ev.raw_event("y", ev.BEGIN, 0, 0), change("y", 1), start=2))
    feed(engine, records(ev.raw_event("x", ev.ROLLBACK, 2, 2), ev.raw_event("y", ev.ROLLBACK, 2, 2), start=4))
    deletes = []
    engine.batch.delete = lambda key, _delete=engine.batch.delete: (deletes.append(key), _delete(key))
    engine.checkpoint()
    assert keys.meta_key(0, "x") in deletes and keys.meta_key(0, "y") not in deletes
    restored = PartitionEngine.restore(0, store)
    assert restored is not None and restored.open == {} and set(restored.completed) == {"x", "y"}
