"""`txbuffer replay oracle|ibmi FILE`: map recorded source-log rows onto the raw topic."""

from __future__ import annotations

import structlog

from processor.cli.options import add_connection_flags, add_raw_topic_flags, exit_codes, raw_topic_writer

log = structlog.get_logger(__name__)


def register(sub) -> None:
    p = sub.add_parser("replay", help="map recorded log rows (Oracle LogMiner, IBM i journal) onto the raw topic")
    p.add_argument(
        "source", choices=["oracle", "ibmi"], help="oracle: V$LOGMNR_CONTENTS rows; ibmi: DSPJRN outfile entries"
    )
    p.add_argument("file", help="CSV with a header line, or JSON lines")
    add_connection_flags(p)
    add_raw_topic_flags(p)
    p.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="TABLE=COL[,COL]",
        help="primary-key columns of a table (repeatable); default: ID, else ROWID/RRN",
    )
    p.add_argument(
        "--format",
        choices=["auto", "rows", "logminer-csv"],
        default="auto",
        help="oracle only: rows (CSV or JSON lines with V$LOGMNR_CONTENTS column names), logminer-csv "
        "(a SQL*Plus/SQLcl CSV spool of the view, see docs/sources.md); auto decides from the heading",
    )
    p.add_argument("--progress", action="store_true", default=None, help="force the progress bar on")
    p.set_defaults(func=run)


@exit_codes
def run(args) -> int:
    from processor.sources.replay import Replay, parse_key_specs, read_rows

    keys = parse_key_specs(args.key)
    if args.source == "oracle":
        from processor.runtime.config import ConfigError
        from processor.sources.logminer_csv import ExportFormatError, LogMinerExport, detect_format
        from processor.sources.oracle import OracleMapper, join_continuations

        fmt = detect_format(args.file) if args.format == "auto" else args.format
        try:
            source_rows = LogMinerExport(args.file) if fmt == "logminer-csv" else read_rows(args.file)
        except ExportFormatError as exc:
            raise ConfigError(str(exc)) from None  # nothing written yet: exit 2 with the reason
        log.info("replay.format", file=args.file, format=fmt)
        mapper, rows = OracleMapper(keys), join_continuations(source_rows)
    else:
        from processor.sources.ibmi import IbmiMapper

        mapper, rows = IbmiMapper(keys), read_rows(args.file)
    writer = raw_topic_writer(args, source=args.source)
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
