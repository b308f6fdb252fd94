"""PartitionEngine.apply_records (the compiled lane for plain changes, apply() for the rest) does
exactly what apply() does record by record: the same actions, store contents and engine state."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.core import codec, keys
from processor.core import events as ev
from processor.core.engine import Filters, PartitionEngine
from processor.core.txn import ROLLED_BACK, Txn

try:  # the native fetch's run of records (built with the codec by `make setup`)
    from processor.kafka._rdkafka_fetch import RecordRun  # type: ignore[import-not-found]
except ImportError:
    RecordRun = None
from processor.store.memory import MemoryStore
from tests.enginekit import Record
from tests.unit.test_codec_properties import raw_records
from tests.unit.test_engine_properties import op_sequences

pytestmark = pytest.mark.skipif(codec.BACKEND != "compiled", reason="the lane is compiled")


def state_of(engine: PartitionEngine, store: MemoryStore) -> tuple:
    engine.checkpoint()
    return (
        list(store.scan(b"", b"\xff")),
        engine.next_offset,
        engine.watermark,
        engine.last_ts_ms,
        repr(engine.stats),
        {x: t.to_bytes() for x, t in engine.open.items()},
        {x: t.to_bytes() for x, t in engine.pending.items()},
        engine.completed,
    )


def by_record(records: list[Record], filters: Filters) -> tuple:
    store = MemoryStore()
    engine = PartitionEngine(0, store, filters)
    actions = []
    for r in records:
        if r.offset() >= engine.next_offset:
            actions.extend(engine.apply(r.offset(), r.key(), r.value()))
    return [repr(a) for a in actions], state_of(engine, store)


def by_runs(records: list[Record], filters: Filters, cuts: list[int], native: bool = False) -> tuple:
    """apply_records over the records cut into runs: lists of records, or (native) the native
    fetch's RecordRuns, which the lane reads in place."""
    store = MemoryStore()
    engine = PartitionEngine(0, store, filters)
    actions = []
    start = 0
    for cut in sorted(cuts) + [len(records)]:
        run = records[start:cut]
        if native:
            run = RecordRun.of(0, [(r.offset(), r.key(), r.value()) for r in run])
        actions.extend(engine.apply_records(run))
        start = cut
    return [repr(a) for a in actions], state_of(engine, store)


FILTERS = [
    Filters(),
    Filters(exclude_users=frozenset({"batch"})),
    Filters(include_users=frozenset({"app"})),
    Filters(exclude_tables=frozenset({"s.u"})),
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=op_sequences(),
    filters=st.sampled_from(FILTERS),
    cuts=st.lists(st.integers(0, 80), max_size=4),
    extras=st.lists(
        st.sampled_from(
            [
                "dup",
                "garbage",
                "none",
                "other_table",
                "no_key",
                "user",
                "misplaced",
                "trailing",
                "truncated",
                "bad_utf8",
                "null_table",
            ]
        ),
        max_size=6,
    ),
    positions=st.lists(st.integers(0, 80), max_size=6),
)
def test_apply_records_equals_apply_record_by_record(events, filters, cuts, extras, positions):
    records = [Record(i, e["xid"].encode(), ev.encode_raw(e)) for i, e in enumerate(events)]
    # Records the lane must hand back: undecodable (garbage, a byte too many or too few, a table name
    # that is not UTF-8), empty, a key-less or table-less change, a first identity, another table, a
    # change keyed by another XID, and re-deliveries of offsets already applied.
    for extra, at in zip(extras, positions):
        at = min(at, len(records))
        template = next((e for e in events[at:] if e["op"] in ev.ROW_OPS), None)
        if extra == "dup" and at:
            records.insert(at, records[at - 1])
            continue
        if extra == "garbage":
            value = b"\x07\xff"
        elif extra == "none":
            value = None
        elif template is None:
            continue
        elif extra == "other_table":
            value = ev.encode_raw({**template, "table": "s.u", "seq": template["seq"] + 1000})
        elif extra == "no_key":
            value = ev.encode_raw({**template, "key": {}, "seq": template["seq"] + 2000})
        elif extra == "trailing":  # a whole RawEvent and one byte more
            value = ev.encode_raw({**template, "seq": template["seq"] + 5000}) + b"\x00"
        elif extra == "truncated":
            value = ev.encode_raw({**template, "seq": template["seq"] + 6000})[:-1]
        elif extra == "bad_utf8":  # the table name's first byte is not UTF-8
            value = ev.encode_raw({**template, "table": "s.t", "seq": template["seq"] + 7000})
            value = value.replace(b"\x06s.t", b"\x06\xff.t", 1)
        elif extra == "null_table":
            value = ev.encode_raw({**template, "table": None, "seq": template["seq"] + 8000})
        elif extra == "misplaced":
            value = ev.encode_raw({**template, "seq": template["seq"] + 4000})
            records.insert(at, Record(0, b"elsewhere", value))
            continue
        else:
            value = ev.encode_raw({**template, "user": "batch", "seq": template["seq"] + 3000})
        records.insert(at, Record(0, template["xid"].encode() if template else b"a", value))
    # Offsets ascend, except the re-deliveries.
    renumbered, offset = [], 0
    for i, r in enumerate(records):
        if i and r is records[i - 1]:
            renumbered.append(Record(offset - 1, r.key(), r.value()))
        else:
            renumbered.append(Record(offset, r.key(), r.value()))
            offset += 1
    expected = by_record(renumbered, filters)
    assert by_runs(renumbered, filters, cuts) == expected
    if RecordRun is not None:
        assert by_runs(renumbered, filters, cuts, native=True) == expected


