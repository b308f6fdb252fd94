"""Codecs of processor/events.py: round trips, prefix reads and the spliced ChangeEvent encoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core import events as ev

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
columns = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    key=columns,
    before=st.one_of(st.none(), columns),
    after=st.one_of(st.none(), columns),
    ddl=st.one_of(st.none(), st.text(max_size=30)),
    attrs=st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
    seq=st.integers(0, 2**40),
    xid=st.text(min_size=1, max_size=12),
)
def test_spliced_change_equals_full_encoding(key, before, after, ddl, attrs, seq, xid):
    raw = ev.encode_raw(
        ev.raw_event(xid, ev.UPDATE, seq, 7, table="s.t", key=key, before=before, after=after, ddl=ddl, attrs=attrs)
    )
    fields, body_at = ev.decode_routing(raw)
    assert fields["xid"] == xid and fields["seq"] == seq and fields["attrs"] == attrs
    assert ev.decode_key_at(raw, body_at) == key
    head = {"event_id": ev.event_id(1, 9, xid, seq), "op": "u", "ts_ms": 3}
    tail = {
        "source": {
            "table": "s.t",
            "xid": xid,
            "seq": seq,
            "scn": 7,
            "commit_scn": 9,
            "commit_ts_ms": 4,
            "thread": 1,
            "user": None,
            "row_id": None,
            "attrs": attrs,
        },
        "transaction": {"id": xid, "total_order": 1, "data_collection_order": 1},
    }
    spliced = ev.encode_change_spliced(head, memoryview(raw)[body_at:], tail)
    full = ev.encode_change({**head, "key": key, "before": before, "after": after, "ddl": ddl, **tail})
    assert spliced == full
    assert ev.decode_change(spliced)["after"] == after


def test_raw_event_round_trip_and_prefix_first():
    event = ev.raw_event("x1", ev.INSERT, 3, 99, table="s.t", key={"id": 1}, after={"id": 1, "b": b"\x00"})
    data = ev.encode_raw(event)
    assert ev.decode_raw(data) == event
    fields, _ = ev.decode_routing(data)
    assert (fields["xid"], fields["op"], fields["seq"], fields["scn"]) == ("x1", "INSERT", 3, 99)


@pytest.mark.parametrize("data", [b"", b"\xff\xff\xff", b"\x02a\x00"])
def test_garbage_raises_decode_error(data):
    with pytest.raises(ev.DecodeError):
        ev.decode_raw(data)


def test_trailing_bytes_are_rejected():
    data = ev.encode_raw(ev.raw_event("x", ev.BEGIN, 0, 1)) + b"\x00"
    with pytest.raises(ev.DecodeError, match="trailing"):
        ev.decode_raw(data)


def test_unknown_raw_event_field_is_a_type_error():
    with pytest.raises(TypeError):
        ev.raw_event("x", ev.BEGIN, 0, 1, bogus=1)


def test_change_key_is_table_plus_sorted_primary_key():
    assert ev.change_key("s.t", {"b": 2, "a": 1}) == b's.t|{"a":1,"b":2}'
    assert ev.event_id(2, 50, "x", 7) == "2:50:x:7"
