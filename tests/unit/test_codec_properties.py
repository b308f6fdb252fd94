"""The compiled codec (processor/core/_avro_fast.pyx) against fastavro, the reference.

What these properties establish, for raw_event, change_event, transaction_event and txn_outcome:
  * encode: for any record, the compiled encoder returns fastavro's bytes, or raises fastavro's
    exception type. Records of exact built-in types are encoded in C; anything else (subclasses,
    tuples, missing fields, out-of-range ints, lone surrogates...) is handed to fastavro whole.
  * decode: for any bytes, the compiled decoder raises DecodeError exactly when
    events.decode (fastavro plus the empty-record and trailing-bytes checks) raises, and otherwise
    returns an equal record (same types; floats compared bit for bit, so NaN payloads and -0.0
    count). It never raises anything else. Checked on fastavro-encoded random records, their
    truncations, bit flips, byte edits, splices, and on random bytes.
  * RawView (decode_raw_batch): a view exactly when events.decode_raw_with_body_offset
    succeeds, with the same record and the same body offset; otherwise a DecodeError in its place.
  * ChangeWriter: the bytes of events.encode_change_spliced (fastavro) for the same change.
The number of random examples per property is CODEC_EXAMPLES (default 300).
"""

from __future__ import annotations

import io
import math
import os
import struct
import subprocess
import sys
from collections import OrderedDict

import fastavro
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from processor.core import codec, keys
from processor.core import events as ev

try:
    FAST = codec._compiled()
except ImportError as exc:  # not built: only a TXBUFFER_CODEC=compiled run insists on it
    if os.environ.get("TXBUFFER_CODEC") == "compiled":
        raise
    pytest.skip(f"compiled codec not built: {exc}", allow_module_level=True)

fast_module = FAST["module"]
SCHEMAS = ("raw_event", "change_event", "transaction_event", "txn_outcome")
EXAMPLES = int(os.environ.get("CODEC_EXAMPLES", "300"))
PROPS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

RAW_OPS = tuple(next(f for f in codec._schema_json("raw_event")["fields"] if f["name"] == "op")["type"]["symbols"])
CHANGE_OPS = tuple(
    next(f for f in codec._schema_json("change_event")["fields"] if f["name"] == "op")["type"]["symbols"]
)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


# ----------------------------------------------------------------------------- the reference


def ref_encode(name: str, record) -> bytes:
    return ev.encode(ev.load_schema(name), record)


def ref_decode(name: str, data: bytes):
    return ev.decode(ev.load_schema(name), data)


def outcome(fn, *args):
    """("ok", value) or ("error", exception type name)."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:
        return ("error", type(exc).__name__)


def same(a, b) -> bool:
    """Equal with equal types at every level; floats bit for bit (NaN, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


# ----------------------------------------------------------------------------- strategies

longs = st.one_of(
    st.sampled_from([0, 1, -1, 63, 64, -64, -65, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, INT64_MAX - 1]),
    st.integers(INT64_MIN, INT64_MAX),
)
ints = st.one_of(st.sampled_from([0, -1, INT32_MAX, INT32_MIN]), st.integers(INT32_MIN, INT32_MAX))
doubles = st.one_of(
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308]),
    st.floats(allow_nan=True, allow_infinity=True),
    # NaNs with other payloads and signs
    st.integers(0, 2**52 - 1).map(lambda m: struct.unpack("<d", struct.pack("<Q", 0xFFF0000000000001 | m))[0]),
)
# Unicode incl. astral-plane characters (hypothesis' text() never yields lone surrogates).
texts = st.one_of(st.text(max_size=24), st.sampled_from(["", "ü", "日本語", "😀𝄞", "\x00", "a\U0010ffff"]))
opt_texts = st.one_of(st.none(), texts)
values = st.one_of(st.none(), st.booleans(), longs, doubles, texts, st.binary(max_size=24))
columns = st.dictionaries(texts, values, max_size=6)
opt_columns = st.one_of(st.none(), st.just({}), columns)
string_maps = st.dictionaries(texts, texts, max_size=4)

raw_records = st.fixed_dictionaries({
    "xid": texts,
    "op": st.sampled_from(RAW_OPS),
    "seq": longs,
    "scn": longs,
    "thread": ints,
    "ts_ms": longs,
    "undo": st.booleans(),
    "row_id": opt_texts,
    "subxid": opt_texts,
    "savepoint": opt_texts,
    "user": opt_texts,
    "client": opt_texts,
    "table": opt_texts,
    "lob_column": opt_texts,
    "lob_offset": st.one_of(st.none(), longs),
    "lob_length": st.one_of(st.none(), longs),
    "lob_data": st.one_of(st.none(), texts, st.binary(max_size=40)),
    "attrs": string_maps,
    "key": opt_columns,
    "before": opt_columns,
    "after": opt_columns,
    "ddl": opt_texts,
})  # fmt: skip

sources = st.fixed_dictionaries({
    "table": opt_texts, "xid": texts, "seq": longs, "scn": longs, "commit_scn": longs, "commit_ts_ms": longs,
    "thread": ints, "user": opt_texts, "row_id": opt_texts, "attrs": string_maps,
})  # fmt: skip
change_records = st.fixed_dictionaries({
    "event_id": texts,
    "op": st.sampled_from(CHANGE_OPS),
    "ts_ms": longs,
    "key": opt_columns,
    "before": opt_columns,
    "after": opt_columns,
    "ddl": opt_texts,
    "source": sources,
    "transaction": st.one_of(
        st.none(),
        st.fixed_dictionaries({"id": texts, "total_order": longs, "data_collection_order": longs}),
    ),
})  # fmt: skip
transaction_records = st.fixed_dictionaries({
    "status": st.sampled_from(["BEGIN", "END", "RESYNC_REQUIRED"]),
    "id": texts,
    "commit_scn": longs,
    "ts_ms": longs,
    "thread": ints,
    "event_count": st.one_of(st.none(), longs),
    "data_collections": st.one_of(
        st.none(),
        st.just([]),
        st.lists(st.fixed_dictionaries({"name": texts, "event_count": longs}), max_size=4),
    ),
    "input_partition": st.one_of(st.none(), ints),
    "commit_offset": st.one_of(st.none(), longs),
    "ordering": opt_texts,
    "reason": opt_texts,
})  # fmt: skip
outcome_records = st.fixed_dictionaries({
    "xid": texts, "input_partition": ints, "offset": longs,
    "outcome": st.sampled_from(["rolled_back", "filtered", "abandoned"]),
})  # fmt: skip

