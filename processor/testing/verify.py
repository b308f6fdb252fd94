"""Compare what the processor wrote (txbuffer.changes, txbuffer.transactions) with an expected-output
directory (processor.expected), e.g. the one `txbuffer generate --expected-dir` wrote.

Memory: the expected side is held as one 8-byte digest per change and per transaction, and the
ordering check keeps the last (commit_scn, seq) per output key, so a million-change run fits easily.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from processor.core import events
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.read import read_to_end
from processor.testing.expected import dumps, read_changes, read_transactions

SAMPLE = 10  # examples kept per kind of problem


@dataclass
class VerifyReport:
    expected: int = 0
    emitted: int = 0  # change records read, before deduplication (tombstones excluded)
    tombstones: int = 0
    duplicates_before_dedup: int = 0  # records whose event_id was already seen
    lost: int = 0
    unexpected: int = 0
    mismatches: int = 0
    order_violations: int = 0
    expected_transactions: int = 0
    begins: int = 0  # distinct transactions with a BEGIN record
    ends: int = 0  # distinct transactions with an END record
    missing_ends: int = 0
    unexpected_ends: int = 0
    end_count_mismatches: int = 0
    samples: dict[str, list] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.mismatches
            or self.order_violations
            or self.missing_ends
            or self.unexpected_ends
            or self.end_count_mismatches
            or self.begins < self.ends
        )

    def note(self, kind: str, example: object) -> None:
        examples = self.samples.setdefault(kind, [])
        if len(examples) < SAMPLE:
            examples.append(example)

    def summary(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        lines = [
            f"verify: {verdict}",
            f"  changes: expected={self.expected} emitted={self.emitted} duplicates={self.duplicates_before_dedup} "
            f"lost={self.lost} unexpected={self.unexpected} mismatches={self.mismatches} "
            f"order_violations={self.order_violations} tombstones={self.tombstones}",
            f"  transactions: expected={self.expected_transactions} begins={self.begins} ends={self.ends} "
            f"missing_ends={self.missing_ends} unexpected_ends={self.unexpected_ends} "
            f"end_count_mismatches={self.end_count_mismatches}",
        ]
        for kind, examples in sorted(self.samples.items()):
            lines.append(f"  {kind}: {examples}")
        return "\n".join(lines)


def content_digest(
    op: str, table: str | None, key: dict | None, before: dict | None, after: dict | None, ddl: str | None
) -> bytes:
    """What must match between an expected and an emitted change with the same event_id."""
    text = dumps([op, table, _sorted(key), _sorted(before), _sorted(after), ddl])
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def _sorted(row: dict | None) -> list | None:
    return None if row is None else sorted(row.items())


def verify(
    bootstrap: KafkaClientConfig | str,
    expected_dir: str | Path,
    changes_topic: str = "txbuffer.changes",
    transactions_topic: str = "txbuffer.transactions",
    ordering: str = "partition",
    timeout_s: float = 120.0,
) -> VerifyReport:
    """ordering: the processor's setting. "partition" promises per-key commit order only among
    transactions of one input partition (END records say which); "global" promises it for all."""
    if ordering not in ("partition", "global"):
        raise ValueError(f"ordering must be 'partition' or 'global', not {ordering!r}")
    report = VerifyReport()
    expected_counts = {f"{t['xid']}@{t['commit_scn']}": t["event_count"] for t in read_transactions(expected_dir)}
    report.expected_transactions = len(expected_counts)
    input_partitions = _check_transactions(
        report, expected_counts, read_topic(bootstrap, transactions_topic, timeout_s)
    )

    expected: dict[str, bytes] = {}
    for line in read_changes(expected_dir):
        expected[line["event_id"]] = content_digest(
            line["op"], line["table"], line["key"], line["before"], line["after"], line["ddl"]
        )
    report.expected = len(expected)
    order_scope = input_partitions if ordering == "partition" else {}
    _check_changes(report, expected, read_topic(bootstrap, changes_topic, timeout_s), order_scope)
    return report


def _check_changes(
    report: VerifyReport,
    expected: dict[str, bytes],
    records: Iterator[tuple[int, int, bytes | None, bytes | None]],
    order_scope: dict[str, int | None],
) -> None:
    seen: set[str] = set()
    # (output partition, Kafka key, input partition or None) -> newest (commit_scn, seq, event_id)
    last_position: dict[tuple[int, bytes | None, int | None], tuple[int, int, str]] = {}
    for partition, offset, key, value in records:
        if value is None:
            report.tombstones += 1
            continue
        change = events.decode_change(value)
        report.emitted += 1
        event_id = change["event_id"]
        if event_id in seen:  # deduplication keeps the first occurrence
            report.duplicates_before_dedup += 1
            continue
        seen.add(event_id)
        source = change["source"]
        want = expected.get(event_id)
        if want is None:
            report.unexpected += 1
            report.note("unexpected", event_id)
        elif want != content_digest(
            change["op"], source["table"], change["key"], change["before"], change["after"], change["ddl"]
        ):
            report.mismatches += 1
            report.note("mismatches", event_id)
        position = (source["commit_scn"], source["seq"], event_id)
        scope = (partition, key, order_scope.get(f"{source['xid']}@{source['commit_scn']}"))
        previous = last_position.get(scope)
        if previous is not None and position[:2] < previous[:2]:
            report.order_violations += 1
            report.note("order_violations", f"p{partition}@{offset}: {event_id} after {previous[2]}")
        else:
            last_position[scope] = position
    lost = [event_id for event_id in expected if event_id not in seen]
    report.lost = len(lost)
    for event_id in lost[:SAMPLE]:
        report.note("lost", event_id)


def _check_transactions(
    report: VerifyReport,
    expected_counts: dict[str, int],
    records: Iterator[tuple[int, int, bytes | None, bytes | None]],
) -> dict[str, int | None]:
    """Counts BEGIN/END records into the report; returns each transaction's input partition."""
    begins: set[str] = set()
    ends: dict[str, int | None] = {}
    input_partitions: dict[str, int | None] = {}
    for _, _, _, value in records:
        if value is None:
            continue
        record = events.decode_transaction(value)
        ident = f"{record['id']}@{record['commit_scn']}"
        if record["status"] == "BEGIN":
            begins.add(ident)
        elif record["status"] == "END":
            ends.setdefault(ident, record["event_count"])
            input_partitions.setdefault(ident, record["input_partition"])
    report.begins, report.ends = len(begins), len(ends)
    for ident, count in ends.items():
        if ident not in expected_counts:
            report.unexpected_ends += 1
            report.note("unexpected_ends", ident)
        elif count != expected_counts[ident]:
            report.end_count_mismatches += 1
            report.note("end_count_mismatches", f"{ident}: {count} != {expected_counts[ident]}")
    missing = [ident for ident in expected_counts if ident not in ends]
    report.missing_ends = len(missing)
    for ident in missing[:SAMPLE]:
        report.note("missing_ends", ident)
    return input_partitions


def read_topic(
    client: KafkaClientConfig | str, topic: str, timeout_s: float = 120.0, group: str = "txbuffer-verify"
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record up to the true end of each partition."""
    for msg in read_to_end(client, topic, group, timeout_s):
        yield msg.partition(), msg.offset(), msg.key(), msg.value()
