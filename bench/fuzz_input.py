"""The fuzz input: a seeded generated workload with mutated records mixed in (bench/fuzz.py runs it).

fuzzed_records() yields the records in produce order, each with the partition the producer puts
it on (heartbeats go to every partition, the rest by murmur2 of the key), so a broker run and an
in-process run see the same partitions and offsets.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator

from processor.core import events as ev
from processor.core.partitioning import murmur2
from processor.testing.generator import WorkloadGenerator

PARTITIONS = 4
INT64_MAX = 2**63 - 1
MUTATIONS = (
    "bit_flip",
    "truncate",
    "wrong_schema",
    "oversized_field",
    "lying_length",
    "unknown_enum",
    "negative_seq",
    "huge_seq_scn",
    "non_utf8_key",
    "non_utf8_xid",
    "empty_value",
    "junk_headers",
    "commit_without_begin",
    "duplicate_commit",
    "unknown_txn_event",
    "finished_txn_event",
)


def _varint(n: int) -> bytes:
    """Avro's zigzag varint of a long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Mutator:
    """Bad (or odd) records derived from the valid stream; each returns (key, value, headers)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.committed: list[dict] = []  # COMMITs seen so far (for duplicates)
        self.finished_changes: list[dict] = []  # changes of transactions that have committed
        self.n = 0

    def observe(self, event: dict) -> None:
        if event["op"] == ev.COMMIT:
            self.committed.append(event)
            del self.committed[:-200]
        elif event["op"] in ev.CHANGE_OPS and self.committed and self.rng.random() < 0.05:
            self.finished_changes.append(event)  # its transaction may or may not be finished yet
            del self.finished_changes[:-200]

    def fresh_xid(self) -> str:
        self.n += 1
        return f"fuzz-{self.n}"

    def make(self, kind: str, sample: dict) -> list[tuple[bytes | None, bytes | None, list | None]]:
        rng = self.rng
        data = ev.encode_raw(sample)
        key = sample["xid"].encode()
        if kind == "bit_flip":
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
            return [(key, bytes(b), None)]
        if kind == "truncate":
            return [(key, data[: rng.randrange(1, len(data))], None)]
        if kind == "wrong_schema":
            other = rng.choice(
                [
                    json.dumps({"xid": sample["xid"], "op": "INSERT"}).encode(),
                    ev.encode_transaction(
                        {
                            "status": "END",
                            "id": sample["xid"],
                            "commit_scn": 1,
                            "ts_ms": 0,
                            "thread": 1,
                            "event_count": 1,
                            "data_collections": None,
                            "input_partition": 0,
                            "commit_offset": 0,
                            "ordering": None,
                            "reason": None,
                        }
                    ),
                    rng.randbytes(rng.randint(1, 64)),
                ]
            )
            return [(key, other, None)]
        if kind == "oversized_field":
            xid = self.fresh_xid()  # a valid transaction with a 256 KB column: buffered and emitted whole
            big = {"id": self.n, "blob": "x" * (256 << 10)}
            return [
                (xid.encode(), ev.encode_raw(ev.raw_event(xid, ev.BEGIN, 0, sample["scn"])), None),
                (
                    xid.encode(),
                    ev.encode_raw(
                        ev.raw_event(xid, ev.INSERT, 1, sample["scn"], table="fuzz.big", key={"id": self.n}, after=big)
                    ),
                    None,
                ),
                (xid.encode(), ev.encode_raw(ev.raw_event(xid, ev.COMMIT, 2, sample["scn"])), None),
            ]
        if kind == "lying_length":  # the xid's length prefix claims far more bytes than follow
            xid = sample["xid"].encode()
            head = len(_varint(len(xid)))
            return [(key, _varint(rng.choice([1 << 30, 1 << 40, INT64_MAX >> 1])) + data[head:], None)]
        if kind == "unknown_enum":
            xid = sample["xid"].encode()
            at = len(_varint(len(xid))) + len(xid)
            return [(key, data[:at] + _varint(rng.randint(40, 1000)) + data[at + 1 :], None)]
        if kind == "negative_seq":
            return [(key, ev.encode_raw({**sample, "seq": -rng.randint(1, 1 << 40)}), None)]
        if kind == "huge_seq_scn":  # valid: a fresh transaction at the top of the long range
            xid = self.fresh_xid()
            top = INT64_MAX - rng.randint(0, 10)
            return [
                (xid.encode(), ev.encode_raw(ev.raw_event(xid, ev.BEGIN, 0, top)), None),
                (
                    xid.encode(),
                    ev.encode_raw(ev.raw_event(xid, ev.INSERT, top, top, table="fuzz.huge", key={"id": self.n})),
                    None,
                ),
                (xid.encode(), ev.encode_raw(ev.raw_event(xid, ev.COMMIT, top, top)), None),
            ]
        if kind == "non_utf8_key":  # the Kafka key is not the XID's UTF-8: the value decides
            return [(b"\xff\xfe" + rng.randbytes(4), data, None)]
        if kind == "non_utf8_xid":
            xid = sample["xid"].encode()
            head = len(_varint(len(xid)))
            bad = b"\xc3\x28" + xid[2:] if len(xid) >= 2 else b"\xc3\x28"
            return [(key, _varint(len(bad)) + bad + data[head + len(xid) :], None)]
        if kind == "empty_value":
            return [(key, rng.choice([b"", None]), None)]
        if kind == "junk_headers":  # a valid record with junk headers: headers never matter
            junk = [(rng.choice(["reason", "x", "", "\u00e9"]), rng.randbytes(rng.randint(0, 32))) for _ in range(3)]
            return [(key, data, junk)]
        if kind == "commit_without_begin":
            xid = self.fresh_xid()
            return [(xid.encode(), ev.encode_raw(ev.raw_event(xid, ev.COMMIT, 5, sample["scn"])), None)]
        if kind == "duplicate_commit" and self.committed:
            c = rng.choice(self.committed)
            return [(c["xid"].encode(), ev.encode_raw(c), None)]
        if kind == "unknown_txn_event":  # a change of a transaction that never began nor ends
            xid = self.fresh_xid()
            return [(xid.encode(), ev.encode_raw({**sample, "xid": xid}), None)]
        if kind == "finished_txn_event" and self.finished_changes:
            c = rng.choice(self.finished_changes)
            return [(c["xid"].encode(), ev.encode_raw(c), None)]
        return [(key, data[:-1], None)]  # a fallback bad record (no committed txn to copy yet)


Record = tuple[bytes | None, bytes | None, list | None, int, bool]  # key, value, headers, partition, injected


def partition_of_key(key: bytes | None) -> int:
    """Where the producer's murmur2 partitioner puts a keyed record (every fuzz record has a key)."""
    return (murmur2(key or b"") & 0x7FFFFFFF) % PARTITIONS


def fuzzed_records(records: int, seed: int, bad_rate: float, counts: Counter) -> Iterator[Record]:
    """About `records` raw records, valid and mutated, in produce order, each with its partition
    (given explicitly to the producer, so an in-process run sees the broker's offsets) and whether
    it was injected (a mutated record, or one of the small valid transactions some mutations add);
    counts injections by kind."""
    rng = random.Random(seed)
    mutator = Mutator(rng)
    valid_events = int(records * (1 - bad_rate))
    for event in WorkloadGenerator(valid_events, seed=seed, open_txns=40):
        if event["op"] == ev.HEARTBEAT:
            value = ev.encode_raw(event)
            for p in range(PARTITIONS):
                yield b"", value, None, p, False
        else:
            key = event["xid"].encode()
            yield key, ev.encode_raw(event), None, partition_of_key(key), False
        mutator.observe(event)
        if event["op"] != ev.HEARTBEAT and rng.random() < bad_rate / (1 - bad_rate):
            kind = rng.choice(MUTATIONS)
            for bad_key, value, headers in mutator.make(kind, event):
                yield bad_key, value, headers, partition_of_key(bad_key), True
            counts[kind] += 1
