"""`txbuffer run`: the processor."""

from __future__ import annotations

import structlog

from processor.runtime.config import ConfigError, ProcessorConfig, load_config

log = structlog.get_logger(__name__)


def add_config_flags(p) -> None:
    """Flags for every ProcessorConfig field (--state-dir, --available-now, ...); unset means 'not given'."""
    p.add_argument("--config", help="YAML config file (keys are the field names below)")
    for name, field in ProcessorConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            p.add_argument(flag, dest=name, action="store_true", default=None, help=field.description)
        else:
            p.add_argument(flag, dest=name, default=None, help=field.description)


def config_from_args(args) -> ProcessorConfig:
    overrides = {name: getattr(args, name, None) for name in ProcessorConfig.model_fields}
    return load_config(args.config, overrides=overrides)


def register(sub) -> None:
    p = sub.add_parser("run", help="run the processor (buffer until COMMIT, emit in order)")
    add_config_flags(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.runtime.runner import Runner

    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        log.error("config.invalid", error=str(exc))
        return 2
    metrics = None
    if cfg.metrics_port:
        from processor.runtime.metrics import Metrics

        metrics = Metrics()
        port = metrics.start_server(cfg.metrics_host, cfg.metrics_port)
        log.info("metrics.serving", url=f"http://{cfg.metrics_host}:{port}/metrics")
    runner = Runner(cfg, metrics=metrics)
    summary = runner.run()
    log.info("run.done", **{k: v for k, v in summary.__dict__.items()}, events_per_s=round(summary.events_per_s))
    return 0
