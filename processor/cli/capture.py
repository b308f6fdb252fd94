"""`txbuffer capture postgres`: snapshot and stream a live PostgreSQL database onto the raw topic.

Exit codes: 0 stopped (or `--snapshot initial_only` done), 2 setup or config error, 3 Kafka
unavailable, 4 lost state (the slot this capture used was dropped), 5 a replication message it cannot
decode (nothing past it is acknowledged).
"""

from __future__ import annotations

import signal
from pathlib import Path

import structlog

from processor.cli.options import EXIT_CONFIG, add_connection_flags, add_raw_topic_flags, exit_codes, raw_topic_writer

EXIT_LOST_STATE = 4
EXIT_UNDECODABLE = 5

log = structlog.get_logger(__name__)


def register(sub) -> None:
    p = sub.add_parser("capture", help="stream a live database's changes onto the raw topic")
    p.add_argument("source", choices=["postgres"], help="postgres: logical replication with pgoutput")
    p.add_argument("--dsn", default="", help="libpq connection string (default: the PG* environment variables)")
    p.add_argument("--slot", default="txbuffer", help="logical replication slot (pgoutput)")
    p.add_argument("--publication", default="txbuffer", help="publication to stream")
    p.add_argument("--tables", default="", help="comma-separated tables for a created publication (default: all)")
    p.add_argument(
        "--no-create",
        dest="create",
        action="store_false",
        help="fail if the slot or publication is missing instead of creating it",
    )
    p.add_argument(
        "--snapshot",
        choices=["initial", "never", "initial_only"],
        default="initial",
        help="initial: read existing rows (op r) when the slot is created, then stream; never: stream only; "
        "initial_only: read existing rows and exit",
    )
    p.add_argument("--snapshot-chunk-rows", type=int, default=4096, help="rows per snapshot chunk (one raw txn)")
    p.add_argument(
        "--toast",
        choices=["carry", "placeholder"],
        default="carry",
        help="unchanged TOAST values: carry the last known value, or Debezium's __debezium_unavailable_value",
    )
    p.add_argument(
        "--state-dir",
        default="",
        help="capture state (slot identity, snapshot progress, last row images); keep it across restarts "
        "(default: .txbuffer/capture-<slot>)",
    )
    add_connection_flags(p)
    add_raw_topic_flags(p)
    p.add_argument("--ack-interval", type=float, default=0.5, help="seconds between flush + acknowledge rounds")
    p.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds between heartbeats")
    p.add_argument("--reconnect-max", type=float, default=30.0, help="longest wait between reconnect attempts (s)")
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port (0 = off)")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics endpoint")
    p.set_defaults(func=run)


@exit_codes
def run(args) -> int:
    from processor.sources.pg_capture import CaptureError, CaptureOptions, PostgresCapture, SlotLost, check_setup
    from processor.sources.pgoutput import PgOutputError

    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    try:
        check_setup(args.dsn, args.publication, args.create, tables)
    except CaptureError as exc:
        log.error("capture.setup_failed", error=str(exc))
        return EXIT_CONFIG
    options = CaptureOptions(
        slot=args.slot,
        publication=args.publication,
        state_dir=Path(args.state_dir or f".txbuffer/capture-{args.slot}"),
        snapshot=args.snapshot,
        toast=args.toast,
        chunk_rows=args.snapshot_chunk_rows,
        create=args.create,
        ack_interval_s=args.ack_interval,
        heartbeat_interval_s=args.heartbeat_interval,
        reconnect_max_s=args.reconnect_max,
    )
    writer = raw_topic_writer(args, source="postgres")
    capture = PostgresCapture(args.dsn, writer, options)
    metrics = None
    if args.metrics_port:
        from processor.sources.pg_metrics import CaptureMetrics

        metrics = CaptureMetrics(capture, args.dsn, args.slot)
        metrics.start_server(args.metrics_host, args.metrics_port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: capture.stop())
    code = 0
    try:
        capture.run()
    except SlotLost as exc:
        log.error("capture.slot_lost", error=str(exc))
        code = EXIT_LOST_STATE
    except CaptureError as exc:
        log.error("capture.setup_failed", error=str(exc))
        code = EXIT_CONFIG
    except PgOutputError as exc:
        # Nothing after the last acknowledged LSN is confirmed: a fixed capture resumes right there.
        log.error("capture.undecodable_message", error=str(exc), acked_lsn=capture.acked_lsn)
        code = EXIT_UNDECODABLE
    finally:
        writer.flush()
        capture.close()
        if metrics is not None:
            metrics.close()
        log.info(
            "capture.stopped",
            events=capture.events,
            snapshot_rows=capture.snapshot_rows,
            acked_lsn=capture.acked_lsn,
            **{f"msg_{k}": v for k, v in sorted(capture.mapper.stats.items())},
        )
    return code
