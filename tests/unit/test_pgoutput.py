"""pgoutput decoding and the PostgreSQL mapping, from hand-built protocol messages (no database)."""

import struct

import pytest

from processor.sources import pgoutput as pg
from processor.sources.pg_toast import RowImages
from processor.sources.postgres import PLACEHOLDER, PgMapper


def s(text: str) -> bytes:
    return text.encode() + b"\x00"


def tup(*cols) -> bytes:
    out = struct.pack("!h", len(cols))
    for c in cols:
        if c is None:
            out += b"n"
        elif c == "<u>":
            out += b"u"
        else:
            data = c.encode() if isinstance(c, str) else c
            out += b"t" + struct.pack("!i", len(data)) + data
    return out


def x(xid):
    return b"" if xid is None else struct.pack("!I", xid)


def begin(xid, lsn=100, ts=0):
    return b"B" + struct.pack("!QqI", lsn, ts, xid)


def commit(commit_lsn, end_lsn, ts=1_000_000):
    return b"C" + struct.pack("!bQQq", 0, commit_lsn, end_lsn, ts)


def relation(relid=7, cols=(("id", 23, True), ("v", 25, False)), ident=b"d", xid=None, name="t"):
    body = x(xid) + struct.pack("!I", relid) + s("public") + s(name) + ident + struct.pack("!h", len(cols))
    for n, oid, key in cols:
        body += struct.pack("!b", 1 if key else 0) + s(n) + struct.pack("!Ii", oid, -1)
    return b"R" + body


def insert(*cols, relid=7, xid=None):
    return b"I" + x(xid) + struct.pack("!I", relid) + b"N" + tup(*cols)


def stream_start(xid, first=True):
    return b"S" + struct.pack("!Ib", xid, 1 if first else 0)


def stream_commit(xid, commit_lsn, end_lsn):
    return b"c" + struct.pack("!IbQQq", xid, 0, commit_lsn, end_lsn, 0)


def stream_abort(xid, subxid):
    return b"A" + struct.pack("!II", xid, subxid)


def feed(mapper, msgs, lsn=1000):
    out, acks = [], []
    for i, m in enumerate(msgs):
        evs, ack = mapper.handle(m, lsn + i)
        out += evs
        if ack:
            acks.append(ack)
    return out, acks


def test_small_transaction_begin_changes_commit_with_typed_values():
    cols = (
        ("id", 23, True),
        ("big", 20, False),
        ("f", 701, False),
        ("b", 16, False),
        ("d", 17, False),
        ("n", 1700, False),
        ("t", 25, False),
        ("z", 25, False),
    )
    evs, acks = feed(
        PgMapper(),
        [
            begin(42, ts=2_000_000),
            relation(cols=cols),
            insert("1", "9007199254740993", "1.5", "t", "\\x00ff", "12.30", "it's", None),
            commit(500, 520, ts=2_000_000),
        ],
    )
    assert [(e["op"], e["xid"], e["seq"]) for e in evs] == [
        ("BEGIN", "42", 0),
        ("INSERT", "42", 1),
        ("COMMIT", "42", 2),
    ]
    assert evs[1]["after"] == {
        "id": 1,
        "big": 9007199254740993,
        "f": 1.5,
        "b": True,
        "d": b"\x00\xff",
        "n": "12.30",
        "t": "it's",
        "z": None,
    }
    assert evs[1]["key"] == {"id": 1} and evs[1]["table"] == "public.t" and evs[1]["subxid"] is None
    assert evs[2]["scn"] == 500 and evs[2]["ts_ms"] == pg.PG_EPOCH_MS + 2000
    assert [(a.end_lsn, a.commit_lsn) for a in acks] == [(520, 500)]