RECORDS = {
    "raw_event": raw_records,
    "change_event": change_records,
    "transaction_event": transaction_records,
    "txn_outcome": outcome_records,
}
named_records = st.sampled_from(SCHEMAS).flatmap(lambda n: st.tuples(st.just(n), RECORDS[n]))


@st.composite
def corrupted(draw):
    """(schema name, bytes): a valid record's encoding, damaged."""
    name, record = draw(named_records)
    data = bytearray(ref_encode(name, record))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "set", "insert", "delete", "append", "other"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "truncate":
            del data[i:]
        elif kind == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0xC0, 0xED, 0xF4, 0xF5]))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=12))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=4))
        else:  # bytes of another record of any schema
            other_name, other = draw(named_records)
            data[i:] = ref_encode(other_name, other)[draw(st.integers(0, 8)) :]
    return name, bytes(data)


# ----------------------------------------------------------------------------- encode


@PROPS
@given(named_records)
def test_encode_is_fastavro_byte_for_byte(named):
    name, record = named
    assert FAST[name].encode(record) == ref_encode(name, record)


@pytest.mark.parametrize("op", RAW_OPS)
@pytest.mark.parametrize(
    "value", [None, True, False, 0, -1, INT64_MIN, INT64_MAX, 0.0, -0.0, math.nan, math.inf, "", "😀", b"", b"\xff"]
)
def test_every_op_symbol_and_value_branch_encodes_as_fastavro(op, value):
    record = ev.raw_event("x", op, 1, 2, table="s.t", key={"k": value}, before={}, after={"ü": value, "n": None})
    data = FAST["raw_event"].encode(record)
    assert data == ev.encode_raw(record)
    assert same(FAST["raw_event"].decode(data), ev.decode_raw(data))


def _with(record: dict, **changes) -> dict:
    out = dict(record)
    out.update(changes)
    return out


class _Str(str):
    pass


class _Int(int):
    pass


BASE_RAW = ev.raw_event("x", "INSERT", 1, 2, table="s.t", key={"id": 1}, after={"id": 1})
BASE_TXN = {"status": "END", "id": "x", "commit_scn": 5, "ts_ms": 6, "thread": 1, "event_count": 2,
            "data_collections": [{"name": "s.t", "event_count": 2}], "input_partition": 0, "commit_offset": 9,
            "ordering": "partition", "reason": None}  # fmt: skip
ODD_RECORDS = [
    ("raw_event", _with(BASE_RAW, seq=True)),  # bool where a long goes
    ("raw_event", _with(BASE_RAW, seq=_Int(5))),
    ("raw_event", _with(BASE_RAW, seq=2**63)),  # out of range
    ("raw_event", _with(BASE_RAW, seq=1.0)),
    ("raw_event", _with(BASE_RAW, thread=2**40)),  # int field beyond int32: fastavro writes it
    ("raw_event", _with(BASE_RAW, xid=_Str("x"))),
    ("raw_event", _with(BASE_RAW, xid="\ud800")),  # lone surrogate
    ("raw_event", _with(BASE_RAW, xid=None)),
    ("raw_event", _with(BASE_RAW, op="NOPE")),
    ("raw_event", _with(BASE_RAW, undo=1)),
    ("raw_event", _with(BASE_RAW, undo=None)),
    ("raw_event", _with(BASE_RAW, attrs=OrderedDict(a="b"))),
    ("raw_event", _with(BASE_RAW, attrs={"a": 1})),
    ("raw_event", _with(BASE_RAW, attrs={1: "a"})),
    ("raw_event", _with(BASE_RAW, key={"id": 2**64})),  # too big for long: fastavro picks double
    ("raw_event", _with(BASE_RAW, key={"id": _Int(3)})),
    ("raw_event", _with(BASE_RAW, key={"id": bytearray(b"ab")})),
    ("raw_event", _with(BASE_RAW, key={"id": ("string", "tagged")})),  # fastavro's tuple notation
    ("raw_event", _with(BASE_RAW, key={"id": [1]})),
    ("raw_event", _with(BASE_RAW, key=OrderedDict(id=1))),
    ("raw_event", _with(BASE_RAW, key=[("id", 1)])),
    ("raw_event", _with(BASE_RAW, lob_data=bytearray(b"x"))),
    ("raw_event", _with(BASE_RAW, lob_offset=True)),
    ("raw_event", _with(BASE_RAW, **{"-type": "txbuffer.RawEvent"})),
    ("raw_event", {k: v for k, v in BASE_RAW.items() if k not in ("attrs", "ddl", "thread")}),  # defaults
    ("raw_event", {k: v for k, v in BASE_RAW.items() if k != "xid"}),
    ("raw_event", OrderedDict(BASE_RAW)),
    ("raw_event", None),
    ("transaction_event", _with(BASE_TXN, data_collections=({"name": "a", "event_count": 1},))),
    ("transaction_event", _with(BASE_TXN, data_collections=[{"name": "a"}])),
    ("transaction_event", _with(BASE_TXN, data_collections=[{"name": "a", "event_count": 1, "-type": "x"}])),
    ("transaction_event", _with(BASE_TXN, input_partition=2**31)),  # beyond the int branch
    ("transaction_event", _with(BASE_TXN, input_partition=True)),
    ("transaction_event", _with(BASE_TXN, event_count=1.5)),
    ("transaction_event", _with(BASE_TXN, status="begin")),
    ("txn_outcome", {"xid": "x", "input_partition": -(2**31) - 1, "offset": 1, "outcome": "filtered"}),
]


@pytest.mark.parametrize("name,record", ODD_RECORDS)
def test_records_outside_the_fast_path_get_fastavros_bytes_or_error(name, record):
    assert outcome(FAST[name].encode, record) == outcome(ref_encode, name, record)


