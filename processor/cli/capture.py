"""`txbuffer capture postgres`: stream a live PostgreSQL database onto the raw topic."""

from __future__ import annotations

import signal

import structlog

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
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--topic", default="txbuffer.raw", help="raw topic")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the raw topic if it is created")
    p.add_argument("--ack-interval", type=float, default=0.5, help="seconds between flush + acknowledge rounds")
    p.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds between heartbeats")
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.kafka.rawtopic import RawTopicWriter
    from processor.sources.postgres import CaptureError, PostgresCapture, check_setup

    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    try:
        check_setup(args.dsn, args.slot, args.publication, args.create, tables)
    except CaptureError as exc:
        log.error("capture.setup_failed", error=str(exc))
        return 2
    writer = RawTopicWriter(args.bootstrap, args.topic, args.partitions)
    capture = PostgresCapture(args.dsn, writer, args.slot, args.publication, args.ack_interval, args.heartbeat_interval)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: capture.stop())
    try:
        capture.run()
    finally:
        log.info(
            "capture.stopped",
            events=capture.events,
            acked_lsn=capture.acked_lsn,
            **{f"msg_{k}": v for k, v in sorted(capture.mapper.stats.items())},
        )
    return 0