def test_streamed_rows_carry_the_subtransaction_xid_and_aborts_map_to_subtxn_abort_or_rollback():
    m = PgMapper()
    evs, acks = feed(
        m,
        [
            stream_start(50),
            relation(xid=50),
            insert("1", "a", xid=50),
            insert("2", "b", xid=51),
            b"E",
            stream_start(50, first=False),
            stream_abort(50, 51),
            b"E",
            stream_commit(50, 900, 950),
            stream_start(60),
            insert("3", "c", xid=60),
            b"E",
            stream_abort(60, 60),
        ],
    )
    assert [(e["op"], e["xid"], e["subxid"]) for e in evs] == [
        ("BEGIN", "50", None),
        ("INSERT", "50", "50"),
        ("INSERT", "50", "51"),
        ("SUBTXN_ABORT", "50", "51"),
        ("COMMIT", "50", None),
        ("BEGIN", "60", None),
        ("INSERT", "60", "60"),
        ("ROLLBACK", "60", None),
    ]
    assert next(a.end_lsn for a in acks) == 950 and acks[1].commit_lsn is None


def test_after_a_reconnect_open_transactions_begin_again():
    m = PgMapper()
    first, _ = feed(m, [stream_start(70), relation(xid=70), insert("1", "a", xid=70), b"E"])
    m.reset_session()
    # the server streams the open transaction again from its start
    again, _ = feed(m, [stream_start(70), relation(xid=70), insert("1", "a", xid=70), b"E", stream_commit(70, 10, 20)])
    assert [e["op"] for e in again] == ["BEGIN", "INSERT", "COMMIT"]
    assert again[1]["seq"] == first[1]["seq"] == 1
    # a block for an XID this session has not begun also opens with BEGIN
    m.reset_session()
    late, _ = feed(m, [stream_start(80, first=False), b"E"])
    assert [e["op"] for e in late] == ["BEGIN"]


def test_changed_relation_is_a_ddl_event_first_sight_is_not():
    m = PgMapper()
    evs, _ = feed(
        m,
        [
            begin(1),
            relation(),
            commit(1, 2),
            begin(3),
            relation(),
            relation(cols=(("id", 23, True), ("v", 25, False), ("w", 20, False))),
            commit(4, 5),
        ],
    )
    ddl = [e for e in evs if e["op"] == "DDL"]
    assert len(ddl) == 1 and ddl[0]["table"] == "public.t" and '"w"' in ddl[0]["ddl"] and ddl[0]["xid"] == "3"


def test_update_delete_truncate_and_replica_identity():
    m = PgMapper()
    upd_key = b"U" + struct.pack("!I", 7) + b"K" + tup("1", None) + b"N" + tup("2", "x")
    upd_plain = b"U" + struct.pack("!I", 7) + b"N" + tup("2", "<u>")
    dele = b"D" + struct.pack("!I", 7) + b"K" + tup("2", None)
    trunc = b"T" + struct.pack("!ib", 1, 0) + struct.pack("!I", 7)
    evs, _ = feed(m, [begin(9), relation(), upd_key, upd_plain, dele, trunc, commit(1, 2)])
    u1, u2, d, t = evs[1:5]
    assert (u1["op"], u1["key"], u1["before"], u1["after"]) == ("UPDATE", {"id": 2}, {"id": 1}, {"id": 2, "v": "x"})
    # an unchanged TOAST value is not sent; with no image of the row, Debezium's placeholder, counted
    assert (u2["after"], u2["attrs"]["toast_placeholder"]) == ({"id": 2, "v": PLACEHOLDER}, "v")
    assert m.stats["toast_placeholder"] == 1
    assert (d["op"], d["key"], d["before"]) == ("DELETE", {"id": 2}, {"id": 2})  # only the key without FULL
    assert (t["op"], t["table"]) == ("TRUNCATE", "public.t")


def test_replica_identity_full_uses_the_primary_key_from_the_catalog():
    m = PgMapper(primary_key=lambda relid: ["id"])
    full = relation(cols=(("id", 23, True), ("v", 25, True)), ident=b"f")
    dele = b"D" + struct.pack("!I", 7) + b"O" + tup("5", "old")
    evs, _ = feed(m, [begin(9), full, dele, commit(1, 2)])
    assert (evs[1]["key"], evs[1]["before"]) == ({"id": 5}, {"id": 5, "v": "old"})