@pytest.fixture(params=["slots", "attributes"])
def txn_access(request):
    """The lane reaches Txn's attributes through their slots (codec.enable_txn_slots), or, for a
    class that does not have them all as slots, by plain attribute access."""
    module = codec._compiled()["module"]
    if request.param == "attributes":
        assert module.enable_txn_slots(type("NoSlots", (), {})) is False
    try:
        yield request.param
    finally:
        assert module.enable_txn_slots(Txn) is True


def test_plain_changes_take_the_lane_and_land_as_their_raw_bytes(txn_access):
    store = MemoryStore()
    engine = PartitionEngine(0, store)
    begin = ev.raw_event("x", ev.BEGIN, 0, 1, user="app")
    first = ev.raw_event("x", ev.INSERT, 1, 2, table="s.t", key={"id": 1}, user="app", row_id="r1", subxid="s")
    second = ev.raw_event("x", ev.UPDATE, 2, 3, table="s.t", key={"id": 1}, user="app", ts_ms=99)
    values = [ev.encode_raw(e) for e in (begin, first, second)]
    engine.apply_records([Record(0, b"x", values[0]), Record(1, b"x", values[1])])  # BEGIN, first identity: apply()
    i = codec.buffer_changes(engine, [Record(2, b"x", values[2])], 0, engine.open, engine.batch.put, [])
    assert i == 1  # taken by the lane
    engine.checkpoint(spill_all=True)  # the transaction is staged: its writes reach the store when spilled
    prefix = engine.open["x"].prefix
    assert store.get(prefix + b"\x00" + (2).to_bytes(8, "big")) == values[2]
    assert store.get(prefix + b"\x01" + b"\x00\x02r1" + (1).to_bytes(8, "big")) == b""
    assert store.get(prefix + b"\x03" + b"\x00\x01s" + (1).to_bytes(8, "big")) == b""
    assert engine.next_offset == 3 and engine.last_ts_ms == 99 and engine.open["x"].events == 2


@pytest.fixture(params=["list", "native"])
def native(request):
    """apply_records over a list of records, or over the native fetch's RecordRun (read in place)."""
    if request.param == "native" and RecordRun is None:
        pytest.skip("the native fetch is not built")
    return request.param == "native"


@pytest.mark.parametrize(
    "bad",
    ["garbage", "trailing", "truncated", "bad_utf8", "null_table", "no_key", "empty_xid", "misplaced", "wide_thread"],
)
def test_the_lane_hands_back_every_record_apply_dead_letters(bad, txn_access, native):
    """Amid plain changes of an open transaction the lane would take, a bad one goes to apply(): one
    dead letter at its offset, and the same state as record by record."""
    change = ev.raw_event("x", ev.INSERT, 2, 2, table="s.t", key={"id": 1}, row_id="r1")
    value, key = ev.encode_raw({**change, "seq": 3}), b"x"
    if bad == "garbage":
        value = b"\x07\xff"
    elif bad == "trailing":
        value += b"\x00"
    elif bad == "truncated":
        value = value[:-1]
    elif bad == "bad_utf8":
        assert value.count(b"\x06s.t") == 1
        value = value.replace(b"\x06s.t", b"\x06\xff.t")
    elif bad == "null_table":
        value = ev.encode_raw({**change, "seq": 3, "table": None})
    elif bad == "no_key":
        value = ev.encode_raw({**change, "seq": 3, "key": {}})
    elif bad == "empty_xid":
        value, key = ev.encode_raw({**change, "seq": 3, "xid": ""}), None
    elif bad == "wide_thread":  # thread is an Avro int: a wider varint decodes, but is refused
        value = ev.encode_raw({**change, "seq": 3, "thread": 2**35})
    else:
        key = b"elsewhere"
    records = [
        Record(0, b"x", ev.encode_raw(ev.raw_event("x", ev.BEGIN, 0, 0))),
        Record(1, b"x", ev.encode_raw({**change, "seq": 1})),
        Record(2, b"x", ev.encode_raw(change)),
        Record(3, key, value),
        Record(4, b"x", ev.encode_raw({**change, "seq": 4})),
    ]
    actions, state = by_runs(records, Filters(), [], native)
    assert (actions, state) == by_record(records, Filters())
    assert len(actions) == 1 and actions[0].startswith("DeadLetter(partition=0, offset=3,"), actions


