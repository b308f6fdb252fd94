"""BEGIN and END records of a committed transaction (processor/core/assemble.py).

transaction_bytes is the emitter's path: it reads the transaction's fields itself and hands them to
the codec. transaction_event builds the same record as a dict for the reference encoder. The two
must give the same bytes for every transaction, in both statuses.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core import events as ev
from processor.core.assemble import transaction_bytes, transaction_event
from processor.core.txn import Commit, Txn

LONGS = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(min_size=0, max_size=12)


@st.composite
def committed_txns(draw) -> Txn:
    txn = Txn(draw(st.integers(0, 2**31 - 1)), draw(st.text(min_size=1, max_size=20)), draw(st.integers(0, 2**40)))
    txn.commit = Commit(draw(LONGS), draw(LONGS), draw(st.integers(-(2**31), 2**31 - 1)), draw(st.integers(0, 2**62)))
    return txn


@settings(max_examples=300, deadline=None)
@given(
    committed_txns(),
    st.sampled_from(["partition", "global"]),
    st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    st.one_of(st.none(), st.dictionaries(NAMES, st.integers(0, 2**31 - 1), max_size=4)),
)
def test_transaction_bytes_equal_the_reference_encoding_of_transaction_event(txn, ordering, count, tables):
    for status in ("BEGIN", "END"):
        expected = ev.encode_transaction(transaction_event(status, txn, ordering, count, tables))
        assert transaction_bytes(status, txn, ordering, count, tables) == expected


def test_a_transaction_without_its_commit_has_no_begin_or_end():
    txn = Txn(0, "x1", 5)
    for status in ("BEGIN", "END"):
        with pytest.raises(ValueError, match="has no commit"):
            transaction_bytes(status, txn, "partition", 0, {})
