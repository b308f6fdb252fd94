"""`txbuffer run`: the processor."""

from __future__ import annotations

import structlog

from processor.cli.options import add_config_file_flag, add_field_flag, config_from_args, exit_codes
from processor.runtime.config import ProcessorConfig

log = structlog.get_logger(__name__)

__all__ = ["add_config_flags", "config_from_args", "register", "run"]


def add_config_flags(p) -> None:
    """Flags for every ProcessorConfig field (--state-dir, --available-now, ...); unset means 'not given'."""
    add_config_file_flag(p)
    for name in ProcessorConfig.model_fields:
        add_field_flag(p, name)


def register(sub) -> None:
    p = sub.add_parser("run", help="run the processor (buffer until COMMIT, emit in order)")
    add_config_flags(p)
    p.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="processes in the consumer group on this machine, one core each (processor/cli/workers.py)",
    )
    p.set_defaults(func=run)


@exit_codes
def run(args) -> int:
    from processor.runtime.runner import Runner

    cfg = config_from_args(args)
    if args.workers > 1:
        from processor.cli.workers import supervise

        return supervise(args.argv, cfg, args.workers)
    log.info("run.config", kafka=cfg.kafka_client().redacted(), group=cfg.group, guarantee=cfg.guarantee)
    metrics = None
    if cfg.metrics_port:
        from processor.runtime.metrics import Metrics

        metrics = Metrics()
        port = metrics.start_server(cfg.metrics_host, cfg.metrics_port)
        log.info("metrics.serving", url=f"http://{cfg.metrics_host}:{port}/metrics")
    summary = Runner(cfg, metrics=metrics).run()
    figures = {k: v for k, v in summary.__dict__.items() if k != "phases"}  # logged as run.phases
    log.info("run.done", **figures, events_per_s=round(summary.events_per_s))
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value