@pytest.mark.parametrize("filters", FILTERS[:3])
def test_begin_and_commit_take_the_lane_as_apply_takes_them(filters, txn_access, native):
    """BEGIN of a new transaction and COMMIT of an open one, also when the identity first arrives
    with the COMMIT (then a user filter can still drop the transaction), a BEGIN that restarts an
    open transaction and a late BEGIN of a finished one."""
    change = ev.raw_event("x", ev.INSERT, 1, 1, table="s.t", key={"id": 1})
    events_ = [
        ev.raw_event("x", ev.BEGIN, 0, 0),
        change,
        ev.raw_event("y", ev.BEGIN, 0, 0, user="app"),
        {**change, "xid": "y"},
        ev.raw_event("x", ev.COMMIT, 2, 5, user="batch"),
        ev.raw_event("y", ev.BEGIN, 0, 0, user="app"),  # restarts y
        {**change, "xid": "y", "seq": 2},
        ev.raw_event("y", ev.COMMIT, 3, 6, ts_ms=77, thread=2),
        ev.raw_event("x", ev.BEGIN, 0, 0),  # late: x is finished
    ]
    records = [Record(i, e["xid"].encode(), ev.encode_raw(e)) for i, e in enumerate(events_)]
    assert by_runs(records, filters, [], native) == by_record(records, filters)


@pytest.mark.parametrize("filters", FILTERS[:3])
def test_rollback_takes_the_lane_as_apply_takes_it(filters, txn_access, native):
    """ROLLBACK of an open transaction (also a filtered one, and one whose identity came with its
    BEGIN); a ROLLBACK that brings the identity first, of a transaction never seen, or of a finished
    one goes to apply(). Either way, the same actions and state as record by record."""
    change = ev.raw_event("z", ev.INSERT, 1, 1, table="s.t", key={"id": 1}, row_id="r1")
    events_ = [
        ev.raw_event("z", ev.BEGIN, 0, 0),
        change,
        {**change, "seq": 2},
        ev.raw_event("v", ev.BEGIN, 0, 0, user="app"),
        {**change, "xid": "v"},
        ev.raw_event("z", ev.ROLLBACK, 3, 9, ts_ms=55),
        ev.raw_event("u", ev.BEGIN, 0, 0),
        ev.raw_event("v", ev.ROLLBACK, 2, 4, user="app"),
        {**change, "xid": "u"},
        ev.raw_event("u", ev.ROLLBACK, 2, 12, user="batch"),  # the identity first: apply()
        ev.raw_event("w", ev.ROLLBACK, 1, 13),  # never seen: apply()
        ev.raw_event("z", ev.ROLLBACK, 3, 9),  # late: z is finished
    ]
    records = [Record(i, e["xid"].encode(), ev.encode_raw(e)) for i, e in enumerate(events_)]
    assert by_runs(records, filters, [], native) == by_record(records, filters)


def test_the_lane_takes_a_rollback_of_an_open_transaction(txn_access):
    engine = PartitionEngine(0, MemoryStore(), Filters())
    events_ = [
        ev.raw_event("z", ev.BEGIN, 0, 0),
        ev.raw_event("z", ev.INSERT, 1, 1, table="s.t", key={"id": 1}),
        ev.raw_event("z", ev.ROLLBACK, 2, 9, ts_ms=55),
    ]
    records = [Record(i, b"z", ev.encode_raw(e)) for i, e in enumerate(events_)]
    actions: list = []
    assert codec.buffer_changes(engine, records, 0, engine.open, engine.batch.put, actions) == 3  # all taken
    assert [(a.xid, a.offset, a.outcome) for a in actions] == [("z", 2, ROLLED_BACK)]
    assert "z" not in engine.open and engine.completed["z"] == (2, ROLLED_BACK)
    assert engine.watermark == 9 and engine.last_ts_ms == 55 and engine.stats.rolled_back == 1


