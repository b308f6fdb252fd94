"""Command-line flags shared by every command that talks to Kafka.

All of them read the same typed config (processor.runtime.config): YAML file < TXBUFFER_* env <
these flags, so `--bootstrap`, TXBUFFER_BOOTSTRAP and the Kafka client properties mean the same
thing for run, generate, replay, capture and spark.
"""

from __future__ import annotations

import argparse
from typing import Any

from processor.kafka.client_config import parse_pairs
from processor.runtime.config import ConfigError, ProcessorConfig, load_config

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
