"""One typed Kafka connection config: bootstrap servers plus pass-through client properties.

Every client the project builds (processor consumer/producer/admin, sources, generate, replay,
bench, the Spark job's `kafka.*` options) comes from a KafkaClientConfig, so a setting given once
(properties file, TXBUFFER_KAFKA_* environment variable, --kafka-config flag) reaches all of them.
Properties use librdkafka names; java_properties() translates the security ones for JVM clients.
Secrets are never shown: repr() and redacted() mask them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
REDACTED = "***"

# A short session timeout makes a dead member's partitions move in seconds, not 45 s.
CONSUMER_DEFAULTS: dict[str, Any] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    # A partition whose local queue is over queued.min.messages or queued.max.messages.kbytes is not
    # fetched again for this long. librdkafka's default, 1000 ms, stalled a partition read at full
    # speed for ~0.8 s after every burst (the huge transaction buffered at 33k changes/s).
    "fetch.queue.backoff.ms": 10,
}

# murmur2 so that Java producers (the Kafka default partitioner) and ours agree on XID -> partition.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "compression.type": "lz4",
    # Bounded producer memory: a huge transaction's emission waits for room (records leave the queue
    # as the broker acknowledges them) instead of queueing millions of records in librdkafka.
    "queue.buffering.max.messages": 50000,
    "queue.buffering.max.kbytes": 32768,
}

# Property names whose values are credentials or key material.
_SECRET = re.compile(r"password|secret|jaas|token|credential|\.pem$|keystore\.key$|private", re.IGNORECASE)


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy that is safe to log: secret values replaced by ***; callables (callbacks) dropped."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in conf.items() if not callable(v)}


@dataclass(frozen=True, repr=False)
class KafkaClientConfig:
    """Where the brokers are and how to talk to them. Builds every client the project uses."""

    bootstrap: str = DEFAULT_BOOTSTRAP
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "bootstrap.servers" in self.properties:
            raise ValueError("give bootstrap servers as `bootstrap`, not as the property bootstrap.servers")

    def __repr__(self) -> str:
        return f"KafkaClientConfig(bootstrap={self.bootstrap!r}, properties={redact(self.properties)!r})"

    def redacted(self) -> dict[str, Any]:
        return redact(self.base())

    def base(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.properties}

    def consumer_conf(self, group: str, **overrides: Any) -> dict[str, Any]:
        return {**CONSUMER_DEFAULTS, **self.base(), "group.id": group, **overrides}

    def producer_conf(self, **overrides: Any) -> dict[str, Any]:
        return {**PRODUCER_DEFAULTS, **self.base(), **overrides}

    def consumer(self, group: str, **overrides: Any) -> Consumer:
        return Consumer(self.consumer_conf(group, **overrides))

    def producer(self, **overrides: Any) -> Producer:
        return Producer(self.producer_conf(**overrides))

    def admin(self, **overrides: Any) -> AdminClient:
        return AdminClient({**self.base(), **overrides})

    def java_properties(self) -> dict[str, str]:
        """The same settings for a JVM Kafka client (Spark's format("kafka"), Kafka's CLI tools)."""
        return to_java_properties(self.base())

    def spark_options(self) -> dict[str, str]:
        """Options for Spark's Kafka source and sink: each Java client property prefixed `kafka.`."""
        return {f"kafka.{k}": v for k, v in self.java_properties().items()}

    def options(self) -> dict[str, str]:
        """The librdkafka settings as `kafka.`-prefixed options, for the Python data source
        (from_options() reads them back on the executors)."""
        return {f"kafka.{k}": str(v) for k, v in self.base().items()}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaClientConfig:
        """Read back options(): `kafka.bootstrap.servers` and every other `kafka.*` option."""
        props = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        bootstrap = props.pop("bootstrap.servers", None)
        if not bootstrap:
            raise ValueError("option kafka.bootstrap.servers is required")
        return cls(bootstrap, props)


def as_client_config(target: KafkaClientConfig | str) -> KafkaClientConfig:
    """Accept a bare bootstrap string where a KafkaClientConfig is expected (tests, tools)."""
    return target if isinstance(target, KafkaClientConfig) else KafkaClientConfig(bootstrap=target)


# -- parsing the three sources of client properties ----------------------------------------------


def read_properties_file(path: str | Path) -> dict[str, str]:
    """A Java-style .properties file: `key=value` (or `key: value`) lines, `#`/`!` comments."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Kafka client properties file not found: {path}")
    props: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = _split_pair(line)
        if not sep or not key:
            raise ValueError(f"{path}:{n}: expected key=value")
        props[key] = value
    return props


def parse_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """`key=value` strings (repeated --kafka-config flags) -> a dict; later ones win."""
    props: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--kafka-config expects PROPERTY=VALUE, got {pair.split('=')[0]!r}")
        props[key.strip()] = value.strip()
    return props


def env_properties(env: Mapping[str, str], prefix: str = "TXBUFFER_KAFKA_") -> dict[str, str]:
    """TXBUFFER_KAFKA_SECURITY_PROTOCOL=SASL_SSL -> {"security.protocol": "SASL_SSL"}."""
    return {name[len(prefix) :].lower().replace("_", "."): v for name, v in env.items() if name.startswith(prefix)}


def _split_pair(line: str) -> tuple[str, str, str]:
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut < 0:
        return line, "", ""
    return line[:cut].strip(), line[cut], line[cut + 1 :].strip()


# -- librdkafka -> Java client property names ---------------------------------------------------

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka-only names; everything else (security.protocol, ssl.key.password, client.id, ...) is
# spelled the same in both clients and passes through.
_RDKAFKA_ONLY = {
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "enable.ssl.certificate.verification",
    "partitioner",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "batch.num.messages",
    "enable.partition.eof",
    "enable.auto.offset.store",
}


def to_java_properties(conf: Mapping[str, Any]) -> dict[str, str]:
    out = {k: str(v) for k, v in conf.items() if k not in _RDKAFKA_ONLY and not callable(v)}
    mechanism = conf.get("sasl.mechanism") or conf.get("sasl.mechanisms")
    if mechanism:
        out["sasl.mechanism"] = str(mechanism)
    if "sasl.username" in conf and "sasl.jaas.config" not in conf:
        module = _LOGIN_MODULES.get(str(mechanism or "PLAIN").upper())
        if module is None:
            raise ValueError(f"no JAAS login module known for sasl.mechanism={mechanism}; set sasl.jaas.config")
        user, password = _jaas_quote(conf["sasl.username"]), _jaas_quote(conf.get("sasl.password", ""))
        out["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    if "ssl.ca.location" in conf:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(conf["ssl.ca.location"])
    if "ssl.certificate.location" in conf and "ssl.key.location" in conf:
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = Path(conf["ssl.certificate.location"]).read_text()
        out["ssl.keystore.key"] = Path(conf["ssl.key.location"]).read_text()
    if str(conf.get("ssl.endpoint.identification.algorithm", "")).lower() == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    return out


def _jaas_quote(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def make_producer(client: KafkaClientConfig | str, **overrides: Any) -> Producer:
    """An idempotent producer with the project's defaults (murmur2, bounded queue)."""
    return as_client_config(client).producer(**overrides)