def test_origin_type_and_message_are_decoded():
    m = PgMapper()
    origin = b"O" + struct.pack("!Q", 5) + s("upstream")
    typ = b"Y" + struct.pack("!I", 90000) + s("public") + s("mood")
    message = b"M" + struct.pack("!bQ", 1, 7) + s("pfx") + struct.pack("!i", 3) + b"abc"
    evs, _ = feed(m, [begin(9), origin, typ, message, relation(), insert("1", "a"), commit(1, 2)])
    assert evs[1]["attrs"]["origin"] == "upstream"
    assert m.types[90000] == "public.mood"
    assert pg.decode(message).content == b"abc" and pg.decode(message).transactional


@pytest.mark.parametrize(
    "data, error",
    [
        (b"", "empty"),
        (b"Q", "unknown message type"),
        (b"B\x00\x01", "truncated"),
        (begin(1) + b"x", "trailing"),
        (b"I" + struct.pack("!I", 7) + b"X", "INSERT without"),
    ],
)
def test_malformed_messages_raise(data, error):
    with pytest.raises(pg.PgOutputError, match=error):
        pg.decode(data)


def test_change_for_unknown_relation_or_outside_a_transaction_raises():
    with pytest.raises(pg.PgOutputError, match="outside a transaction"):
        PgMapper().handle(insert("1", "a"), 1)
    m = PgMapper()
    m.handle(begin(1), 1)
    with pytest.raises(pg.PgOutputError, match="unknown relation"):
        m.handle(insert("1", "a"), 2)


def test_snapshot_read_events_are_emitted_as_op_r_by_the_engine_and_the_reference_model():
    from processor.core import events as ev
    from processor.testing.reference import ReferenceModel
    from tests.enginekit import R, make_store, new_run

    row = {"id": 1, "v": "a"}
    evs = [
        R("snapshot:0/10:public.t:0", ev.BEGIN, 0, 15),
        R("snapshot:0/10:public.t:0", ev.READ, 1, 15, table="public.t", key={"id": 1}, after=row),
        R("snapshot:0/10:public.t:0", ev.COMMIT, 2, 15),
    ]
    store = make_store("memory", None)
    run = new_run(store)
    run.feed(*evs)
    assert [(c["op"], c["after"]) for c in run.changes] == [("r", row)]
    assert run.changes[0]["event_id"] == "1:15:snapshot:0/10:public.t:0:1"
    model = ReferenceModel()
    for offset, e in enumerate(evs):
        model.feed(0, offset, ev.raw_event(**{**e}) if isinstance(e, dict) else e)
    assert [ch["op"] for txn in model.all_committed() for ch in txn.changes] == ["r"]


# ---- TOAST: unchanged values carried from the last known image ---------------------------------

BIG, NEWER = "x" * 10_000, "y" * 10_000


def upd_unchanged(pk="1", relid=7, xid=None, other="2"):
    """UPDATE t SET n = <other> WHERE id = <pk>, the TOASTed v unchanged (sent as "u")."""
    return b"U" + x(xid) + struct.pack("!I", relid) + b"N" + tup(pk, "<u>", other)


TOAST_COLS = (("id", 23, True), ("v", 25, False), ("n", 23, False))


@pytest.fixture(params=["memory", "spilled"])
def images(request, tmp_path, monkeypatch):
    if request.param == "spilled":  # every pending write goes to disk
        monkeypatch.setattr("processor.sources.pg_toast.MEMORY_ROWS", 0)
    store = RowImages(tmp_path / "images")
    yield store
    store.close()


def test_unchanged_toast_value_is_carried_from_the_last_committed_image(images):
    m = PgMapper(images=images)
    rel = relation(cols=TOAST_COLS)
    evs, _ = feed(m, [begin(1), rel, insert("1", BIG, "0"), commit(10, 11)])
    evs, _ = feed(m, [begin(2), upd_unchanged(), commit(20, 21)])
    assert evs[1]["after"] == {"id": 1, "v": BIG, "n": 2} and "toast_placeholder" not in evs[1]["attrs"]
    assert m.stats["toast_carried"] == 1 and m.stats["toast_placeholder"] == 0


