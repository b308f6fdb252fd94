"""The one typed configuration model, used by the CLI, the environment and the config file alike.

Precedence: command-line flags > environment (TXBUFFER_<FIELD>) > YAML file > defaults.

Kafka client properties (librdkafka names, e.g. security.protocol) reach every client. They merge,
later winning: the `client_properties` file < the YAML file's `kafka:` mapping <
TXBUFFER_KAFKA_<NAME> variables (SECURITY_PROTOCOL -> security.protocol) < --kafka-config NAME=VALUE.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from processor.kafka.client_config import KafkaClientConfig, env_properties, read_properties_file, redact

ENV_PREFIX = "TXBUFFER_"
KAFKA_ENV_PREFIX = ENV_PREFIX + "KAFKA_"


class ConfigError(ValueError):
    """A configuration value that is missing, unknown or invalid; the message names the field."""


# Records per poll batch. exactly_once commits one Kafka transaction per batch, and each costs the
# broker a fixed amount (offsets, markers on every output partition): 20000 took the steady bench from
# ~125k to ~160k events/s under exactly_once, and cost at_least_once (which defers its flushes under
# a backlog instead, delivery.py) a little CPU. A batch is only full under a backlog, so latency
# below saturation is unchanged (issue 14, docs/benchmarks.md).
MAX_BATCH = 5000
EXACTLY_ONCE_MAX_BATCH = 20000


class ProcessorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    kafka: dict[str, str] = Field(
        default_factory=dict,
        description="Kafka client property for every client, NAME=VALUE (librdkafka names; repeatable)",
    )
    client_properties: Path | None = Field(
        None, description="a Kafka client .properties file (e.g. a mounted Secret); other settings win over it"
    )
    replication_factor: int = Field(
        -1, ge=-1, description="replication factor of topics txbuffer creates; -1 = the broker's default"
    )
    oversized: Literal["dlq", "fail", "chunk"] = Field(
        "dlq",
        description="a record over the size limit: dlq = dead-letter it (outputs: and mark its END); "
        "fail = stop; chunk = outputs split into chunk records (docs/contracts.md), inputs dead-lettered",
    )
    raw_topic: str = "txbuffer.raw"
    changes_topic: str = "txbuffer.changes"
    transactions_topic: str = "txbuffer.transactions"
    dlq_topic: str = "txbuffer.dlq"
    outcomes_topic: str = Field(
        "",
        description="internal: outcomes of transactions that emitted nothing, to rebuild the completed index "
        "on an empty disk; default <transactions_topic>.outcomes",
    )
    group: str = "txbuffer"
    state_dir: Path = Path("./state")
    guarantee: Literal["at_least_once_dedup", "exactly_once"] = "at_least_once_dedup"
    ordering: Literal["partition", "global"] = "partition"
    available_now: bool = False
    available_now_timeout_ms: int = Field(
        120000, ge=0, description="--available-now fails when no partition is assigned this long; 0 = wait forever"
    )
    unassigned_warn_ms: int = Field(
        30000, ge=0, description="warn (logs, status, metric) when this instance holds no partition this long"
    )
    output_partitions: int = Field(0, ge=0, description="partitions of created output topics; 0 = same as raw")
    tombstones: bool = Field(False, description="write a null-value record after each delete (compacted topics)")
    include_users: frozenset[str] = frozenset()
    exclude_users: frozenset[str] = frozenset()
    include_clients: frozenset[str] = frozenset()
    exclude_clients: frozenset[str] = frozenset()
    include_tables: frozenset[str] = frozenset()
    exclude_tables: frozenset[str] = frozenset()
    max_batch: int = Field(
        MAX_BATCH,
        ge=1,
        le=1_000_000,
        description=f"max events consumed per poll batch; unset under exactly_once: {EXACTLY_ONCE_MAX_BATCH}",
    )
    commit_interval_ms: int = Field(1000, ge=10, description="how often the low watermark is committed")
    settle_interval_ms: int = Field(
        20,
        ge=0,
        description="at_least_once under a backlog (full poll batches in a row) on confluent-kafka's producer: "
        "defer settling outputs to the next batch, more in a row while the last settlement is younger than "
        "this, so the loop works while librdkafka delivers (catching up); 0 = settle every batch. The native "
        "producer settles batch by batch without waiting (kafka/settlement.py) and needs no interval",
    )
    output_producer: Literal["auto", "native", "confluent"] = Field(
        "auto",
        description="the outputs' producer: native = librdkafka's C API, failures only reported to Python; "
        "confluent = confluent-kafka's Producer; auto = native unless a callback in the Kafka config or a "
        "missing build needs confluent",
    )
    raw_fetch: Literal["auto", "native", "confluent"] = Field(
        "auto",
        description="how raw records are taken from the consumer: native = librdkafka's fetch queues, no "
        "Message object per record; confluent = confluent-kafka's consume; auto = native unless not built",
    )
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
    # --- output mode (issue 17; processor/runtime/debezium_sink.py, docs/debezium.md) ---
    envelope: Literal["txbuffer", "debezium"] = Field(
        "txbuffer", description="txbuffer = one changes topic; debezium = Debezium's topics, keys and envelope"
    )
    topic_prefix: str = Field("txbuffer", description="debezium: topics are <prefix>.<schema>.<table>")
    serialization: Literal["json", "avro"] = Field(
        "json", description="debezium: json = Connect JsonConverter with schemas; avro = Confluent wire format"
    )
    schema_registry_url: str = Field("", description="debezium + avro: the Schema Registry (mock:// for tests)")
    debezium_connector: Literal["postgresql", "oracle", "ibmi"] = Field(
        "postgresql", description="debezium: whose source block and names to follow"
    )
    debezium_database: str = Field("", description="debezium: source.db; default the topic prefix")
    column_catalogue: Path | None = Field(None, description="debezium: YAML/JSON file of typed columns per table")

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

    @field_validator("kafka", mode="before")
    @classmethod
    def _properties_as_text(cls, value: Any) -> Any:
        # YAML reads `enable.ssl.certificate.verification: false` as a bool; librdkafka wants "false".
        if isinstance(value, Mapping):
            value = {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
            owned = {"bootstrap.servers": "bootstrap", "group.id": "group"}.items()
            for prop, field in owned:
                if prop in value:
                    raise ValueError(f"{prop} is set by the `{field}` setting, not as a client property")
        return value

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (redact(value) if name == "kafka" else value)

    def model_post_init(self, context: Any, /) -> None:
        # The outcomes belong to one pipeline, like its END records: a shared default topic let a
        # second pipeline on the same raw topic take the first one's rolled-back or filtered
        # transactions as finished when it rebuilt its index (and drop them as late events).
        if not self.outcomes_topic:
            object.__setattr__(self, "outcomes_topic", f"{self.transactions_topic}.outcomes")
        if self.guarantee == "exactly_once" and "max_batch" not in self.model_fields_set:
            object.__setattr__(self, "max_batch", EXACTLY_ONCE_MAX_BATCH)

    def kafka_client(self) -> KafkaClientConfig:
        """The connection every Kafka client of this process uses."""
        return KafkaClientConfig(bootstrap=self.bootstrap, properties=dict(self.kafka))


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    fields = ProcessorConfig.model_fields
    values: dict[str, Any] = {}
    for name, raw in env.items():
        if name.startswith(KAFKA_ENV_PREFIX):
            continue  # client properties, merged separately
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
    env = os.environ if env is None else env
    file_kafka = merged.pop("kafka", None) or {}
    if not isinstance(file_kafka, dict):
        raise ConfigError(f"config file {file}: `kafka` must be a mapping of client properties")
    merged.update(_env_values(env))
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    flag_kafka = given.pop("kafka", None) or {}
    merged.update(given)
    merged["kafka"] = {
        **_properties_file(merged.get("client_properties")),
        **file_kafka,
        **env_properties(env, KAFKA_ENV_PREFIX),
        **flag_kafka,
    }
    try:
        return ProcessorConfig(**merged)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from None


def _properties_file(path: Any) -> dict[str, str]:
    if not path:
        return {}
    try:
        return read_properties_file(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"client_properties: {exc}") from None
