"""Fuzzed input: `python -m bench.fuzz [--records N] [--seed S] [--bad-rate R]`.

Writes N raw records to a fresh raw topic: the valid transactions of a seeded generated workload,
mixed with mutated records (bit flips, truncation, another schema, oversized and lying length
prefixes, unknown enum symbols, negative and huge seq/scn, non-UTF-8 keys and XIDs, empty values,
junk headers, COMMIT without BEGIN, duplicate COMMITs, events of unknown and of finished
transactions). Runs `txbuffer run --available-now` on it as a real subprocess, then checks:

  * 0 crashes: the processor exits 0 and logs no traceback;
  * the DLQ holds exactly the records the reference model (processor/testing/reference.py)
    rejects, each with a reason and its source partition and offset;
  * the changes topic (after dedup on event_id) equals the reference model's output, change by
    change, and every END record carries the reference's event count.

The reference is fed the raw topic as the broker stored it (partition, offset, value), so it sees
exactly what the processor sees. Prints a table and writes bench/results/fuzz-<UTC timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from processor.core import events as ev
from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.read import read_to_end
from processor.testing.expected import dumps
from processor.testing.generator import WorkloadGenerator
from processor.testing.reference import ReferenceModel

RESULTS = Path(__file__).resolve().parent / "results"
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


@dataclass
class FuzzReport:
    records: int = 0
    valid_records: int = 0
    mutated: dict = field(default_factory=dict)  # mutation -> records injected
    exit_code: int | None = None
    tracebacks: int = 0
    expected_dlq: int = 0
    dlq_records: int = 0
    dlq_missing: int = 0  # rejected by the reference, absent from the DLQ
    dlq_unexpected: int = 0  # in the DLQ, accepted by the reference
    dlq_without_reason: int = 0
    dlq_without_position: int = 0
    expected_transactions: int = 0
    expected_changes: int = 0
    changes_read: int = 0
    changes_missing: int = 0
    changes_unexpected: int = 0
    changes_different: int = 0
    end_count_mismatches: int = 0
    seconds: float = 0.0
    samples: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 0
            and not self.tracebacks
            and not (self.dlq_missing or self.dlq_unexpected or self.dlq_without_reason or self.dlq_without_position)
            and not (self.changes_missing or self.changes_unexpected or self.changes_different)
            and not self.end_count_mismatches
        )

    def note(self, kind: str, example: object) -> None:
        examples = self.samples.setdefault(kind, [])
        if len(examples) < 5:
            examples.append(example)


# ----------------------------------------------------------------------------- the input


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


def write_fuzzed(bootstrap: str, topic: str, records: int, seed: int, bad_rate: float) -> tuple[int, Counter]:
    """Produce about `records` records; returns (records produced, mutations by kind)."""
    ensure_topics(bootstrap, {topic: PARTITIONS})
    producer = KafkaClientConfig(bootstrap).producer()
    rng = random.Random(seed)
    mutator = Mutator(rng)
    counts: Counter = Counter()
    failed: list[str] = []
    n = 0

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    def send(key, value, headers=None, partition=None):
        nonlocal n
        kw = {"partition": partition} if partition is not None else {}
        producer.produce(topic, value, key, headers=headers, on_delivery=delivered, **kw)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)

    valid_events = int(records * (1 - bad_rate))
    for event in WorkloadGenerator(valid_events, seed=seed, open_txns=40):
        if event["op"] == ev.HEARTBEAT:
            value = ev.encode_raw(event)
            for p in range(PARTITIONS):
                send(b"", value, partition=p)
        else:
            send(event["xid"].encode(), ev.encode_raw(event))
        mutator.observe(event)
        if event["op"] != ev.HEARTBEAT and rng.random() < bad_rate / (1 - bad_rate):
            kind = rng.choice(MUTATIONS)
            for key, value, headers in mutator.make(kind, event):
                send(key, value, headers)
            counts[kind] += 1
    producer.flush(120)
    if failed:
        raise RuntimeError(f"{len(failed)} fuzz records were not written: {failed[:3]}")
    return n, counts


# ----------------------------------------------------------------------------- the run and the checks


@dataclass
class Topics:
    raw: str
    changes: str
    transactions: str
    dlq: str
    outcomes: str
    group: str

    @classmethod
    def fresh(cls) -> Topics:
        t = uuid.uuid4().hex[:8]
        return cls(f"raw-{t}", f"changes-{t}", f"transactions-{t}", f"dlq-{t}", f"outcomes-{t}", f"fuzz-{t}")


def run_processor(bootstrap: str, topics: Topics, state_dir: Path, log_path: Path, timeout_s: float) -> int:
    args = [
        sys.executable, "-m", "processor.cli", "--log-format", "json", "run", "--available-now",
        "--bootstrap", bootstrap, "--raw-topic", topics.raw, "--changes-topic", topics.changes,
        "--transactions-topic", topics.transactions, "--dlq-topic", topics.dlq,
        "--outcomes-topic", topics.outcomes, "--group", topics.group, "--state-dir", str(state_dir),
    ]  # fmt: skip
    with open(log_path, "ab") as out:
        return subprocess.run(args, stdout=out, stderr=out, timeout=timeout_s, env=dict(os.environ)).returncode


def check(bootstrap: str, topics: Topics, report: FuzzReport) -> None:
    model = ReferenceModel()
    for msg in read_to_end(bootstrap, topics.raw, topics.group + "-ref", 600):
        model.feed(msg.partition(), msg.offset(), msg.value() if msg.value() is not None else b"")
    expected_dlq = {(p, o): reason for p, o, reason in model.dlq}
    report.expected_dlq = len(expected_dlq)

    seen_dlq: set[tuple[int, int]] = set()
    for msg in read_to_end(bootstrap, topics.dlq, topics.group + "-dlq", 300):
        report.dlq_records += 1
        h = read_dlq_headers(msg.headers())
        if not h.get("reason"):
            report.dlq_without_reason += 1
        try:
            where = (int(h["partition"]), int(h["offset"]))
        except (KeyError, ValueError):
            report.dlq_without_position += 1
            report.note("dlq_without_position", h)
            continue
        seen_dlq.add(where)
        if where not in expected_dlq:
            report.dlq_unexpected += 1
            report.note("dlq_unexpected", {"at": where, "reason": h.get("reason")})
    for where, reason in expected_dlq.items():
        if where not in seen_dlq:
            report.dlq_missing += 1
            report.note("dlq_missing", {"at": where, "reference_reason": reason})

    expected: dict[str, str] = {}
    counts: dict[str, int] = {}
    for txn in model.all_committed():
        counts[f"{txn.xid}@{txn.commit_scn}"] = len(txn.changes)
        for change in txn.changes:
            expected[change["event_id"]] = _canonical(change)
    report.expected_transactions = len(counts)
    report.expected_changes = len(expected)
    got: dict[str, str] = {}
    for msg in read_to_end(bootstrap, topics.changes, topics.group + "-out", 600):
        if msg.value() is None:
            continue
        report.changes_read += 1
        change = ev.decode_change(msg.value())
        got.setdefault(change["event_id"], _canonical(change))
    for event_id, text in expected.items():
        if event_id not in got:
            report.changes_missing += 1
            report.note("changes_missing", event_id)
        elif got[event_id] != text:
            report.changes_different += 1
            report.note("changes_different", {"expected": text[:600], "got": got[event_id][:600]})
    for event_id in got.keys() - expected.keys():
        report.changes_unexpected += 1
        report.note("changes_unexpected", event_id)
    for msg in read_to_end(bootstrap, topics.transactions, topics.group + "-txn", 300):
        t = ev.decode_transaction(msg.value())
        if t["status"] == "END" and counts.get(f"{t['id']}@{t['commit_scn']}") != t["event_count"]:
            report.end_count_mismatches += 1
            report.note("end_count_mismatches", {"id": t["id"], "got": t["event_count"]})


def _canonical(change: dict) -> str:
    """A change as compared: every field the reference model defines (attrs and key order aside)."""
    src = change["source"]
    return dumps(
        [
            change["event_id"], change["op"], change["ts_ms"], _sorted(change["key"]), _sorted(change["before"]),
            _sorted(change["after"]), change["ddl"], src["table"], src["xid"], src["seq"], src["scn"],
            src["commit_scn"], src["commit_ts_ms"], src["thread"], src["user"], src["row_id"],
            _sorted(src["attrs"]), change["transaction"],
        ]
    )  # fmt: skip


def _sorted(row: dict | None) -> list | None:
    return None if row is None else sorted(row.items())


def fuzz(
    bootstrap: str, records: int, seed: int, bad_rate: float, workdir: Path, timeout_s: float = 1800
) -> FuzzReport:
    started = time.monotonic()
    topics = Topics.fresh()
    report = FuzzReport()
    report.records, mutated = write_fuzzed(bootstrap, topics.raw, records, seed, bad_rate)
    report.mutated = dict(sorted(mutated.items()))
    report.valid_records = report.records - sum(mutated.values())
    log_path = workdir / "processor.log"
    report.exit_code = run_processor(bootstrap, topics, workdir / "state", log_path, timeout_s)
    report.tracebacks = log_path.read_text(errors="replace").count("Traceback")
    check(bootstrap, topics, report)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def table(r: FuzzReport) -> str:
    rows = [
        ("records written (valid stream + injected)", r.records),
        ("mutations injected", sum(r.mutated.values())),
        ("  by kind", r.mutated),
        ("processor exit code / tracebacks", f"{r.exit_code} / {r.tracebacks}"),
        ("DLQ expected (reference) / written", f"{r.expected_dlq} / {r.dlq_records}"),
        ("  missing / unexpected", f"{r.dlq_missing} / {r.dlq_unexpected}"),
        ("  without reason / without partition+offset", f"{r.dlq_without_reason} / {r.dlq_without_position}"),
        ("committed transactions (reference)", r.expected_transactions),
        ("changes expected / read", f"{r.expected_changes} / {r.changes_read}"),
        ("  missing / unexpected / different", f"{r.changes_missing} / {r.changes_unexpected} / {r.changes_different}"),
        ("END count mismatches", r.end_count_mismatches),
        ("seconds", r.seconds),
        ("verdict", "OK" if r.ok else "FAILED"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)} | {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bad-rate", type=float, default=0.15, help="share of injected records")
    ap.add_argument("--bootstrap", help="an existing broker (default: start an embedded Apache Kafka)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    started = datetime.now(UTC)
    workdir = Path(tempfile.mkdtemp(prefix="txbuffer-fuzz-"))
    if args.bootstrap:
        report = fuzz(args.bootstrap, args.records, args.seed, args.bad_rate, workdir)
    else:
        from processor.kafka.embedded import EmbeddedKafka

        with EmbeddedKafka() as kafka:
            report = fuzz(kafka.bootstrap, args.records, args.seed, args.bad_rate, workdir)
    print(table(report))
    if report.samples:
        print("samples:", json.dumps(report.samples, default=str)[:3000])
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = args.out or RESULTS / f"fuzz-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    doc = {
        "started": started.isoformat(),
        "command": "python -m bench.fuzz " + " ".join(argv if argv is not None else sys.argv[1:]),
        "ok": report.ok,
        **asdict(report),
    }
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(f"results: {path}  (processor log: {workdir / 'processor.log'})")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
