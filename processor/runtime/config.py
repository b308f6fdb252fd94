"""The one typed configuration model, used by the CLI, the environment and the config file alike.

Precedence: command-line flags > environment (TXBUFFER_<FIELD>) > YAML file > defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ENV_PREFIX = "TXBUFFER_"


class ConfigError(ValueError):
    """A configuration value that is missing, unknown or invalid; the message names the field."""


class ProcessorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    raw_topic: str = "txbuffer.raw"
    changes_topic: str = "txbuffer.changes"
    transactions_topic: str = "txbuffer.transactions"
    dlq_topic: str = "txbuffer.dlq"
    outcomes_topic: str = Field(
        "txbuffer.outcomes",
        description="internal: outcomes of transactions that "
        "emitted nothing, to rebuild the completed index on an empty disk",
    )
    group: str = "txbuffer"
    state_dir: Path = Path("./state")
    guarantee: Literal["at_least_once_dedup", "exactly_once"] = "at_least_once_dedup"
    ordering: Literal["partition", "global"] = "partition"
    available_now: bool = False
    output_partitions: int = Field(0, ge=0, description="partitions of created output topics; 0 = same as raw")
    tombstones: bool = Field(False, description="write a null-value record after each delete (compacted topics)")
    include_users: frozenset[str] = frozenset()
    exclude_users: frozenset[str] = frozenset()
    include_clients: frozenset[str] = frozenset()
    exclude_clients: frozenset[str] = frozenset()
    include_tables: frozenset[str] = frozenset()
    exclude_tables: frozenset[str] = frozenset()
    max_batch: int = Field(5000, ge=1, le=1_000_000, description="max events consumed per poll batch")
    commit_interval_ms: int = Field(1000, ge=10, description="how often the low watermark is committed")
    completed_index_min_entries: int = Field(
        10000, ge=0, description="completed XIDs kept even below the low watermark"
    )
    lost_state_policy: Literal["fail", "skip"] = "fail"
    max_open_age_ms: int = Field(
        0, ge=0, description="abandon transactions open longer than this (source time); 0 = never"
    )
    max_hold_ms: int = Field(
        0, ge=0, description="global ordering: release a held transaction after this long; 0 = never"
    )
    stall_warn_ms: int = Field(30000, ge=0, description="warn when a partition watermark is stuck this long")
    transactional_id: str = Field(
        "", description="exactly_once: the producer's transactional.id; default <group>-<hostname>"
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus endpoint port; 0 = off")
    metrics_host: str = "127.0.0.1"

    @field_validator(
        "include_users",
        "exclude_users",
        "include_clients",
        "exclude_clients",
        "include_tables",
        "exclude_tables",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(v.strip() for v in value.split(",") if v.strip())
        return value


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    fields = ProcessorConfig.model_fields
    values = {}
    for name, raw in env.items():
        if name.startswith(ENV_PREFIX):
            field = name[len(ENV_PREFIX) :].lower()
            if field in fields:
                values[field] = raw
    return values


def load_config(
    file: str | Path | None = None, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> ProcessorConfig:
    """Merge file < env < overrides (None values in overrides mean "not given") and validate."""
    merged: dict[str, Any] = {}
    if file:
        path = Path(file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping, not {type(loaded).__name__}")
        merged.update({k.replace("-", "_"): v for k, v in loaded.items()})
    merged.update(_env_values(os.environ if env is None else env))
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return ProcessorConfig(**merged)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from None
