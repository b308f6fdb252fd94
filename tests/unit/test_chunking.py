"""The chunk format and its reassembly rule (processor/kafka/chunking.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from processor.kafka.chunking import (
    CHUNK,
    CHUNK_OF,
    ChunkError,
    Reassembler,
    chunk_headers,
    chunk_of,
    headers_size,
    reassembled,
    split,
)


def _chunks(value: bytes, payload: int, ident: str, partition: int = 0) -> list[tuple[int, list, bytes]]:
    pieces = split(value, payload)
    return [(partition, chunk_headers(i, len(pieces), ident), p) for i, p in enumerate(pieces)]


@given(st.binary(max_size=5000), st.integers(min_value=1, max_value=700))
def test_split_then_concatenate_gives_the_value_back(value, payload):
    pieces = split(value, payload)
    assert b"".join(pieces) == value
    assert all(len(p) <= payload for p in pieces)
    assert len(pieces) == max(1, -(-len(value) // payload))


def test_headers_say_which_chunk_of_which_change():
    headers = chunk_headers(2, 5, "1:99:t1:3")
    assert headers == [(CHUNK, b"2/5"), (CHUNK_OF, b"1:99:t1:3")]
    assert chunk_of(headers) == (2, 5, "1:99:t1:3")
    assert chunk_of([("other", b"x")]) is None and chunk_of(None) is None
    assert headers_size(5, "1:99:t1:3") == sum(len(k) + len(v) for k, v in headers)


@pytest.mark.parametrize(
    "headers", [[(CHUNK, b"5/5"), (CHUNK_OF, b"e")], [(CHUNK, b"x/2"), (CHUNK_OF, b"e")], [(CHUNK, b"0/2")]]
)
def test_malformed_chunk_headers_are_refused(headers):
    with pytest.raises(ChunkError):
        chunk_of(headers)


def test_interleaved_chunk_sets_and_whole_records_reassemble_each_on_its_own():
    a, b = b"A" * 250, b"B" * 120
    ca, cb = _chunks(a, 100, "ea"), _chunks(b, 100, "eb")
    feed = [ca[0], (0, None, b"whole"), cb[0], ca[1], cb[1], ca[2]]
    r = Reassembler()
    out = [r.add(p, h, v) for p, h, v in feed]
    assert [v for done, v in out if done] == [b"whole", b, a]
    assert r.incomplete == 0 and r.dropped == 0


def test_an_interrupted_set_is_dropped_and_the_rewritten_one_kept():
    """A crash after two chunks: the change is written whole again (at least once)."""
    value = bytes(range(256)) * 3
    chunks = _chunks(value, 200, "e1")
    r = Reassembler()
    feed = chunks[:2] + chunks
    results = [r.add(p, h, v) for p, h, v in feed]
    assert [v for done, v in results if done] == [value]
    assert r.dropped == 1


def test_a_gap_or_a_foreign_count_never_completes():
    chunks = _chunks(b"x" * 300, 100, "e1")
    r = Reassembler()
    assert not r.add(*chunks[0])[0]
    assert not r.add(*chunks[2])[0]  # chunk 1 is missing: the set is dropped
    assert not r.add(*chunks[1])[0]  # and a late chunk 1 does not revive it
    assert r.incomplete == 0
    other = _chunks(b"y" * 400, 100, "e1")
    assert not r.add(*chunks[0])[0]
    assert not r.add(*other[1])[0]  # 1/4 after 0/3: not the same write


def test_the_same_change_on_two_partitions_is_two_sets():
    value = b"z" * 150
    p0, p1 = _chunks(value, 100, "e", 0), _chunks(value, 100, "e", 1)
    r = Reassembler()
    results = [r.add(*c) for c in (p0[0], p1[0], p1[1], p0[1])]
    assert [v for done, v in results if done] == [value, value]


def test_reassembled_messages_keep_the_last_chunks_position_and_the_other_headers():
    value = b"v" * 230
    msgs = [
        Message(topic="t", partition=3, offset=10 + i, key=b"k", value=v, headers=h + [("x", b"1")], timestamp=(1, i))
        for i, (_, h, v) in enumerate(_chunks(value, 100, "e"))
    ]
    msgs.insert(1, Message(topic="t", partition=3, offset=99, key=b"o", value=b"other"))
    out = list(reassembled(msgs))
    assert [m.value() for m in out] == [b"other", value]
    last = out[1]
    assert (last.topic(), last.partition(), last.offset(), last.key()) == ("t", 3, 12, b"k")
    assert last.headers() == [("x", b"1")] and last.timestamp() == (1, 2)