# The emitter's BEGIN/END writer (transaction_bytes): fields in, the bytes of encoding their record.
# Each field may also be of a type or range the writer does not take (a bool, a float, an int past
# its branch, a lone surrogate, an unknown status): those must give fastavro's bytes or its error.
odd = st.sampled_from([True, 1.5, 2**63, -(2**63) - 1, "\ud800", b"x"])
transaction_fields = st.tuples(
    st.sampled_from(["BEGIN", "END"]) | st.sampled_from(["RESYNC_REQUIRED", "begin"]),
    texts | odd,
    longs | odd,
    longs | odd,
    ints | st.sampled_from([INT32_MAX + 1, INT32_MIN - 1]) | odd,
    st.none() | longs | odd,
    st.none() | st.dictionaries(texts, longs, max_size=5) | st.dictionaries(texts | odd, longs | odd, max_size=2),
    st.none() | ints | st.sampled_from([INT32_MAX + 1, INT32_MIN - 1]) | odd,
    st.none() | longs | odd,
    st.none() | st.sampled_from(["partition", "global"]) | texts | odd,
)


@PROPS
@given(transaction_fields)
@example(("END", "x", 1, 2, 1, 3, {"b": 1, "a": 2}, 0, 9, "partition"))
@example(("END", "x", 1, 2, 1, 0, {}, 0, 9, "global"))
@example(("BEGIN", "x", 1, 2, 1, None, None, None, None, None))
def test_transaction_bytes_are_the_encoded_record_byte_for_byte(fields):
    reference = outcome(lambda: ref_encode("transaction_event", ev.transaction_record(*fields)))
    assert outcome(fast_module.transaction_bytes, *fields) == reference


# An END's data_collections: up to 16 tables are sorted by name in C, more by sorted(). Names that
# differ only late, by case, by code points past the BMP, or hold a lone surrogate (fastavro's error).
table_names = st.one_of(
    texts,
    st.text(alphabet="aAbB_.\u00e9\U0001f600", min_size=1, max_size=6),
    st.sampled_from(["orders", "orders_", "Orders", "order", "\ud800x"]),
)


@PROPS
@given(st.dictionaries(table_names, longs | st.sampled_from([True, 2**63]), min_size=2, max_size=20))
@example({f"t{i:02d}": i for i in range(17)})
@example({"b": 1, "a": 2, "\U0001f600": 3, "\uffff": 4, "": 5})
def test_end_data_collections_are_in_name_order_byte_for_byte(tables):
    fields = ("END", "x", 1, 2, 1, sum(t for t in tables.values() if type(t) is int) % 2**62, tables, 0, 9, None)
    reference = outcome(lambda: ref_encode("transaction_event", ev.transaction_record(*fields)))
    assert outcome(fast_module.transaction_bytes, *fields) == reference


# ----------------------------------------------------------------------------- decode


@PROPS
@given(named_records)
def test_decode_of_fastavro_bytes_equals_fastavro_decode(named):
    name, record = named
    data = ref_encode(name, record)
    assert same(FAST[name].decode(data), ref_decode(name, data))


def assert_decoders_agree(name: str, data: bytes) -> None:
    got = outcome(FAST[name].decode, data)
    want = outcome(ref_decode, name, data)
    if got[0] == "error":
        assert got[1] == "DecodeError", got  # never a crash or another exception type
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        assert same(got[1], want[1])
    if name == "raw_event":
        view = FAST["raw_event"].view_batch([data])[0]
        try:
            record, body_at = ev.decode_raw_with_body_offset(data)
        except ev.DecodeError:
            assert type(view) is ev.DecodeError
        else:
            assert type(view) is fast_module.RawView
            assert view.body_at == body_at and view.raw == data
            assert same(view.to_dict(), record)


@PROPS
@given(corrupted())
def test_damaged_records_are_rejected_exactly_when_fastavro_rejects_them(named):
    assert_decoders_agree(*named)


@PROPS
@given(st.sampled_from(SCHEMAS), st.binary(max_size=64))
@example("raw_event", b"")
def test_random_bytes_are_rejected_exactly_when_fastavro_rejects_them(name, data):
    assert_decoders_agree(name, data)


def _long(n: int) -> bytes:
    out = bytearray()
    n = (n << 1) ^ (n >> 63)
    n &= 2**64 - 1
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _str(s: str) -> bytes:
    return _long(len(s.encode())) + s.encode()


RAW_HEAD = _str("x") + _long(1)  # xid, op INSERT


def _raw_tail(**over: bytes) -> bytes:
    """RawEvent bytes after xid and op, with chosen fields' encodings replaced."""
    parts = {
        "seq": _long(1), "scn": _long(2), "thread": _long(1), "ts_ms": _long(0), "undo": b"\x00",
        "row_id": b"\x00", "subxid": b"\x00", "savepoint": b"\x00", "user": b"\x00", "client": b"\x00",
        "table": b"\x02" + _str("s.t"), "lob_column": b"\x00", "lob_offset": b"\x00", "lob_length": b"\x00",
        "lob_data": b"\x00", "attrs": b"\x00", "key": b"\x02" + _long(1) + _str("id") + b"\x04" + _long(1) + b"\x00",
        "before": b"\x00", "after": b"\x00", "ddl": b"\x00",
    }  # fmt: skip
    parts.update(over)
    return b"".join(parts.values())


