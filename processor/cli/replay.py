"""`txbuffer replay oracle|ibmi FILE`: map recorded source-log rows onto the raw topic."""

from __future__ import annotations

import structlog

from processor.cli.options import add_connection_flags, config_from_args
from processor.kafka.admin import KafkaUnavailable
from processor.runtime.config import ConfigError

log = structlog.get_logger(__name__)


def register(sub) -> None:
    p = sub.add_parser("replay", help="map recorded log rows (Oracle LogMiner, IBM i journal) onto the raw topic")
    p.add_argument(
        "source", choices=["oracle", "ibmi"], help="oracle: V$LOGMNR_CONTENTS rows; ibmi: DSPJRN outfile entries"
    )
    p.add_argument("file", help="CSV with a header line, or JSON lines")
    add_connection_flags(p)
    p.add_argument("--topic", default=None, help="raw topic (default: the config's raw_topic, txbuffer.raw)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the raw topic if it is created")
    p.add_argument("--dlq-topic", default=None, help="where bad rows go (default: the config's dlq_topic)")
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
    from processor.kafka.rawtopic import RawTopicWriter
    from processor.sources.replay import Replay, parse_key_specs, read_rows

    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        log.error("config.invalid", error=str(exc))
        return 2
    keys = parse_key_specs(args.key)
    if args.source == "oracle":
        from processor.sources.oracle import OracleMapper, join_continuations

        mapper, rows = OracleMapper(keys), join_continuations(read_rows(args.file))
    else:
        from processor.sources.ibmi import IbmiMapper

        mapper, rows = IbmiMapper(keys), read_rows(args.file)
    try:
        writer = RawTopicWriter(
            cfg.kafka_client(),
            args.topic or cfg.raw_topic,
            args.partitions,
            replication_factor=cfg.replication_factor,
            dlq_topic=args.dlq_topic or cfg.dlq_topic,
            source=args.source,
        )
    except KafkaUnavailable as exc:
        log.error("kafka.unavailable", error=str(exc))
        return 3
    summary = Replay(writer, args.source, file=args.file).run(rows, mapper, progress=args.progress)
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
