"""`txbuffer replay oracle|ibmi FILE`: map recorded source-log rows onto the raw topic."""

from __future__ import annotations

import structlog

log = structlog.get_logger(__name__)


def register(sub) -> None:
    p = sub.add_parser("replay", help="map recorded log rows (Oracle LogMiner, IBM i journal) onto the raw topic")
    p.add_argument(
        "source", choices=["oracle", "ibmi"], help="oracle: V$LOGMNR_CONTENTS rows; ibmi: DSPJRN outfile entries"
    )
    p.add_argument("file", help="CSV with a header line, or JSON lines")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--topic", default="txbuffer.raw", help="raw topic")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the raw topic if it is created")
    p.add_argument("--dlq-topic", default="txbuffer.dlq", help="where bad rows go, with a `reason` header")
    p.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="TABLE=COL[,COL]",
        help="primary-key columns of a table (repeatable); default: ID, else ROWID/RRN",
    )
    p.add_argument("--progress", action="store_true", default=None, help="force the progress bar on")
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.kafka.clients import ensure_topics, make_producer
    from processor.kafka.rawtopic import RawTopicWriter
    from processor.sources.replay import Replay, parse_key_specs, read_rows

    keys = parse_key_specs(args.key)
    if args.source == "oracle":
        from processor.sources.oracle import OracleMapper, join_continuations

        mapper, rows = OracleMapper(keys), join_continuations(read_rows(args.file))
    else:
        from processor.sources.ibmi import IbmiMapper

        mapper, rows = IbmiMapper(keys), read_rows(args.file)
    writer = RawTopicWriter(args.bootstrap, args.topic, args.partitions)
    ensure_topics(args.bootstrap, {args.dlq_topic: 1})
    dlq = make_producer(args.bootstrap)
    summary = Replay(writer, dlq, args.dlq_topic, args.source).run(rows, mapper, progress=args.progress)
    log.info(
        "replay.done",
        source=args.source,
        file=args.file,
        rows=summary.rows,
        events=summary.events,
        dead_letters=summary.dlq,
        by_op=summary.by_op,
        dlq_reasons=summary.reasons,
        **{f"stat_{k}": v for k, v in sorted(mapper.stats.items())},
    )
    return 0
