"""`txbuffer generate`: write a seeded synthetic workload to the raw topic, with its expected output."""

from __future__ import annotations

import sys
import time

import structlog

from processor.cli.options import add_connection_flags, add_raw_topic_flags, exit_codes, raw_topic_writer

log = structlog.get_logger(__name__)


def register(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="write a seeded workload (interleaving, rollbacks, savepoints, LOBs, huge transactions) to the raw topic",
    )
    add_connection_flags(p)
    add_raw_topic_flags(p)
    p.add_argument("--events", type=int, default=200_000, help="event budget (open transactions then finish)")
    p.add_argument("--open-txns", type=int, default=50, help="transactions open at once, interleaved")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rollback-rate", type=float, default=0.1, help="share of transactions rolled back")
    p.add_argument("--savepoint-rate", type=float, default=0.03, help="per step: SAVEPOINT or ROLLBACK TO")
    p.add_argument("--subtxn-abort-rate", type=float, default=0.01, help="per step: open or end a subtransaction")
    p.add_argument("--undo-rate", type=float, default=0.02, help="per Oracle-style change: an undo row follows")
    p.add_argument("--lob-rate", type=float, default=0.2, help="per LOB-table change: fragments follow")
    p.add_argument("--ddl-rate", type=float, default=0.001, help="per step: a DDL change")
    p.add_argument("--keys-per-table", type=int, default=10_000, help="primary-key space of each table")
    p.add_argument("--huge-txn-size", type=int, default=0, help="changes in one huge transaction (0 = none)")
    p.add_argument("--heartbeat-every", type=int, default=1000, help="a HEARTBEAT every N events (0 = none)")
    p.add_argument(
        "--expected-dir",
        default=None,
        help="write expected_changes.jsonl, expected_transactions.jsonl and summary.json here",
    )
    p.add_argument("--progress", action="store_true", default=None, help="force the progress bar on")
    p.set_defaults(func=run)


@exit_codes
def run(args) -> int:
    from tqdm import tqdm

    from processor.testing.generator import WorkloadGenerator

    writer = raw_topic_writer(args, source="generate")
    workload = WorkloadGenerator(
        args.events,
        open_txns=args.open_txns,
        seed=args.seed,
        rollback_rate=args.rollback_rate,
        savepoint_rate=args.savepoint_rate,
        subtxn_abort_rate=args.subtxn_abort_rate,
        undo_rate=args.undo_rate,
        lob_rate=args.lob_rate,
        ddl_rate=args.ddl_rate,
        keys_per_table=args.keys_per_table,
        huge_txn_size=args.huge_txn_size,
        heartbeat_every=args.heartbeat_every,
        expected_dir=args.expected_dir,
    )
    show = sys.stderr.isatty() if args.progress is None else args.progress
    started = time.monotonic()
    with tqdm(total=args.events + args.huge_txn_size, unit="ev", disable=not show, desc="generate") as bar:
        writer.write_all(workload, progress=bar.update, every=1000)
    writer.flush()
    elapsed = time.monotonic() - started
    summary = workload.summary()
    log.info(
        "generate.done",
        topic=writer.topic,
        partitions=writer.partitions,
        records=writer.written,
        oversized=writer.oversized,
        events=summary["events"],
        heartbeats=summary["heartbeats"],
        committed=summary["committed"],
        rolled_back=summary["rolled_back"],
        changes=summary["changes"],
        last_scn=summary["last_scn"],
        seconds=round(elapsed, 2),
        events_per_s=round(summary["events"] / max(elapsed, 1e-9)),
        expected_dir=args.expected_dir,
    )
    return 0
