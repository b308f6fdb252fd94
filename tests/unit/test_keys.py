"""The state store's key layout (processor/core/keys.py): the per-transaction keys made in one pack
each are the documented layout, and a transaction's event range ends where upper_bound says."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from processor.core import keys

partitions = st.integers(0, 2**32 - 1)
xids = st.text(max_size=40)


@given(partitions, xids)
def test_txn_prefix_is_kind_partition_length_and_xid(partition, xid):
    raw = xid.encode()
    assert (
        keys.txn_prefix(partition, xid) == keys.TXN + struct.pack(">I", partition) + struct.pack(">H", len(raw)) + raw
    )


@given(partitions, xids)
def test_the_meta_key_from_a_transactions_prefix_is_its_meta_key(partition, xid):
    raw = xid.encode()
    layout = keys.META + struct.pack(">I", partition) + struct.pack(">H", len(raw)) + raw
    assert keys.meta_key_of(keys.txn_prefix(partition, xid)) == keys.meta_key(partition, xid) == layout


@given(partitions, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_fifo_batch_keys_are_kind_partition_and_batch_in_the_order_written(partition, batch, other):
    key = keys.fifo_batch_key(partition, batch)
    assert key == keys.FIFO + struct.pack(">I", partition) + struct.pack(">Q", batch)
    assert keys.fifo_batch_of(key) == batch
    assert (key < keys.fifo_batch_key(partition, other)) == (batch < other)
    assert key.startswith(keys.partition_prefix(keys.FIFO, partition))


@given(
    st.lists(
        st.tuples(st.integers(0, 2**64 - 1), xids, st.sampled_from(["committed", "rolled_back", "é"])), min_size=1
    ),
    st.integers(0, 2**64 - 1),
)
def test_a_fifo_batch_decodes_back_to_its_entries_in_order(entries, batch):
    entries = [(offset, xid, batch, outcome) for offset, xid, outcome in entries]
    assert keys.fifo_batch_entries(keys.fifo_batch_value(entries), batch) == entries


@given(partitions, xids, st.integers(0, 2**64 - 1))
def test_events_end_bounds_every_event_key_and_no_index_key_of_the_transaction(partition, xid, seq):
    prefix = keys.txn_prefix(partition, xid)
    end = keys.events_end(prefix)
    assert end == keys.upper_bound(prefix + keys.EVENT)
    assert keys.event_key(prefix, seq) < end
    assert keys.row_prefix(prefix, "r") >= end and keys.subxid_prefix(prefix, "s") >= end
