"""The decoder fuzzed with hypothesis: mutated and random bytes on every RawEvent decode path.

* events.decode_raw / decode_raw_with_body_offset / decode_routing and codec.decode_raw_batch
  (the compiled codec when built, else fastavro) raise nothing but DecodeError, and agree on
  which bytes are a RawEvent;
* the engine, fed a valid stream with mutated records spliced in, never raises, dead-letters
  exactly the records the reference model rejects, and emits exactly the reference's changes.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.core import codec
from processor.core import events as ev
from processor.store.memory import MemoryStore
from processor.testing.generator import WorkloadGenerator
from processor.testing.reference import ReferenceModel
from tests.enginekit import R, ins, new_run

EXAMPLES = int(os.environ.get("DECODER_FUZZ_EXAMPLES", "100"))
PROPS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A valid stream to mutate: interleaved transactions with savepoints, LOBs, undo rows and rollbacks.
STREAM = [e for e in WorkloadGenerator(250, seed=3, open_txns=6) if e["op"] != ev.HEARTBEAT]
ENCODED = [ev.encode_raw(e) for e in STREAM]


@st.composite
def mutated(draw, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "overwrite", "splice", "random"]))
    b = bytearray(data)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del b[draw(st.integers(0, len(b) - 1)) :]
    elif kind == "insert":
        i = draw(st.integers(0, len(b)))
        b[i:i] = draw(st.binary(min_size=1, max_size=8))
    elif kind == "overwrite":
        i = draw(st.integers(0, len(b) - 1))
        b[i] = draw(st.integers(0, 255))
    elif kind == "splice":
        other = ENCODED[draw(st.integers(0, len(ENCODED) - 1))]
        b = b[: draw(st.integers(0, len(b)))] + other[draw(st.integers(0, len(other))) :]
    else:
        b = bytearray(draw(st.binary(max_size=200)))
    return bytes(b)


def any_raw() -> st.SearchStrategy[bytes]:
    return st.integers(0, len(ENCODED) - 1).flatmap(lambda i: mutated(ENCODED[i]))


def _outcome(fn, data: bytes):
    try:
        return fn(data)
    except ev.DecodeError:
        return ev.DecodeError


@PROPS
@given(any_raw())
def test_every_decode_path_raises_only_decode_error_and_they_agree(data):
    whole = _outcome(ev.decode_raw, data)
    with_offset = _outcome(ev.decode_raw_with_body_offset, data)
    (view,) = codec.decode_raw_batch([data])
    _outcome(ev.decode_routing, data)  # a prefix decode: only DecodeError, whatever the bytes
    assert (whole is ev.DecodeError) == (with_offset is ev.DecodeError)
    assert isinstance(view, ev.DecodeError) == (whole is ev.DecodeError), (codec.BACKEND, data)
    if whole is not ev.DecodeError:
        record, body_at = with_offset
        assert record == whole
        assert view.body_at == body_at and view.to_dict() == whole
        assert ev.decode_key_at(data, body_at) == whole["key"]


@PROPS
@given(st.lists(st.tuples(st.integers(0, len(ENCODED)), any_raw()), min_size=1, max_size=12))
def test_engine_never_crashes_and_agrees_with_the_reference_on_mutated_streams(insertions):
    records = list(ENCODED)
    for at, bad in sorted(insertions, key=lambda x: -x[0]):
        records.insert(at, bad)
    run = new_run(MemoryStore())
    run.feed(*records)  # raises on any crash, in apply, commit or emission
    model = ReferenceModel()
    for offset, value in enumerate(records):
        model.feed(0, offset, value)
    assert sorted(d.offset for d in run.dead) == sorted(o for _, o, _ in model.dlq), [(o, r) for _, o, r in model.dlq]
    expected = [c for t in model.committed.get(0, []) for c in t.changes]
    assert sorted(run.changes, key=lambda c: c["event_id"]) == sorted(expected, key=lambda c: c["event_id"])


def test_change_reusing_a_fragments_seq_replaces_the_fragment():
    feed = [
        R("x", ev.BEGIN, 0),
        ins("x", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        R("x", ev.LONG_STRING_WRITE, 2, row_id="r7", table="s.t", key={"id": 7}, lob_column="body", lob_data="cd"),
        ins("x", 2, 8),  # the same seq again: the later event replaces the earlier (docs/semantics.md)
        R("x", ev.COMMIT, 3),
    ]
    run = new_run(MemoryStore())
    run.feed(*feed)
    model = ReferenceModel()
    for offset, event in enumerate(feed):
        model.feed(0, offset, event)
    expected = [c for t in model.committed[0] for c in t.changes]
    assert sorted(run.changes, key=lambda c: c["event_id"]) == sorted(expected, key=lambda c: c["event_id"])


def test_fragment_flagged_undo_without_column_is_dead_lettered_like_the_reference():
    # An undo flag only means something on a change; on a fragment the fragment's own checks apply.
    feed = [
        R("y", ev.BEGIN, 0),
        ins("y", 1, 7, after={"id": 7, "body": "ab"}, row_id="r7"),
        R("y", ev.LOB_WRITE, 2, row_id="r7", undo=True, lob_data="cd"),
        R("y", ev.COMMIT, 3),
    ]
    run = new_run(MemoryStore())
    run.feed(*feed)
    assert [d.offset for d in run.dead] == [2]
    assert [c["after"] for c in run.changes] == [{"id": 7, "body": "ab"}]
