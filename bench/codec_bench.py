"""Micro-benchmark of the Avro codecs: fastavro (processor.core.events) against the compiled codec.

`python -m bench.codec_bench [--quick]` prints microseconds per record, best of 5 repeats, for
decode (one record per call, and batches of 1000) and encode of each schema, on the bench's own
~200-byte change events (bench.workloads). Every compiled result is first checked equal to
fastavro's.
"""

from __future__ import annotations

import argparse
import random
import sys
import timeit

from bench.workloads import _Encoder
from processor.core import codec
from processor.core import events as ev

BATCH = 1000


def _best_us(fn, number: int, per: int = 1) -> float:
    """Microseconds per record: fn handles `per` records per call."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number / per * 1e6


def _records(n: int) -> tuple[list[bytes], bytes]:
    enc = _Encoder(random.Random(1))
    values = [enc.change(f"bench-{i // 10}", i % 10 + 1, i) for i in range(n)]
    return values, enc.control("bench-0", ev.COMMIT, 11)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    scale = 0.2 if args.quick else 1.0

    try:
        fast = codec._compiled()
    except ImportError as exc:
        sys.exit(f"compiled codec not built ({exc}); build it with `pip install -e .` or "
                 "`python setup.py build_ext --inplace`")  # fmt: skip

    values, commit = _records(BATCH)
    raw = values[3]
    record = ev.decode_raw(raw)
    body_at = ev.decode_raw_with_body_offset(raw)[1]
    writer = fast["module"].ChangeWriter("bench-0", 999, 1_700_000_000_999, 1, "bench")
    py_writer = codec.PyChangeWriter("bench-0", 999, 1_700_000_000_999, 1, "bench")
    args_change = (record["op"], record["seq"], record["scn"], record["ts_ms"], record["table"], record["row_id"],
                   record["attrs"], raw, body_at, 7, 3)  # fmt: skip
    change = ev.decode_change(py_writer.encode(*args_change))
    change_bytes = ev.encode_change(change)
    end = {
        "status": "END", "id": "bench-0", "commit_scn": 999, "ts_ms": 1_700_000_000_999, "thread": 1,
        "event_count": 10, "data_collections": [{"name": "app.orders", "event_count": 6},
                                                {"name": "app.items", "event_count": 4}],
        "input_partition": 2, "commit_offset": 123456, "ordering": "partition", "reason": None,
    }  # fmt: skip
    end_bytes = ev.encode_transaction(end)
    outcome = {"xid": "bench-7", "input_partition": 2, "offset": 123456, "outcome": "rolled_back"}
    outcome_bytes = ev.encode_outcome(outcome)

    # Equality first: a fast wrong answer is no answer.
    assert fast["raw_event"].decode(raw) == record and fast["raw_event"].encode(record) == raw
    assert fast["raw_event"].view(raw).to_dict() == record
    assert [v.to_dict() for v in fast["raw_event"].view_batch(values)] == [ev.decode_raw(v) for v in values]
    assert writer.encode(*args_change) == py_writer.encode(*args_change)
    assert fast["change_event"].encode(change) == change_bytes and fast["change_event"].decode(change_bytes) == change
    assert fast["transaction_event"].encode(end) == end_bytes and fast["transaction_event"].decode(end_bytes) == end
    assert fast["txn_outcome"].encode(outcome) == outcome_bytes

    def n(x: int) -> int:
        return max(1, int(x * scale))

    def view_fields(view_batch):
        # what buffering reads per event: the batch decode plus xid, op, seq, key
        def run():
            for v in view_batch(values):
                _ = v.xid, v.op, v.seq, v.key

        return run

    def py_view_fields():
        for v in values:
            e, _ = ev.decode_raw_with_body_offset(v)
            _ = e["xid"], e["op"], e["seq"], e["key"]

    rows = [
        (f"RawEvent decode, {len(raw)} B change, to dict", n(20000),
         lambda: ev.decode_raw(raw), lambda: fast["raw_event"].decode(raw), 1),
        (f"RawEvent decode, {len(commit)} B COMMIT, to dict", n(20000),
         lambda: ev.decode_raw(commit), lambda: fast["raw_event"].decode(commit), 1),
        ("RawEvent decode + body offset (engine today) vs RawView", n(20000),
         lambda: ev.decode_raw_with_body_offset(raw), lambda: fast["raw_event"].view(raw), 1),
        (f"RawEvent batch of {BATCH}: views, per record", n(20),
         lambda: [codec._py_view(v) for v in values], lambda: fast["raw_event"].view_batch(values), BATCH),
        (f"RawEvent batch of {BATCH}: views + xid/op/seq/key, per record", n(20),
         py_view_fields, view_fields(fast["raw_event"].view_batch), BATCH),
        (f"RawEvent batch of {BATCH}: full dicts, per record", n(20),
         lambda: [ev.decode_raw(v) for v in values], lambda: [fast["raw_event"].decode(v) for v in values], BATCH),
        ("RawEvent encode", n(20000), lambda: ev.encode_raw(record), lambda: fast["raw_event"].encode(record), 1),
        (f"ChangeEvent encode, spliced ({len(change_bytes)} B)", n(20000),
         lambda: py_writer.encode(*args_change), lambda: writer.encode(*args_change), 1),
        ("ChangeEvent encode, whole dict", n(20000),
         lambda: ev.encode_change(change), lambda: fast["change_event"].encode(change), 1),
        ("ChangeEvent decode", n(20000),
         lambda: ev.decode_change(change_bytes), lambda: fast["change_event"].decode(change_bytes), 1),
        (f"TransactionEvent END encode ({len(end_bytes)} B)", n(20000),
         lambda: ev.encode_transaction(end), lambda: fast["transaction_event"].encode(end), 1),
        ("TransactionEvent END decode", n(20000),
         lambda: ev.decode_transaction(end_bytes), lambda: fast["transaction_event"].decode(end_bytes), 1),
        ("TxnOutcome encode", n(20000),
         lambda: ev.encode_outcome(outcome), lambda: fast["txn_outcome"].encode(outcome), 1),
        ("TxnOutcome decode", n(20000),
         lambda: ev.decode_outcome(outcome_bytes), lambda: fast["txn_outcome"].decode(outcome_bytes), 1),
    ]  # fmt: skip

    print(f"µs per record, best of 5 (Python {sys.version.split()[0]}; outputs checked equal to fastavro)")
    print(f"{'operation':62s} {'fastavro':>9s} {'compiled':>9s} {'speed-up':>9s}")
    for name, number, slow, quick, per in rows:
        s = _best_us(slow, number, per)
        q = _best_us(quick, number * (1 if per > 1 else 5), per)
        print(f"{name:62s} {s:9.2f} {q:9.3f} {s / q:8.0f}x")


if __name__ == "__main__":
    main()