LENIENT = {
    "varint of 11 bytes (shift wraps like fastavro's)": RAW_HEAD + _raw_tail(seq=b"\x80" * 10 + b"\x7f"),
    "varint of 20 bytes": RAW_HEAD + _raw_tail(scn=b"\x81" * 19 + b"\x01"),
    "10-byte varint with high bits": RAW_HEAD + _raw_tail(seq=b"\xff" * 9 + b"\x7f"),
    "negative enum index": _str("x") + _long(-1) + _raw_tail(),
    "enum index -len(symbols)": _str("x") + _long(-len(RAW_OPS)) + _raw_tail(),
    "enum index -len(symbols)-1": _str("x") + _long(-len(RAW_OPS) - 1) + _raw_tail(),
    "enum index len(symbols)": _str("x") + _long(len(RAW_OPS)) + _raw_tail(),
    "negative union index": RAW_HEAD + _raw_tail(table=_long(-1) + _str("s.t")),
    "union index -2 is null": RAW_HEAD + _raw_tail(table=_long(-2)),
    "union index -3": RAW_HEAD + _raw_tail(table=_long(-3)),
    "lob_data union index -1 is bytes": RAW_HEAD + _raw_tail(lob_data=_long(-1) + _long(2) + b"\xff\x00"),
    "boolean byte 2": RAW_HEAD + _raw_tail(undo=b"\x02"),
    "boolean byte 0xff": RAW_HEAD + _raw_tail(undo=b"\xff"),
    "negative map block count": RAW_HEAD + _raw_tail(attrs=_long(-1) + _long(99) + _str("a") + _str("b") + b"\x00"),
    "map block count -2**63": RAW_HEAD + _raw_tail(attrs=_long(INT64_MIN) + _long(0) + b"\x00"),
    "map block count 2**62": RAW_HEAD + _raw_tail(attrs=_long(2**62) + _str("a") + _str("b") + b"\x00"),
    "duplicate map keys": RAW_HEAD + _raw_tail(attrs=_long(2) + _str("a") + _str("1") + _str("a") + _str("2") + b"\x00"),
    "two map blocks": RAW_HEAD + _raw_tail(attrs=_long(1) + _str("a") + _str("1") + _long(1) + _str("b") + _str("2") + b"\x00"),
    "value map negative block": RAW_HEAD + _raw_tail(key=b"\x02" + _long(-1) + _long(5) + _str("id") + b"\x04\x02\x00"),
    "value union index -1 is bytes": RAW_HEAD + _raw_tail(key=b"\x02\x02" + _str("id") + _long(-1) + b"\x00\x00"),
    "value union index 6": RAW_HEAD + _raw_tail(key=b"\x02\x02" + _str("id") + _long(6) + b"\x00\x00"),
    "negative string length": RAW_HEAD + _raw_tail(table=b"\x02" + _long(-1)),
    "string past the end": RAW_HEAD + _raw_tail(ddl=b"\x02" + _long(50) + b"abc"),
    "surrogate in a string": RAW_HEAD + _raw_tail(table=b"\x02" + _long(3) + b"\xed\xa0\x80"),
    "surrogate in a lazy string": RAW_HEAD + _raw_tail(ddl=b"\x02" + _long(3) + b"\xed\xa0\x80"),
    "overlong UTF-8 in a map key": RAW_HEAD + _raw_tail(after=b"\x02\x02" + _long(2) + b"\xc0\x80" + b"\x00\x00"),
    "code point past U+10FFFF": RAW_HEAD + _raw_tail(after=b"\x02\x02" + _long(4) + b"\xf4\x90\x80\x80" + b"\x00\x00"),
    "surrogate in a row image's string value": RAW_HEAD + _raw_tail(after=b"\x02\x02" + _str("a") + _long(4) + _long(3) + b"\xed\xa0\x80" + b"\x00"),
    "overlong UTF-8 in a row image's string value": RAW_HEAD + _raw_tail(before=b"\x02\x02" + _str("a") + _long(4) + _long(2) + b"\xc0\x80" + b"\x00"),
    "row image value union index 7": RAW_HEAD + _raw_tail(after=b"\x02\x02" + _str("a") + _long(7) + b"\x00"),
    "truncated long in a row image value": RAW_HEAD + _raw_tail(after=b"\x02\x02" + _str("a") + _long(2) + b"\x80"),
    "truncated double": RAW_HEAD + _raw_tail(after=b"\x02\x02" + _str("d") + b"\x06" + b"\x00" * 7),
    "trailing byte": RAW_HEAD + _raw_tail() + b"\x00",
    "valid": RAW_HEAD + _raw_tail(),
}  # fmt: skip


@pytest.mark.parametrize("label", list(LENIENT))
def test_malformed_and_lenient_encodings_decode_as_fastavro_decodes_them(label):
    assert_decoders_agree("raw_event", LENIENT[label])


def test_array_blocks_decode_as_fastavro_decodes_them():
    head = _long(0) + _str("x") + _long(1) + _long(2) + _long(3) + _long(1)
    for collections in (
        _long(1) + _long(-1) + _long(7) + _str("a") + _long(1) + b"\x00",  # negative block count
        _long(1) + _long(INT64_MIN) + _long(0) + b"\x00",
        _long(1) + _long(1) + _str("a") + _long(1) + _long(1) + _str("b") + _long(2) + b"\x00",
        _long(-1) + _long(1) + _str("a") + _long(1) + b"\x00",  # union index -1: the array
    ):
        data = head + _long(1) + collections + b"\x00" * 4
        assert_decoders_agree("transaction_event", data)


@PROPS
@given(st.binary(max_size=16) | st.lists(st.sampled_from([b"\xc2\x80", b"\xe0\xa0\x80", b"\xed\x9f\xbf",
                                                              b"\xed\xa0\x80", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf",
                                                              b"\xf4\x90\x80\x80", b"\xc1\xbf", b"a", b"\x80",
                                                              b"\xe1\x80", b"\xf0\x80\x80\x80"]),
                                            max_size=12).map(b"".join))  # fmt: skip
def test_utf8_validation_matches_pythons_strict_decoder(data):
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert fast_module.utf8_valid_py(data) == valid


# ----------------------------------------------------------------------------- RawView and ChangeWriter


@PROPS
@given(raw_records)
def test_raw_view_fields_equal_fastavro_decode(record):
    data = ev.encode_raw(record)
    want, body_at = ev.decode_raw_with_body_offset(data)
    for view in (FAST["raw_event"].view(data), codec._py_view(data)):
        assert view.raw == data and view.body_at == body_at
        for name in codec.RAW_FIELDS:
            assert same(getattr(view, name), want[name]) and same(view[name], want[name]), name
        assert same(view.to_dict(), want)


def test_decode_raw_batch_keeps_order_and_reports_each_bad_record():
    good = ev.encode_raw(BASE_RAW)
    values = [good, None, b"", good[:-1], good + b"\x00", good]
    for out in (codec.decode_raw_batch(values), FAST["raw_event"].view_batch(values), codec._py_view_batch(values)):
        # FAST's views are the compiled RawView whatever TXBUFFER_CODEC chose (codec.RAW_VIEW_TYPE follows it).
        view_types = (FAST["module"].RawView, codec.PyRawView)
        kinds = ["view" if isinstance(v, view_types) else type(v).__name__ for v in out]
        assert kinds == ["view", "DecodeError", "DecodeError", "DecodeError", "DecodeError", "view"]
        assert "empty record" in str(out[1]) and "trailing bytes" in str(out[4])
        assert out[5].to_dict() == BASE_RAW


