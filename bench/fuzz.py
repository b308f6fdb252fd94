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
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.fuzz_input import PARTITIONS, fuzzed_records
from processor.core import events as ev
from processor.core.actions import Committed, DeadLetter
from processor.core.engine import PartitionEngine
from processor.core.txn import Txn
from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.read import read_to_end
from processor.runtime.emitter import Emitter
from processor.store.memory import MemoryStore
from processor.testing.expected import dumps
from processor.testing.reference import ReferenceModel

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class FuzzReport:
    records: int = 0
    valid_records: int = 0  # records of the generated workload (the rest were injected)
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


# ----------------------------------------------------------------------------- writing the input


def write_fuzzed(bootstrap: str, topic: str, records: int, seed: int, bad_rate: float) -> tuple[int, int, Counter]:
    """Produce about `records` records; returns (records produced, of them injected, mutations by kind)."""
    ensure_topics(bootstrap, {topic: PARTITIONS})
    producer = KafkaClientConfig(bootstrap).producer()
    counts: Counter = Counter()
    failed: list[str] = []
    n = n_injected = 0

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for key, value, headers, partition, injected in fuzzed_records(records, seed, bad_rate, counts):
        n_injected += injected
        producer.produce(topic, value, key, partition=partition, headers=headers, on_delivery=delivered)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)
    producer.flush(120)
    if failed:
        raise RuntimeError(f"{len(failed)} fuzz records were not written: {failed[:3]}")
    return n, n_injected, counts


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


class Comparison:
    """The reference model's verdict on every raw record, and the processor's outputs checked against
    it. Outputs are kept as digests, so a long run holds no second copy of its big columns."""

    def __init__(self, report: FuzzReport):
        self.report = report
        self.model = ReferenceModel()
        self.seen_dlq: set[tuple[int, int]] = set()
        # event_id -> {digest: text for samples}. An XID whose records reach two partitions (a
        # Kafka key that is not the XID) is two transactions there, and their changes can share an
        # event_id: every distinct version is kept and compared, none hides another.
        self.got: dict[str, dict[str, str]] = {}
        self.ends: list[dict] = []

    def raw(self, partition: int, offset: int, value: bytes | None, key: bytes | None) -> None:
        self.model.feed(partition, offset, value if value is not None else b"", key)

    def dead_letter(self, reason: str | None, partition: int, offset: int) -> None:
        self.report.dlq_records += 1
        if not reason:
            self.report.dlq_without_reason += 1
        self.seen_dlq.add((partition, offset))

    def change(self, change: dict) -> None:
        self.report.changes_read += 1
        text = _canonical(change)
        self.got.setdefault(change["event_id"], {}).setdefault(_digest(text), text[:600])

    def transaction(self, record: dict) -> None:
        if record["status"] == "END":
            self.ends.append(record)

    def finish(self) -> None:
        report = self.report
        expected_dlq = {(p, o): reason for p, o, reason in self.model.dlq}
        report.expected_dlq = len(expected_dlq)
        for where in self.seen_dlq - expected_dlq.keys():
            report.dlq_unexpected += 1
            report.note("dlq_unexpected", {"at": where})
        for where in expected_dlq.keys() - self.seen_dlq:
            report.dlq_missing += 1
            report.note("dlq_missing", {"at": where, "reference_reason": expected_dlq[where]})
        counts: dict[tuple[int, str, int], int] = {}  # (input partition, xid, commit_scn) -> changes
        expected: dict[str, dict[str, str]] = {}
        for txn in self.model.all_committed():
            counts[(txn.partition, txn.xid, txn.commit_scn)] = len(txn.changes)
            for change in txn.changes:
                text = _canonical(change)
                expected.setdefault(change["event_id"], {})[_digest(text)] = text[:600]
        report.expected_transactions = len(counts)
        report.expected_changes = sum(len(versions) for versions in expected.values())
        for event_id, versions in expected.items():
            got = self.got.get(event_id)
            if got is None:
                report.changes_missing += 1
                report.note("changes_missing", event_id)
            elif got.keys() != versions.keys():
                report.changes_different += 1
                report.note("changes_different", {"expected": list(versions.values()), "got": list(got.values())})
        for event_id in self.got.keys() - expected.keys():
            report.changes_unexpected += 1
            report.note("changes_unexpected", event_id)
        for end in self.ends:
            if counts.get((end["input_partition"], end["id"], end["commit_scn"])) != end["event_count"]:
                report.end_count_mismatches += 1
                report.note("end_count_mismatches", {"id": end["id"], "got": end["event_count"]})


