"""A store written past its position (PartitionEngine.flush_data) is rebuilt, not restored.

An undo, a LOB fragment or the release of a stored transaction flushes the engine's pending writes
so that reads see them. Until the next checkpoint the store then holds effects of records past its
position, deletes among them. A restart restored that store and re-applied the records after the
position over data that had gone further: a fragment whose row a later re-sent BEGIN had dropped
found nothing and was dead-lettered (seen in bench.chaos). Such a store carries the AHEAD mark, and
the restart rebuilds the partition from the committed offset (runtime.partitions.restore_partition).
"""

from __future__ import annotations

from processor.core import events as ev
from processor.core import keys
from processor.core.engine import Committed, DeadLetter, Filters, PartitionEngine
from processor.runtime.emitter import Emitter
from processor.runtime.partitions import restore_partition
from processor.testing.memsink import MemorySink

from ..enginekit import R, Record, ins


def _lob(xid: str, seq: int, pk: int, data: str) -> dict:
    return R(xid, ev.LOB_WRITE, seq, table="s.t", key={"id": pk}, lob_column="doc", lob_data=data)


# X buffers a row and a fragment of it (the fragment spills X: X is in the store at the checkpoint),
# then, after the checkpoint, another fragment of that row, a re-sent BEGIN (the source restarts X:
# everything before it is dropped), a new row and a fragment of it, whose read flushes the drop.
EVENTS = [
    R("x", ev.BEGIN, 0),
    ins("x", 1, 1, after={"id": 1, "doc": None}),
    _lob("x", 2, 1, "a"),
    # --- checkpoint after offset 2
    _lob("x", 3, 1, "b"),
    R("x", ev.BEGIN, 0),
    ins("x", 1, 2, after={"id": 2, "doc": None}),
    _lob("x", 2, 2, "c"),
    # --- the process dies here, before its next checkpoint
    R("x", ev.COMMIT, 3),
]
CHECKPOINT_AFTER, CRASH_AFTER = 2, 6


def _records(start: int) -> list[Record]:
    return [Record(o, b"x", ev.encode_raw(e)) for o, e in enumerate(EVENTS) if o >= start]


def test_a_crash_after_a_flush_past_the_checkpoint_rebuilds_and_emits_the_transaction_whole(store):
    engine = PartitionEngine(0, store, Filters())
    assert not [a for a in engine.apply_records(_records(0)[: CHECKPOINT_AFTER + 1]) if isinstance(a, DeadLetter)]
    engine.checkpoint()
    committed = engine.low_watermark()  # the offset the group commits: X is open from offset 0
    assert not engine.apply_records(_records(CHECKPOINT_AFTER + 1)[: CRASH_AFTER - CHECKPOINT_AFTER])
    assert PartitionEngine.written_ahead(0, store)  # the drop landed before any checkpoint covered it

    restored = restore_partition(0, store, Filters(), 10_000, committed, log_start=0)
    assert restored.source == "rebuild-ahead" and restored.start_offset == committed
    engine = restored.engine
    actions = engine.apply_records(_records(restored.start_offset))
    assert not [a for a in actions if isinstance(a, DeadLetter)]
    sink = MemorySink()
    emitter = Emitter(sink)
    engine.flush_data()
    for action in actions:
        if isinstance(action, Committed):
            emitter.release(engine, action.txn)
    emitter.advance()
    # Only the re-sent attempt: its row with its fragment merged.
    assert [c["after"] for c in sink.change_events()] == [{"id": 2, "doc": "c"}]


def test_a_checkpoint_clears_the_mark_and_a_clean_store_is_restored(store):
    engine = PartitionEngine(0, store, Filters())
    engine.apply_records(_records(0)[: CHECKPOINT_AFTER + 1])
    assert PartitionEngine.written_ahead(0, store)  # the first fragment's read flushed
    engine.checkpoint()
    assert not PartitionEngine.written_ahead(0, store) and store.get(keys.ahead_key(0)) is None
    restored = restore_partition(0, store, Filters(), 10_000, engine.low_watermark(), log_start=0)
    assert restored.source == "local" and restored.start_offset == CHECKPOINT_AFTER + 1