change_parts = st.fixed_dictionaries({
    "op": st.sampled_from(sorted(ev.ENVELOPE_OP)),
    "seq": longs, "scn": longs, "ts_ms": longs, "table": opt_texts, "row_id": opt_texts, "attrs": string_maps,
    "total_order": longs, "collection_order": longs,
})  # fmt: skip
txn_parts = st.fixed_dictionaries({
    "xid": texts, "commit_scn": longs, "commit_ts_ms": longs, "thread": st.one_of(ints, longs), "user": opt_texts,
})  # fmt: skip


@PROPS
@given(txn_parts, change_parts, raw_records)
def test_change_writer_equals_fastavro_spliced_encoding(txn, change, record):
    raw = ev.encode_raw(record)
    body_at = ev.decode_raw_with_body_offset(raw)[1]
    got = fast_module.ChangeWriter(**txn).encode(raw=raw, body_at=body_at, **change)
    want = codec.PyChangeWriter(**txn).encode(raw=raw, body_at=body_at, **change)
    assert got == want
    decoded = ev.decode_change(got)
    assert same(decoded["after"], record["after"]) and decoded["source"]["seq"] == change["seq"]


@pytest.mark.parametrize(
    "txn,change",
    [
        ({"thread": True}, {}),
        ({"commit_scn": _Int(3)}, {}),
        ({"xid": "\udc00"}, {}),
        ({}, {"seq": _Int(3)}),
        ({}, {"seq": 2**64}),
        ({}, {"table": _Str("t")}),
        ({}, {"attrs": {"a": None}}),
        ({}, {"total_order": 1.0}),
        ({}, {"op": "COMMIT"}),
    ],
)
def test_change_writer_outside_the_fast_path_gives_fastavros_result(txn, change):
    txn = {"xid": "x", "commit_scn": 5, "commit_ts_ms": 6, "thread": 1, "user": None, **txn}
    change = {"op": "UPDATE", "seq": 1, "scn": 2, "ts_ms": 3, "table": "s.t", "row_id": None, "attrs": {},
              "total_order": 1, "collection_order": 1, **change}  # fmt: skip
    raw = ev.encode_raw(BASE_RAW)
    body_at = ev.decode_raw_with_body_offset(raw)[1]
    got = outcome(lambda: fast_module.ChangeWriter(**txn).encode(raw=raw, body_at=body_at, **change))
    want = outcome(lambda: codec.PyChangeWriter(**txn).encode(raw=raw, body_at=body_at, **change))
    assert got == want


def test_schema_signatures_are_checked_before_the_change_writer_is_armed():
    raw, change = FAST["raw_event"], FAST["change_event"]
    with pytest.raises(NotImplementedError):
        fast_module.enable_change_writer(raw, FAST["transaction_event"], dict(ev.ENVELOPE_OP), ev.encode_change_spliced)
    fast_module.enable_change_writer(raw, change, dict(ev.ENVELOPE_OP), ev.encode_change_spliced)


def test_fastavro_backend_is_forced_by_the_environment():
    script = (
        "from processor.core import codec, events as ev\n"
        "assert codec.BACKEND == 'fastavro', codec.BACKEND\n"
        "raw = ev.encode_raw(ev.raw_event('x', 'INSERT', 1, 2, table='s.t', key={'id': 1}))\n"
        "v, bad = codec.decode_raw_batch([raw, b'\\x01'])\n"
        "assert v.key == {'id': 1} and v['seq'] == 1 and isinstance(bad, codec.DecodeError)\n"
        "w = codec.ChangeWriter('x', 5, 6, 1, None).encode('INSERT', 1, 2, 3, 's.t', None, {}, raw, v.body_at, 1, 1)\n"
        "assert codec.decode_change(w)['key'] == {'id': 1}\n"
        "print(codec.BACKEND)\n"
    )
    env = {**os.environ, "TXBUFFER_CODEC": "fastavro"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("fastavro")


def test_fastavro_itself_is_the_reference_used_here():
    # Guards the premise: events.decode is fastavro's schemaless_reader plus two checks.
    data = ev.encode_raw(BASE_RAW)
    assert ref_decode("raw_event", data) == fastavro.schemaless_reader(io.BytesIO(data), ev.raw_schema(), None)


def test_objects_made_without_init_raise_instead_of_crashing():
    view = fast_module.RawView.__new__(fast_module.RawView)
    assert view.xid is None and view.key is None and view.raw == b""
    bare = fast_module.Codec.__new__(fast_module.Codec)
    with pytest.raises(RuntimeError):
        bare.decode(b"\x00")
    with pytest.raises(RuntimeError):
        bare.encode({})
    writer = fast_module.ChangeWriter.__new__(fast_module.ChangeWriter)
    raw = ev.encode_raw(BASE_RAW)
    with pytest.raises(Exception):  # fastavro's own error for a writer without a transaction
        writer.encode("INSERT", 1, 2, 3, "s.t", None, {}, raw, 0, 1, 1)


# ----------------------------------------------------------------------------- emission helpers

key_maps = st.one_of(st.none(), st.just({}), columns)


@PROPS
@given(opt_texts, key_maps)
@example("s.t", {"a": '\x7f\x1f"\\\n\r\t\b\f/', "b": b"\x00\xff", "c": -0.0, "d": math.nan, "e": -math.inf})
@example(None, {"😀": "𝄞", "ü": 2**63 - 1, "": -(2**63)})
def test_compiled_change_key_equals_the_json_reference(table, key):
    assert fast_module.change_key(table, key) == ev.change_key(table, key)


@pytest.mark.parametrize("key", [{"a": 2**64}, {"a": [1]}, {"a": 1.5, 2: "x"}, {"a": _Str("s")}, {"a": True}])
def test_change_key_outside_the_fast_path_gives_the_references_result(key):
    assert outcome(fast_module.change_key, "s.t", key) == outcome(ev.change_key, "s.t", key)


KEY_UNION = next(f for f in codec._schema_json("raw_event")["fields"] if f["name"] == "key")["type"]


def avro_key(key) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(KEY_UNION), key)
    return buf.getvalue()


