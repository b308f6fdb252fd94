"""A raw record keyed by something other than its XID: the key picks the partition, so the rest of
its transaction may sit in another partition, where it would be buffered and emitted on its own with
the same event_ids. Such a record is dead-lettered with the reason; everything else goes on."""

from __future__ import annotations

import pytest

from processor.core import events as ev
from processor.core.engine import DeadLetter, PartitionEngine
from processor.store.memory import MemoryStore

from ..enginekit import R, ins, new_run


@pytest.fixture
def store():
    return MemoryStore()


def test_a_record_keyed_by_another_xid_is_dead_lettered_with_the_reason(store):
    misplaced = ev.encode_raw(ins("a", 2, 2))
    [action] = PartitionEngine(0, store).apply(0, b"b", misplaced)
    assert isinstance(action, DeadLetter)
    assert (action.key, action.value, action.offset) == (b"b", misplaced, 0)
    assert "record key b'b' is not its xid 'a'" in action.reason


def test_the_transaction_goes_on_without_the_misplaced_record(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1))
    actions = run.engine.apply(run.offset, b"b", ev.encode_raw(ins("a", 2, 2)))
    run.offset += 1
    run.feed(ins("a", 3, 3), R("a", ev.COMMIT, 4))
    assert [type(a) for a in actions] == [DeadLetter] and run.engine.stats.dead_letters == 1
    assert [c["source"]["seq"] for c in run.changes] == [1, 3]


@pytest.mark.parametrize("key", [None, b"a"], ids=["no key", "its xid"])
def test_a_record_without_a_key_or_keyed_by_its_xid_is_taken(store, key):
    engine = PartitionEngine(0, store)
    assert engine.apply(0, key, ev.encode_raw(ins("a", 1, 1))) == []
    assert engine.stats.dead_letters == 0


def test_a_heartbeat_has_no_xid_to_match(store):
    engine = PartitionEngine(0, store)
    assert engine.apply(0, b"", ev.encode_raw(R("", ev.HEARTBEAT, 0, 40))) == []
    assert engine.stats.dead_letters == 0 and engine.watermark == 40