def check(bootstrap: str, topics: Topics, comparison: Comparison) -> None:
    """Feed the reference the raw topic as the broker stored it, then read the processor's outputs."""
    for msg in read_to_end(bootstrap, topics.raw, topics.group + "-ref", 600):
        comparison.raw(msg.partition(), msg.offset(), msg.value(), msg.key())
    for msg in read_to_end(bootstrap, topics.dlq, topics.group + "-dlq", 300):
        h = read_dlq_headers(msg.headers())
        try:
            where = (int(h["partition"]), int(h["offset"]))
        except (KeyError, ValueError):
            comparison.report.dlq_records += 1
            comparison.report.dlq_without_position += 1
            comparison.report.note("dlq_without_position", h)
            continue
        comparison.dead_letter(h.get("reason"), *where)
    for msg in read_to_end(bootstrap, topics.changes, topics.group + "-out", 600):
        if msg.value() is not None:
            comparison.change(ev.decode_change(msg.value()))
    for msg in read_to_end(bootstrap, topics.transactions, topics.group + "-txn", 300):
        comparison.transaction(ev.decode_transaction(msg.value()))
    comparison.finish()


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


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _sorted(row: dict | None) -> list | None:
    return None if row is None else sorted(row.items())


def fuzz(
    bootstrap: str, records: int, seed: int, bad_rate: float, workdir: Path, timeout_s: float = 1800
) -> FuzzReport:
    """The broker run: produce the input, run `txbuffer run --available-now` once, compare."""
    started = time.monotonic()
    topics = Topics.fresh()
    report = FuzzReport()
    report.records, injected, mutated = write_fuzzed(bootstrap, topics.raw, records, seed, bad_rate)
    report.mutated = dict(sorted(mutated.items()))
    report.valid_records = report.records - injected
    log_path = workdir / "processor.log"
    report.exit_code = run_processor(bootstrap, topics, workdir / "state", log_path, timeout_s)
    report.tracebacks = log_path.read_text(errors="replace").count("Traceback")
    check(bootstrap, topics, Comparison(report))
    report.seconds = round(time.monotonic() - started, 1)
    return report


# ----------------------------------------------------------------------------- in process, no broker


class _ComparingSink:
    """The Sink the emitter writes to in an in-process run: every output goes to the comparison."""

    def __init__(self, comparison: Comparison):
        self.comparison = comparison

    def send_change(self, key: bytes, value: bytes | None, on_ack) -> None:
        if value is not None:
            self.comparison.change(ev.decode_change(value))
        on_ack(None)

    def send_transaction(self, key: bytes, value: bytes, on_ack) -> None:
        self.comparison.transaction(ev.decode_transaction(value))
        on_ack(None)


def fuzz_in_process(records: int, seed: int, bad_rate: float, poll_batch: int = 500) -> FuzzReport:
    """The same input and checks without a broker: the engines (in-memory store) and the emitter
    driven as the runner drives them, per poll batch. Seconds per seed, to search seeds; an
    exception is a crash and propagates with its traceback."""
    started = time.monotonic()
    report = FuzzReport()
    comparison = Comparison(report)
    emitter = Emitter(_ComparingSink(comparison))
    engines = {p: PartitionEngine(p, MemoryStore()) for p in range(PARTITIONS)}
    offsets = dict.fromkeys(engines, 0)
    mutated: Counter = Counter()
    committed: list[tuple[PartitionEngine, Txn]] = []

    def end_of_batch() -> None:
        for engine in engines.values():
            engine.flush_data()
        for engine, txn in committed:
            emitter.release(engine, txn)
        committed.clear()
        emitter.advance()
        for engine in engines.values():
            engine.checkpoint()

    injected = 0
    for n, (key, value, _headers, partition, mutant) in enumerate(fuzzed_records(records, seed, bad_rate, mutated), 1):
        injected += mutant
        offset, engine = offsets[partition], engines[partition]
        offsets[partition] += 1
        comparison.raw(partition, offset, value, key)
        for action in engine.apply(offset, key, value):
            if isinstance(action, Committed):
                committed.append((engine, action.txn))
            elif isinstance(action, DeadLetter):
                comparison.dead_letter(action.reason, action.partition, action.offset)
        if n % poll_batch == 0:
            end_of_batch()
    end_of_batch()
    report.records = sum(offsets.values())
    report.mutated = dict(sorted(mutated.items()))
    report.valid_records = report.records - injected
    report.exit_code = 0
    comparison.finish()
    report.seconds = round(time.monotonic() - started, 1)
    return report


def table(r: FuzzReport) -> str:
    rows = [
        ("records written (valid stream + injected)", r.records),
        ("  of them the generated workload's / injected", f"{r.valid_records} / {r.records - r.valid_records}"),
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
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="no broker, no subprocess: engines on an in-memory store; prints the table, writes no results file",
    )
    args = ap.parse_args(argv)
    if args.in_process:
        report = fuzz_in_process(args.records, args.seed, args.bad_rate)
        print(table(report))
        if report.samples:
            print("samples:", json.dumps(report.samples, default=str)[:3000])
        return 0 if report.ok else 1
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