@PROPS
@given(opt_texts, opt_columns)
@example("s.t", {"a": '\x7f\x1f"\\\n\r\t\b\f/', "b": b"\x00\xff", "c": True, "d": None, "e": -(2**63)})
@example(None, {"😀": "𝄞", "ü": 2**63 - 1, "": "", "\x00": 0})
def test_the_kafka_key_read_from_the_key_bytes_equals_the_json_reference(table, key):
    # The emitter writes most Kafka keys straight from the buffered bytes; what it defers (a double,
    # more than 16 fields) goes to change_key_c, which the test above holds to the reference.
    got = fast_module.change_key_of_avro_key(table, avro_key(key))
    if got is None:
        assert any(isinstance(v, float) for v in key.values()) or len(key) > 16
    else:
        assert got == ev.change_key(table, key)


def _varint(n: int) -> bytes:
    u, out = (n << 1) ^ (n >> 63), bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    return bytes(out + bytes([u]))


def _entry(name: str, value: int) -> bytes:  # a map entry: name, then the long branch (2) of the value union
    return _varint(len(name.encode())) + name.encode() + _varint(2) + _varint(value)


@pytest.mark.parametrize(
    "data",
    [
        _varint(1) + _varint(2) + _entry("b", 1) + _entry("a", 2) + _varint(0),  # one block, out of order
        _varint(1) + _varint(1) + _entry("b", 1) + _varint(1) + _entry("a", 2) + _varint(0),  # two blocks
        _varint(1) + _varint(-2) + _varint(99) + _entry("b", 1) + _entry("a", 2) + _varint(0),  # sized block
        _varint(1) + _varint(2) + _entry("a", 1) + _entry("a", 2) + _varint(0),  # a duplicate name
        _varint(1) + _varint(17) + b"".join(_entry(f"k{i:02}", i) for i in range(17)) + _varint(0),
        _varint(1) + _varint(0),  # an empty map
        _varint(0),  # null
    ],
)
def test_key_bytes_in_blocks_duplicates_or_many_fields_give_the_decoded_keys_kafka_key(data):
    decoded = fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(KEY_UNION), None)
    got = fast_module.change_key_of_avro_key("s.t", data)
    assert got in (None, ev.change_key("s.t", decoded))
    if decoded and len(decoded) < 2:  # the duplicate ("a" twice): deferred, the dict keeps the last
        assert got is None
    elif decoded is None or len(decoded) <= 16:
        assert got == ev.change_key("s.t", decoded)


@PROPS
@given(txn_parts, raw_records, st.integers(0, 5), st.dictionaries(opt_texts.map(lambda t: t or ""), st.integers(0, 9)))
def test_change_stream_equals_the_python_stream(txn, record, produced, tables):
    raw = ev.encode_raw(record)
    fast = fast_module.ChangeStream(fast_module.ChangeWriter(**txn), produced, dict(tables))
    slow = codec.PyChangeStream(codec.PyChangeWriter(**txn), produced, dict(tables), view=codec._py_view)
    got, want = outcome(fast.next, raw), outcome(slow.next, raw)
    assert got == want
    assert (fast.produced, fast.tables) == (slow.produced, slow.tables)
    if got[0] == "ok" and got[1] is not None:
        kafka_key, value, seq, _table, op = got[1]
        assert kafka_key == ev.change_key(record["table"], record["key"]) and (seq, op) == (record["seq"], record["op"])
        assert ev.decode_change(value)["transaction"]["total_order"] == produced + 1


def test_emission_helpers_made_without_init_raise_instead_of_crashing():
    stream = fast_module.ChangeStream.__new__(fast_module.ChangeStream)
    with pytest.raises(RuntimeError):
        stream.next(ev.encode_raw(BASE_RAW))
    with pytest.raises(RuntimeError):
        stream.number("t")
    with pytest.raises(RuntimeError):
        stream.send_all([(b"k", ev.encode_raw(BASE_RAW))], lambda *_: None, None, None)


@PROPS
@given(txn_parts, st.lists(raw_records, min_size=2, max_size=6), st.lists(opt_texts, min_size=1, max_size=3))
def test_a_change_stream_over_many_events_equals_the_python_stream(txn, records, tables):
    # Several events through one stream, their tables taken from a few (the compiled stream keeps the
    # last table's str): every output, the numbering and the per-table counts equal the Python stream's.
    fast = fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {})
    slow = codec.PyChangeStream(codec.PyChangeWriter(**txn), 0, {}, view=codec._py_view)
    for i, record in enumerate(records):
        raw = ev.encode_raw({**record, "table": tables[i % len(tables)]})
        assert outcome(fast.next, raw) == outcome(slow.next, raw)
    assert (fast.produced, fast.tables) == (slow.produced, slow.tables)


def test_a_change_stream_tells_apart_tables_that_share_a_prefix():
    fast = fast_module.ChangeStream(fast_module.ChangeWriter("x", 5, 6, 1, None), 0, {})
    tables = ["ab", "a", "ab", None, "", "abc", "a"]
    got = [fast.next(ev.encode_raw({**BASE_RAW, "table": t}))[3] for t in tables]
    assert got == [t or "" for t in tables]
    assert fast.tables == {"ab": 2, "a": 2, "": 2, "abc": 1}


def test_a_change_stream_names_tables_right_past_the_table_cache():
    # The compiled stream finds a table's str in a cache of the names seen last (64): more names than
    # that, in rounds, replace entries; each change must still be counted under its own table.
    names = [f"t{i}" for i in range(150)] + ["t0", "t149", "t75"]
    fast = fast_module.ChangeStream(fast_module.ChangeWriter("x", 5, 6, 1, None), 0, {})
    got = [fast.next(ev.encode_raw({**BASE_RAW, "table": t}))[3] for t in names + names]
    assert got == names + names
    assert fast.tables == {t: 2 * names.count(t) for t in names}


class _Engine:
    def __init__(self):
        self.moved = []

    def cursor_moved(self, txn):
        self.moved.append((txn.acked_seq, txn.acked_count, dict(txn.acked_tables)))