def _mutations(data: bytes, draw) -> bytes:
    """data cut short, a byte changed, a byte inserted or bytes appended (hypothesis draws which)."""
    kind = draw(st.sampled_from(["cut", "change", "insert", "append", "none"]))
    if kind == "none" or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    byte = bytes([draw(st.integers(0, 255))])
    if kind == "cut":
        return data[:at]
    if kind == "change":
        return data[:at] + byte + data[at + 1 :]
    if kind == "insert":
        return data[:at] + byte + data[at:]
    return data + byte


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=raw_records, data=st.data(), whole=st.booleans())
def test_the_straight_line_scan_reads_and_refuses_as_the_schema_walk(record, data, whole):
    """scan_fields' straight-line path for the project's RawEvent layout and its walk of the schema
    tree: on any bytes, the same fields, the same end, or the same error."""
    value = _mutations(ev.encode_raw(record), data.draw)
    layout, tree = codec._compiled()["module"].scan_both_ways(value, whole)
    assert layout == tree


def test_the_straight_line_scan_reads_maps_written_in_blocks():
    """A row image in two blocks, the first with a negative count and its byte size (Avro allows
    it; fastavro never writes it): both paths read it whole and agree."""
    record = {**ev.raw_event("x", ev.INSERT, 1, 2, table="s.t", key={"id": 1}), "after": None, "ddl": None}
    head = ev.encode_raw(record)
    assert head.endswith(b"\x00\x00")  # after: null, ddl: null
    entry_a, entry_b = b"\x02a\x04\x0a", b"\x02b\x04\x0a"  # "a": 5, "b": 5 (the union's long branch is 2)
    after = b"\x02" + b"\x01\x08" + entry_a + b"\x02" + entry_b + b"\x00"
    value = head[:-2] + after + b"\x00"
    assert ev.decode_raw(value)["after"] == {"a": 5, "b": 5}
    ends = []
    for whole in (True, False):
        layout, tree = codec._compiled()["module"].scan_both_ways(value, whole)
        assert layout == tree and layout[0] == "ok"
        ends.append(layout[1])
    assert ends[0] == len(value) and ends[1] == value.index(b"\x02\x02\x04id")  # whole; up to key


@pytest.mark.parametrize("partition", [0, 7, 300, 2**31 + 5])
def test_a_transaction_opened_by_the_lane_has_the_prefix_keys_gives(partition):
    # The lane builds the transaction's key prefix in C (keys.txn_prefix's layout): the same bytes for
    # any partition and XID, so its keys land where the Python path puts them.
    engine = PartitionEngine(partition, MemoryStore())
    xids = ["x", "é-ü", "a" * 300]
    records = [Record(i, x.encode(), ev.encode_raw(ev.raw_event(x, ev.BEGIN, 0, 1))) for i, x in enumerate(xids)]
    assert codec.buffer_changes(engine, records, 0, engine.open, engine.batch.put, []) == len(xids)  # all in C
    assert {x: t.prefix for x, t in engine.open.items()} == {x: keys.txn_prefix(partition, x) for x in xids}


def test_the_lane_names_each_transaction_right_past_its_xid_cache():
    # The lane finds each record's XID str in a table of 4,096 recent ones: 10,000 transactions (slots
    # replaced many times, colliding XIDs among them), then a change and a COMMIT of each of the first
    # hundred, whose entries are long gone: every transaction under its own XID.
    engine = PartitionEngine(0, MemoryStore())
    xids = [f"x{i}" for i in range(10_000)] + ["é", "ü" * 40]
    records = [Record(i, x.encode(), ev.encode_raw(ev.raw_event(x, ev.BEGIN, 0, 1))) for i, x in enumerate(xids)]
    assert codec.buffer_changes(engine, records, 0, engine.open, engine.batch.put, []) == len(records)
    assert list(engine.open) == xids
    later, n = [], len(records)
    for x in xids[:100]:
        change = ev.raw_event(x, ev.INSERT, 1, 2, table="s.t", key={"id": 1})
        later.append(Record(n + len(later), x.encode(), ev.encode_raw(change)))
        later.append(Record(n + len(later), x.encode(), ev.encode_raw(ev.raw_event(x, ev.COMMIT, 2, 3))))
    actions: list = []
    assert codec.buffer_changes(engine, later, 0, engine.open, engine.batch.put, actions) == len(later)
    assert [a.txn.xid for a in actions] == xids[:100]
    assert all(a.txn.events == 1 for a in actions) and list(engine.open) == xids[100:]
