"""Command-line flags shared by every command that talks to Kafka.

All of them read the same typed config (processor.runtime.config): YAML file < TXBUFFER_* env <
these flags, so `--bootstrap`, TXBUFFER_BOOTSTRAP and the Kafka client properties mean the same
thing for run, generate, replay, capture and spark.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import KafkaException

from processor.kafka.admin import KafkaAuthError, KafkaUnavailable
from processor.kafka.client_config import parse_pairs
from processor.kafka.delivery import is_fenced
from processor.runtime.config import ConfigError, ProcessorConfig, load_config
from processor.runtime.liveness import AvailableNowTimeout
from processor.store.rocks import StoreWriteError

log = structlog.get_logger(__name__)

EXIT_CONFIG = 2
EXIT_KAFKA_UNAVAILABLE = 3
# The state store refused a write (disk full, I/O error); no input offset past what it holds was
# committed, so a restart once there is space resumes with nothing lost.
EXIT_STATE_STORE = 4
# exactly_once: another instance with the same transactional.id fenced this one (a zombie); it must
# stop and never commit again. Not a crash: the successor owns the work.
EXIT_FENCED = 5
# --available-now found no way to finish within available_now_timeout_ms (e.g. never assigned).
EXIT_AVAILABLE_NOW_TIMEOUT = 6

# Config fields every Kafka-using command accepts; `run` accepts all fields.
CONNECTION_FIELDS = ("bootstrap", "kafka", "client_properties", "replication_factor")


def add_field_flag(p: argparse.ArgumentParser, name: str) -> None:
    field = ProcessorConfig.model_fields[name]
    if name == "kafka":
        p.add_argument(
            "--kafka-config", dest="kafka", action="append", default=None, metavar="NAME=VALUE", help=field.description
        )
    elif field.annotation is bool:
        p.add_argument(
            "--" + name.replace("_", "-"), dest=name, action="store_true", default=None, help=field.description
        )
    else:
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None, help=field.description)


def add_config_file_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML config file (keys are the config field names; `kafka:` maps properties)")


def add_connection_flags(p: argparse.ArgumentParser) -> None:
    """--config, --bootstrap, --kafka-config, --client-properties, --replication-factor."""
    add_config_file_flag(p)
    for name in CONNECTION_FIELDS:
        add_field_flag(p, name)


def config_from_args(args: argparse.Namespace) -> ProcessorConfig:
    """The typed config: file < env < the flags that were given. Raises ConfigError."""
    overrides: dict[str, Any] = {name: getattr(args, name, None) for name in ProcessorConfig.model_fields}
    if overrides.get("kafka") is not None:
        try:
            overrides["kafka"] = parse_pairs(overrides["kafka"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return load_config(getattr(args, "config", None), overrides=overrides)


def add_raw_topic_flags(p: argparse.ArgumentParser) -> None:
    """Where a source command writes: --topic, --partitions (if created), --dlq-topic."""
    p.add_argument("--topic", default=None, help="raw topic (default: the config's raw_topic, txbuffer.raw)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the raw topic if it is created")
    p.add_argument("--dlq-topic", default=None, help="bad rows and oversized events (default: the config's dlq_topic)")


def raw_topic_writer(args: argparse.Namespace, source: str) -> Any:
    """A RawTopicWriter from the shared config and the raw-topic flags. Raises ConfigError or KafkaUnavailable."""
    from processor.kafka.rawtopic import RawTopicWriter

    cfg = config_from_args(args)
    return RawTopicWriter(
        cfg.kafka_client(),
        args.topic or cfg.raw_topic,
        args.partitions,
        replication_factor=cfg.replication_factor,
        dlq_topic=args.dlq_topic or cfg.dlq_topic,
        source=source,
        oversized=cfg.oversized,
    )


def exit_codes(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A bad setting exits 2, a broker that refuses or does not answer exits 3, a state store that refuses
    a write (disk full) exits 4, a fenced exactly_once producer exits 5, an --available-now run that
    cannot finish in time exits 6, each with the reason logged."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except ConfigError as exc:
            log.error("config.invalid", error=str(exc))
            return EXIT_CONFIG
        except (KafkaAuthError, KafkaUnavailable) as exc:  # credentials, TLS trust or address: say so, do not hang
            log.error("kafka.unavailable", error=str(exc))
            return EXIT_KAFKA_UNAVAILABLE
        except StoreWriteError as exc:
            log.error("state_store.write_failed", error=str(exc), no_space=exc.no_space, free_bytes=exc.free_bytes)
            return EXIT_STATE_STORE
        except AvailableNowTimeout as exc:
            log.error("run.failed", error_type=type(exc).__name__, error=str(exc))  # liveness logged the details
            return EXIT_AVAILABLE_NOW_TIMEOUT
        except (KafkaException, RuntimeError) as exc:  # last: the typed errors above are RuntimeErrors too
            if not is_fenced(exc):
                raise
            log.error("exactly_once.fenced", error=str(exc), hint="another instance took over this transactional.id")
            return EXIT_FENCED

    return run