@PROPS
@given(st.lists(st.sampled_from(["sent", "all_sent", "end_sent", "settle", "settle_all"]), max_size=12))
def test_the_compiled_emission_settles_as_the_python_one(steps):
    # codec.Emission (compiled) against codec_py.PyEmission: the same emit cursor, the same
    # cursor_moved calls and the same flags after any sequence of sends and settlements.
    from processor.core.codec_py import PyEmission
    from processor.core.txn import Txn

    emissions = []
    for cls in (fast_module.Emission, PyEmission):
        txn = Txn(0, "x", 1)
        stream = fast_module.ChangeStream(fast_module.ChangeWriter("x", 5, 6, 1, None), 0, {})
        emissions.append((cls(_Engine(), txn, stream), txn, stream))
    for step in steps:
        for em, _txn, stream in emissions:
            if step == "sent":  # a change of table "t" sent
                stream.number("t")
                em.last_seq = stream.produced * 10
                em.changes_settled = False
            elif step == "all_sent":
                em.all_sent = True
            elif step == "end_sent":
                em.end_sent = True
            elif step == "settle":
                em.settle()
            else:
                (fast_module.settle_all if isinstance(em, fast_module.Emission) else codec_py_settle_all)([em])
    (fast, ftxn, fstream), (slow, stxn, sstream) = emissions
    assert (ftxn.acked_seq, ftxn.acked_count, ftxn.acked_tables) == (
        stxn.acked_seq,
        stxn.acked_count,
        stxn.acked_tables,
    )
    assert fast.engine.moved == slow.engine.moved
    flags = ("all_sent", "end_sent", "end_acked", "changes_settled", "last_seq")
    assert [getattr(fast, f) for f in flags] == [getattr(slow, f) for f in flags]
    if fast.all_sent and ftxn.acked_count:  # all sent: the final counts are shared, not copied
        assert (ftxn.acked_tables is fstream.tables) == (stxn.acked_tables is sstream.tables)


@PROPS
@given(txn_parts, st.lists(opt_texts, max_size=5), st.sampled_from(["partition", "global", None]))
def test_an_emission_encodes_begin_and_end_as_assemble_does(txn, tables, ordering):
    # BEGIN and END from the compiled Emission, the Python one and assemble.transaction_bytes: the same bytes.
    from processor.core.assemble import transaction_bytes
    from processor.core.codec_py import PyEmission
    from processor.core.txn import Commit, Txn

    t = Txn(3, txn["xid"], 10, user=txn["user"])
    t.commit = Commit(txn["commit_scn"], txn["commit_ts_ms"], txn["thread"], 42)
    stream = fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {})
    for table in tables:
        stream.number(table)
    fast, slow = fast_module.Emission(_Engine(), t, stream), PyEmission(_Engine(), t, stream)
    begin = outcome(transaction_bytes, "BEGIN", t, ordering)
    end = outcome(transaction_bytes, "END", t, ordering, stream.produced, stream.tables)
    assert outcome(fast.transaction_bytes, "BEGIN", ordering) == outcome(slow.transaction_bytes, "BEGIN", ordering)
    assert outcome(fast.transaction_bytes, "BEGIN", ordering) == begin
    assert outcome(fast.transaction_bytes, "END", ordering) == outcome(slow.transaction_bytes, "END", ordering)
    assert outcome(fast.transaction_bytes, "END", ordering) == end


def codec_py_settle_all(emissions):
    from processor.core.codec_py import settle_all

    settle_all(emissions)


class _Refuses:
    """A send that records what it is handed and raises on its nth call (None: never)."""

    def __init__(self, fail_at: int | None):
        self.fail_at, self.calls = fail_at, []

    def __call__(self, key, value, failed):
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise BufferError("queue full")
        self.calls.append((key, value, failed))


@PROPS
@given(
    txn_parts,
    st.lists(raw_records, min_size=1, max_size=6),
    st.sampled_from([None, ev.DELETE]),
    st.one_of(st.none(), st.integers(0, 7)),
)
def test_send_all_equals_the_python_stream_and_never_counts_a_change_it_did_not_send(
    txn, records, tombstone_after, fail_at
):
    # The emitter's per-change loop (ChangeStream.send_all): the same sends as the Python stream, in
    # order (tombstones after DELETEs when asked); when a send raises, sent and last_seq cover only
    # the changes handed over, and the change numbered for the refused send is taken back.
    pairs = [(b"k%d" % i, ev.encode_raw(r)) for i, r in enumerate(records)]
    streams = (
        fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {}),
        codec.PyChangeStream(codec.PyChangeWriter(**txn), 0, {}, view=codec._py_view),
    )
    results = []
    for stream in streams:
        send = _Refuses(fail_at)
        stream.sent, stream.last_seq = 0, -1
        try:
            stream.send_all(pairs, send, "failed", tombstone_after)
            raised = None
        except BufferError as exc:
            raised = str(exc)
        results.append((send.calls, raised, stream.sent, stream.last_seq, stream.produced, dict(stream.tables)))
    assert results[0] == results[1]
    calls, _raised, sent, last_seq, produced, tables = results[0]
    changes = [c for c in calls if c[1] is not None]
    assert sent == produced == len(changes) == sum(tables.values())
    if changes:
        assert last_seq == ev.decode_change(changes[-1][1])["source"]["seq"]
    else:
        assert last_seq == -1
    assert all(failed == "failed" for *_, failed in calls)


