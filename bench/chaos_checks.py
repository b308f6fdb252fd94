"""What the kill campaign checks after the fact: its own pass over the output topics, the DLQ, the
state dirs left behind, recovery times from the instance logs, and the printed table.

bench/chaos.py drives the campaign; this module only reads what it left.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from datetime import datetime
from pathlib import Path

from processor.core import events as ev
from processor.core import keys
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.read import read_to_end
from processor.testing.expected import dumps
from processor.testing.verify import read_topic


def own_pass(bootstrap: str, changes: str, transactions: str, group: str) -> dict:
    """Duplicates from event_ids and content, and order per input partition (first occurrence kept).

    Both topics are read by a read_committed consumer (librdkafka's default), so under exactly_once
    `duplicates_before_dedup` is what a consumer without dedup would see.
    """
    input_partition: dict[str, int] = {}
    end_counts: dict[str, set] = {}
    resync = 0
    for _, _, _, value in read_topic(bootstrap, transactions, timeout_s=600, group=group + "-own"):
        if value is None:
            continue
        t = ev.decode_transaction(value)
        if t["status"] == "END":
            ident = f"{t['id']}@{t['commit_scn']}"
            input_partition.setdefault(ident, t["input_partition"])
            end_counts.setdefault(ident, set()).add(t["event_count"])
        elif t["status"] == "RESYNC_REQUIRED":
            resync += 1
    by_event: dict[bytes, bytes] = {}  # event_id digest -> content digest of the first copy
    by_change: dict[bytes, bytes] = {}  # (xid, seq) digest -> event_id digest of the first copy
    records = conflicts = other_id = 0
    conflict_ids: set[bytes] = set()
    last: dict[tuple, tuple[int, int]] = {}
    violations: dict[int, int] = {}
    for partition, _, key, value in read_topic(bootstrap, changes, timeout_s=600, group=group + "-own"):
        if value is None:
            continue
        records += 1
        ch = ev.decode_change(value)
        src = ch["source"]
        eid = _digest(ch["event_id"])
        content = _digest(
            dumps(
                [
                    ch["op"],
                    src["table"],
                    _s(ch["key"]),
                    _s(ch["before"]),
                    _s(ch["after"]),
                    ch["ddl"],
                    src["xid"],
                    src["seq"],
                    src["commit_scn"],
                ]
            )
        )
        first = by_event.get(eid)
        if first is not None:
            if first != content and eid not in conflict_ids:
                conflict_ids.add(eid)
                conflicts += 1
            continue
        by_event[eid] = content
        ident = _digest(f"{src['xid']}\x00{src['seq']}")
        if ident in by_change:
            other_id += 1  # the same source change survived dedup under a second event_id
        else:
            by_change[ident] = eid
        ip = input_partition.get(f"{src['xid']}@{src['commit_scn']}", -1)
        scope = (partition, key, ip)
        pos = (src["commit_scn"], src["seq"])
        prev = last.get(scope)
        if prev is not None and pos < prev:
            violations[ip] = violations.get(ip, 0) + 1
        else:
            last[scope] = pos
    return {
        "records": records,
        "duplicates_before_dedup": records - len(by_event),
        "dedup_conflicts": conflicts,
        "same_change_other_event_id": other_id,
        "duplicates_after_dedup": conflicts + other_id,
        "order_violations_per_input_partition": violations,
        "resync_records": resync,
        # verify() keeps the first END per transaction; a later END with another event_count
        # (e.g. an empty re-commit after a rebuild) is only seen here.
        "end_count_conflicts": sum(1 for counts in end_counts.values() if len(counts) > 1),
    }


def dlq_reasons(bootstrap: str, dlq: str, group: str) -> dict[str, int]:
    """DLQ records by reason (the xid in the reason is cut off so that reasons group)."""
    reasons: dict[str, int] = {}
    for msg in read_to_end(bootstrap, dlq, group + "-dlq", 120):
        reason = read_dlq_headers(msg.headers()).get("reason", "?").rsplit(" in ", 1)[0]
        reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def inspect_state_dirs(state_dirs: dict[int, Path], ends: dict[int, int]) -> tuple[dict, dict]:
    """Leftover keys per state dir and partition, from each store opened read-only.

    Returns (figures, rows): TXN/META keys left in stores that processed their partition to the end
    are leaks; keys of partitions a store lost to another member are a stale cache, not a leak.
    """
    from processor.runtime.status import ReadOnlyRocksStore

    leaked = stale = meta = 0
    rows: dict[int, dict] = {}
    for index, state_dir in state_dirs.items():
        store_dir = state_dir / "store"
        row: dict = {"partitions": {}}
        rows[index] = row
        if not (store_dir / "CURRENT").is_file():
            row["note"] = "no store"
            continue
        store = ReadOnlyRocksStore(store_dir)
        try:
            per: dict[int, dict] = {}
            for kind, name in ((keys.TXN, "txn_keys"), (keys.META, "meta_keys")):
                for key, _ in store.scan_prefix(kind):
                    p = int.from_bytes(key[1:5], "big")
                    per.setdefault(p, {"txn_keys": 0, "meta_keys": 0})[name] += 1
            for key, raw in store.scan_prefix(keys.POS):
                p = int.from_bytes(key[1:5], "big")
                per.setdefault(p, {"txn_keys": 0, "meta_keys": 0})["next_offset"] = json.loads(raw)["next_offset"]
        finally:
            store.close()
        for p, fig in sorted(per.items()):
            current = fig.get("next_offset", -1) >= ends.get(p, 0)
            fig["current"] = current  # this store processed the partition to the end
            if current:
                leaked += fig["txn_keys"]
                meta += fig["meta_keys"]
            else:
                stale += fig["txn_keys"] + fig["meta_keys"]
            row["partitions"][p] = fig
    figures = {"leaked_txn_keys": leaked, "leaked_meta_keys": meta, "stale_cache_keys": stale}
    return figures, rows


def assigned_times(log_path: Path) -> list[float | None]:
    """Per start of one instance (after the first): its first log line -> first `partition.assigned`."""
    starts: list[list[datetime | None]] = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith('{"chaos": "start"'):
            starts.append([None, None])
            continue
        if not starts or not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        ts = rec.get("timestamp")
        if not ts:
            continue
        when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        if starts[-1][0] is None:
            starts[-1][0] = when  # first log line: the process is up (interpreter start excluded)
        if rec.get("event") == "partition.assigned" and starts[-1][1] is None:
            starts[-1][1] = when
    return [
        round((assigned - first).total_seconds(), 2) if first is not None and assigned is not None else None
        for first, assigned in starts[1:]
    ]


def dist(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    values = sorted(values)
    return {
        "n": len(values),
        "min": values[0],
        "median": round(statistics.median(values), 2),
        "p90": values[min(len(values) - 1, int(0.9 * len(values)))],
        "max": values[-1],
    }


def table(fig: dict) -> str:
    rows = [
        ("guarantee", fig.get("guarantee")),
        ("events fed", fig.get("events_fed")),
        ("expected changes / transactions", f"{fig.get('expected_changes')} / {fig.get('expected_transactions')}"),
        ("change records read (before dedup)", fig.get("changes_records")),
        ("kills (SIGKILL)", fig.get("kills")),
        ("state dir wipes", fig.get("wipes")),
        ("broker SIGKILL + restart", f"{fig.get('broker_kills')} (down s: {fig.get('broker_down_s')})"),
        ("broker SIGSTOP pause (s)", fig.get("broker_pause_s")),
        ("storm restarts (rounds x instances)", fig.get("storm_restarts")),
        ("  storm end -> all assigned / end reached (s)", f"{fig.get('storm_assigned_s')} / {fig.get('storm_end_s')}"),
        ("unplanned exits (restarted)", fig.get("unplanned_exits")),
        ("  exit codes", fig.get("unplanned_exit_codes")),
        ("reached end (committed = log end)", fig.get("reached_end")),
        ("  end reached after the feed ended (s)", fig.get("end_after_feed_s")),
        ("partitions assigned at the end", fig.get("partitions_assigned")),
        ("changes lost", fig.get("lost")),
        ("unexpected changes", fig.get("unexpected")),
        ("content mismatches", fig.get("mismatches")),
        ("duplicates after dedup", fig.get("duplicates_after_dedup")),
        ("  same event_id, other content", fig.get("dedup_conflicts")),
        ("  same (xid, seq), other event_id", fig.get("same_change_other_event_id")),
        ("duplicates before dedup (read_committed)", fig.get("duplicates_before_dedup")),
        ("commit-order violations", fig.get("order_violations")),
        ("  per input partition", fig.get("order_violations_per_input_partition")),
        ("missing / unexpected ENDs", f"{fig.get('missing_ends')} / {fig.get('unexpected_ends')}"),
        ("END count mismatches (first END)", fig.get("end_count_mismatches")),
        ("ENDs of one txn with differing counts", fig.get("end_count_conflicts")),
        ("leftover TXN keys (current stores)", fig.get("leaked_txn_keys")),
        ("leftover META keys (current stores)", fig.get("leaked_meta_keys")),
        ("stale-cache keys (partitions moved away)", fig.get("stale_cache_keys")),
        ("RESYNC_REQUIRED records", fig.get("resync_records")),
        ("false DLQ records", fig.get("dlq_records")),
        ("  DLQ reasons", fig.get("dlq_reasons")),
        ("restart -> first output (s)", _fmt(fig.get("recovery_first_output_s"))),
        ("restart -> partition.assigned (s)", _fmt(fig.get("recovery_assigned_s"))),
        ("final exit codes (SIGTERM)", fig.get("final_exit_codes")),
        ("  still running 60 s after SIGTERM", fig.get("sigterm_ignored")),
        ("stuck transactional calls (exit 3)", fig.get("stuck_txn_calls")),
        ("available-now round: exit codes", fig.get("finish_exit_codes")),
        ("instances that never finish", fig.get("never_finished")),
        ("seconds", fig.get("seconds")),
        ("verdict", "OK" if fig.get("ok") else "FAILED"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)} | {value}" for name, value in rows)


def _fmt(d: dict | None) -> str:
    if not d or not d.get("n"):
        return "n=0"
    return f"n={d['n']} min={d['min']} median={d['median']} p90={d['p90']} max={d['max']}"


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def _s(row: dict | None) -> list | None:
    return None if row is None else sorted(row.items())
