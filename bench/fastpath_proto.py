"""Prototypes behind the proposals in bench/PROFILE.md, measured against the current code paths.

`python -m bench.fastpath_proto` checks each prototype byte-for-byte against fastavro on the
benchmark's own records, then times both (microseconds per call, best of 5). Nothing here is used
by the processor; the lead decides what moves into processor/.
"""

from __future__ import annotations

import io
import random
import timeit

import fastavro

from processor.core import events as ev

OPS = ev.ALL_OPS  # RawEvent Op enum symbols, in schema order
CHANGE_OPS = ("c", "u", "d", "t", "ddl")


# ------------------------------------------------------------------ Avro primitives, by hand


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _str(s: str) -> bytes:
    b = s.encode()
    return _long(len(b)) + b


def _opt_str(s: str | None) -> bytes:
    return b"\x00" if s is None else b"\x02" + _str(s)


def _read_long(b: bytes, i: int) -> tuple[int, int]:
    shift = acc = 0
    while True:
        c = b[i]
        i += 1
        acc |= (c & 0x7F) << shift
        if c < 0x80:
            return (acc >> 1) ^ -(acc & 1), i
        shift += 7


# ------------------------------------------------------------------ proposal 1: routing prefix


def decode_prefix(b: bytes) -> tuple[str, str, int, int, int, int, int]:
    """xid, op, seq, scn, thread, ts_ms and the offset of `table`: all the buffering path needs."""
    n, i = _read_long(b, 0)
    xid = b[i : i + n].decode()
    i += n
    op, i = _read_long(b, i)
    seq, i = _read_long(b, i)
    scn, i = _read_long(b, i)
    thread, i = _read_long(b, i)
    ts_ms, i = _read_long(b, i)
    return xid, OPS[op], seq, scn, thread, ts_ms, i


# ------------------------------------------------------------------ proposal 2: ChangeEvent tail


class TxnTail:
    """The ChangeEvent `source` + `transaction` bytes, with the per-transaction parts encoded once."""

    def __init__(self, xid: str, commit_scn: int, commit_ts_ms: int, thread: int, user: str | None):
        self.xid_b = _str(xid)
        self.commit = _long(commit_scn) + _long(commit_ts_ms) + _long(thread) + _opt_str(user)
        self.txn_head = b"\x02" + self.xid_b
        self.id_prefix = f"{thread}:{commit_scn}:{xid}:"

    def head(self, seq: int, op: str, ts_ms: int) -> bytes:
        return _str(self.id_prefix + str(seq)) + _long(ev_op_index(op)) + _long(ts_ms)

    def tail(
        self,
        table: str | None,
        seq: int,
        scn: int,
        row_id: str | None,
        attrs: dict,
        total_order: int,
        collection_order: int,
    ) -> bytes:
        if attrs:
            amap = _long(len(attrs)) + b"".join(_str(k) + _str(v) for k, v in attrs.items()) + b"\x00"
        else:
            amap = b"\x00"
        return b"".join(
            (
                _opt_str(table),
                self.xid_b,
                _long(seq),
                _long(scn),
                self.commit,
                _opt_str(row_id),
                amap,
                self.txn_head,
                _long(total_order),
                _long(collection_order),
            )
        )


_ENVELOPE_INDEX = {op: i for i, op in enumerate(CHANGE_OPS)}


def ev_op_index(raw_op: str) -> int:
    return _ENVELOPE_INDEX[ev.ENVELOPE_OP[raw_op]]


# ------------------------------------------------------------------ measurement


def _best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    from bench.workloads import _Encoder

    enc = _Encoder(random.Random(1))
    raw = enc.change("st-12345", 3, 4567)
    rec = ev.decode_raw(raw)
    _routing, body_at = ev.decode_routing(raw)
    parts = ev._parts()

    # correctness against fastavro
    p = decode_prefix(raw)
    assert p[:6] == (rec["xid"], rec["op"], rec["seq"], rec["scn"], rec["thread"], rec["ts_ms"]), p
    tt = TxnTail(rec["xid"], 999, 1_700_000_000_999, 1, "bench")
    tail_dict = {
        "source": {
            "table": rec["table"],
            "xid": rec["xid"],
            "seq": rec["seq"],
            "scn": rec["scn"],
            "commit_scn": 999,
            "commit_ts_ms": 1_700_000_000_999,
            "thread": 1,
            "user": "bench",
            "row_id": None,
            "attrs": {},
        },
        "transaction": {"id": rec["xid"], "total_order": 7, "data_collection_order": 3},
    }
    head_dict = {
        "event_id": ev.event_id(1, 999, rec["xid"], rec["seq"]),
        "op": ev.ENVELOPE_OP[rec["op"]],
        "ts_ms": rec["ts_ms"],
    }
    fast = (
        tt.head(rec["seq"], rec["op"], rec["ts_ms"])
        + raw[body_at:]
        + tt.tail(rec["table"], rec["seq"], rec["scn"], None, {}, 7, 3)
    )
    slow = ev.encode_change_spliced(head_dict, memoryview(raw)[body_at:], tail_dict)
    assert fast == slow, (fast, slow)
    assert ev.decode_change(fast)["source"]["commit_scn"] == 999

    def tail_writer():
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parts["tail"], tail_dict)
        return buf.getvalue()

    rows = [
        ("decode_raw (full fastavro decode, engine.apply today)", lambda: ev.decode_raw(raw), 20000),
        ("decode_routing (fastavro prefix schema, iter_changes today)", lambda: ev.decode_routing(raw), 20000),
        ("decode_prefix (hand-rolled xid/op/seq/scn/thread/ts_ms)", lambda: decode_prefix(raw), 50000),
        (
            "encode_change_spliced (fastavro head + tail, today)",
            lambda: ev.encode_change_spliced(head_dict, memoryview(raw)[body_at:], tail_dict),
            20000,
        ),
        ("  of which the tail via fastavro", tail_writer, 20000),
        (
            "hand-rolled head + body + tail (TxnTail)",
            lambda: (
                tt.head(rec["seq"], rec["op"], rec["ts_ms"])
                + raw[body_at:]
                + tt.tail(rec["table"], rec["seq"], rec["scn"], None, {}, 7, 3)
            ),
            50000,
        ),
        ("change_key (json.dumps sort_keys)", lambda: ev.change_key(rec["table"], rec["key"]), 50000),
    ]
    print(f"record: {len(raw)} B change event; ChangeEvent {len(fast)} B; outputs identical to fastavro")
    for name, fn, n in rows:
        print(f"  {_best(fn, n):7.2f} us  {name}")


if __name__ == "__main__":
    main()