@settings(PROPS, max_examples=max(1, EXAMPLES // 3))  # three streams per example: 24 s at 300 in CI
@given(
    txn_parts,
    st.lists(raw_records, min_size=1, max_size=6),
    st.randoms(use_true_random=False),
    st.integers(-1, 7),
    st.sampled_from([None, ev.DELETE]),
    st.one_of(st.none(), st.integers(0, 7)),
)
def test_send_staged_sends_what_send_all_sends_over_staged_range(
    txn, records, rnd, after_seq, tombstone_after, fail_at
):
    # The emitter's path for a transaction that never reached the store (ChangeStream.send_staged):
    # its staged writes read in place, the events after the emit cursor in seq order, other indexes
    # skipped; writes staged out of seq order are declined (False, nothing sent) and go by send_all.
    # Either way: the same sends, counts and cursor as send_all over staged_range's pairs, for the
    # compiled and the Python streams (whose send_staged always declines).
    prefix = keys.txn_prefix(3, "x1")
    seqs = sorted(rnd.sample(range(12), len(records)))
    staged: dict[bytes, object] = {}
    for seq, record in zip(seqs, records, strict=True):
        staged[keys.event_key(prefix, seq)] = ev.encode_raw({**record, "seq": seq})
        if rnd.random() < 0.4:  # the row index the engine stages beside a change
            staged[keys.row_prefix(prefix, f"r{seq}") + keys.seq_bytes(seq)] = b""
    if rnd.random() < 0.3:  # staged out of seq order
        items = list(staged.items())
        rnd.shuffle(items)
        staged = dict(items)
    pairs = fast_module.staged_range(staged, keys.event_key(prefix, after_seq + 1), keys.events_end(prefix))
    event_seqs = [keys.seq_of(key) for key in staged if key.startswith(prefix + keys.EVENT)]
    in_order = event_seqs == sorted(event_seqs)
    runs, took = [], []
    for stream, staged_path in (
        (fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {}), False),
        (fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {}), True),
        (codec.PyChangeStream(codec.PyChangeWriter(**txn), 0, {}, view=codec._py_view), True),
    ):
        send = _Refuses(fail_at)
        stream.sent, stream.last_seq = 0, after_seq
        try:
            if not staged_path:
                stream.send_all(pairs, send, "failed", tombstone_after)
            else:
                took.append(True)  # a send refused inside send_staged raises out of it: taken
                if not stream.send_staged(staged, prefix, after_seq, send, "failed", tombstone_after):
                    took[-1] = False
                    assert send.calls == [] and stream.sent == 0 and stream.produced == 0  # declined untouched
                    stream.send_all(pairs, send, "failed", tombstone_after)
            raised = None
        except BufferError as exc:
            raised = str(exc)
        runs.append((send.calls, raised, stream.sent, stream.last_seq, stream.produced, dict(stream.tables)))
    assert runs[1] == runs[0] and runs[2] == runs[0]
    assert took == [in_order, False]  # the compiled stream takes every in-order transaction in place
    calls, raised, sent, last_seq, _produced, _tables = runs[0]
    sent_seqs = [ev.decode_change(value)["source"]["seq"] for _, value, _ in calls if value is not None]
    assert sent_seqs == sorted(sent_seqs) and all(seq > after_seq for seq in sent_seqs)
    assert last_seq == (sent_seqs[-1] if sent_seqs else after_seq)
    if raised is None:  # every event after the cursor, and only those (fragments are never sent)
        assert set(sent_seqs) <= {seq for seq in seqs if seq > after_seq}
        assert sent == len(sent_seqs)


def test_send_staged_refuses_a_dict_changed_while_it_sends():
    # send runs Python code; the dict it walks in C must not change under it.
    txn = {"xid": "x1", "commit_scn": 5, "commit_ts_ms": 7, "thread": 1, "user": None}
    prefix = keys.txn_prefix(3, "x1")
    staged = {keys.event_key(prefix, seq): ev.encode_raw({**BASE_RAW, "seq": seq}) for seq in (1, 2)}
    stream = fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {})
    stream.sent, stream.last_seq = 0, -1

    def send(key, value, failed):
        staged[keys.event_key(prefix, 9)] = b""

    with pytest.raises(RuntimeError, match="changed during its emission"):
        stream.send_staged(staged, prefix, -1, send, "failed", None)


class _Direct:
    """A sink's direct call (Sink.direct_change_sender): logs what it takes, refuses the calls whose
    number is in `refuse` (as produce() with a full queue) by raising BufferError."""

    def __init__(self, log: list, refuse: set[int]):
        self.log, self.refuse, self.n = log, refuse, 0

    def __call__(self, value, key, a, b):
        assert (a, b) == (-1, "report")
        n, self.n = self.n, self.n + 1
        if n in self.refuse:
            raise BufferError("queue full")
        self.log.append((key, value, "direct"))


@PROPS
@given(
    txn_parts,
    st.lists(raw_records, min_size=1, max_size=6),
    st.sampled_from([None, ev.DELETE]),
    st.sets(st.integers(0, 7), max_size=4),
    st.one_of(st.none(), st.integers(0, 3)),
)
def test_send_all_with_a_direct_call_hands_over_the_same_outputs_and_sends_only_what_it_refuses(
    txn, records, tombstone_after, refuse, send_fails_at
):
    # With the sink's direct call, every output goes to it, and the ones it refuses to send, in order:
    # together the same outputs as send alone. When send then raises too, nothing is counted that
    # neither took. The compiled and the Python streams agree.
    pairs = [(b"k%d" % i, ev.encode_raw(r)) for i, r in enumerate(records)]
    reference = fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {})
    alone = _Refuses(None)
    reference.sent, reference.last_seq = 0, -1
    reference.send_all(pairs, alone, "failed", tombstone_after)
    expected = [(key, value) for key, value, _ in alone.calls]
    results = []
    for stream, c_sender in (
        (fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {}), False),
        (codec.PyChangeStream(codec.PyChangeWriter(**txn), 0, {}, view=codec._py_view), False),
        (fast_module.ChangeStream(fast_module.ChangeWriter(**txn), 0, {}), True),  # a ChangeSender capsule
    ):
        log: list = []
        send = _Refuses(send_fails_at)
        send.calls = log  # one log for both paths, in the order handed over
        stream.sent, stream.last_seq = 0, -1
        direct = fast_module.recording_change_sender(log, refuse) if c_sender else (_Direct(log, refuse), -1, "report")
        try:
            stream.send_all(pairs, send, "failed", tombstone_after, direct)
            raised = None
        except BufferError as exc:
            raised = str(exc)
        results.append((list(log), raised, stream.sent, stream.last_seq, stream.produced, dict(stream.tables)))
    assert results[0] == results[1] == results[2]
    log, raised, sent, _last_seq, produced, tables = results[0]
    assert [(key, value) for key, value, _ in log] == expected[: len(log)]
    assert [how for *_, how in log if how != "direct"] == ["failed"] * sum(1 for *_, how in log if how != "direct")
    changes = [entry for entry in log if entry[1] is not None]
    assert sent == produced == len(changes) == sum(tables.values())
    if raised is None:
        assert len(log) == len(expected) and (produced, tables) == (reference.produced, reference.tables)
    else:
        assert send_fails_at is not None and refuse  # only send raises, and only after a refusal