def test_carry_sees_the_transactions_own_earlier_write_but_not_a_rolled_back_savepoint(images):
    m = PgMapper(images=images)
    feed(m, [begin(1), relation(cols=TOAST_COLS), insert("1", BIG, "0"), commit(10, 11)])
    evs, _ = feed(
        m,
        [
            stream_start(50),
            relation(cols=TOAST_COLS, xid=50),
            b"U" + x(51) + struct.pack("!I", 7) + b"N" + tup("1", NEWER, "1"),  # in savepoint 51
            stream_abort(50, 51),  # ROLLBACK TO SAVEPOINT: NEWER never happened
            upd_unchanged(xid=50),
            b"E",
            stream_start(50, first=False),
            b"U" + x(50) + struct.pack("!I", 7) + b"N" + tup("2", NEWER, "0"),
            b"E",
            stream_start(50, first=False),
            upd_unchanged(pk="2", xid=50, other="9"),  # its own earlier write of row 2
            b"E",
            stream_commit(50, 30, 31),
        ],
    )
    updates = [e["after"] for e in evs if e["op"] == "UPDATE"]
    assert updates[1] == {"id": 1, "v": BIG, "n": 2}
    assert updates[3] == {"id": 2, "v": NEWER, "n": 9}
    assert m.stats["toast_placeholder"] == 0


def test_restart_forgets_images_of_transactions_the_slot_will_send_again(images):
    m = PgMapper(images=images)
    feed(m, [begin(1), relation(cols=TOAST_COLS), insert("1", BIG, "0"), commit(10, 11)])
    images.acknowledge(11)
    # Committed but not confirmed: after a restart PostgreSQL sends it again.
    feed(m, [begin(2), b"U" + struct.pack("!I", 7) + b"N" + tup("1", NEWER, "0"), commit(20, 21)])
    assert images.rewind_to(11) == 1
    m2 = PgMapper(images=images)
    evs, _ = feed(m2, [begin(3), relation(cols=TOAST_COLS), upd_unchanged(), commit(20, 21)])
    assert evs[1]["after"]["v"] == BIG


def test_placeholder_mode_and_rows_never_seen_get_the_debezium_placeholder_counted(images):
    m = PgMapper(images=images, toast="placeholder")
    feed(m, [begin(1), relation(cols=TOAST_COLS), insert("1", BIG, "0"), commit(10, 11)])
    evs, _ = feed(m, [begin(2), upd_unchanged(), commit(20, 21)])
    assert evs[1]["after"]["v"] == PLACEHOLDER and evs[1]["attrs"]["toast_placeholder"] == "v"
    carry = PgMapper(images=images)
    evs, _ = feed(carry, [begin(3), relation(cols=TOAST_COLS), upd_unchanged(pk="5"), commit(30, 31)])
    assert evs[1]["after"]["v"] == PLACEHOLDER and carry.stats["toast_placeholder"] == 1
    with pytest.raises(ValueError, match="toast must be"):
        PgMapper(toast="drop")


def test_row_events_carry_the_column_types_of_the_relation():
    from processor.sources import pg_columns

    m = PgMapper(describe=lambda relid: {"id": ("integer", False), "v": ("text", True)})
    evs, _ = feed(m, [begin(1), relation(), insert("1", "a"), commit(10, 11)])
    cols = pg_columns.decode(evs[1]["attrs"][pg_columns.ATTR])
    assert [(c.name, c.type_oid, c.typmod, c.type_name, c.key, c.optional) for c in cols] == [
        ("id", 23, -1, "integer", True, False),
        ("v", 25, -1, "text", False, True),
    ]
    assert evs[1]["attrs"][pg_columns.ATTR] == '[["id",23,-1,"integer",1,0],["v",25,-1,"text",0,1]]'


def test_a_heartbeat_message_between_transactions_is_an_acknowledgeable_position():
    m = PgMapper()
    heartbeat = b"M" + struct.pack("!bQ", 0, 777) + s("txbuffer.heartbeat") + struct.pack("!i", 0)
    evs, acks = feed(m, [heartbeat])
    assert evs == [] and [(a.end_lsn, a.commit_lsn) for a in acks] == [(777, None)]
    _, acks = feed(m, [stream_start(5), heartbeat])
    assert acks == []  # a streamed transaction is open: its start must be sent again after a restart
