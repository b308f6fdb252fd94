"""Topic admin: create topics, count partitions, read size limits, and fail fast on a broker that refuses us.

Every call goes through an AdminClient built from the KafkaClientConfig, so TLS and SASL settings
apply. A broker that rejects the credentials or the TLS handshake is reported as KafkaAuthError
with librdkafka's own reason within the call's timeout, instead of a bare time-out.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic, ResourceType

from processor.kafka.client_config import KafkaClientConfig, as_client_config

log = structlog.get_logger(__name__)

BROKER_DEFAULT_REPLICATION = -1  # CreateTopics v4+ (Kafka >= 2.4): use default.replication.factor
_AUTH_CODES = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


class KafkaUnavailable(TimeoutError):
    """The brokers did not answer within the time-out (callers that retry time-outs retry this)."""


class KafkaAuthError(RuntimeError):
    """The brokers refused the connection: wrong credentials, mechanism or TLS trust. Not retried."""


class Admin:
    """An AdminClient that remembers the connection errors librdkafka reports while it works."""

    def __init__(self, client: KafkaClientConfig | str):
        self.client = as_client_config(client)
        self.errors: list[KafkaError] = []
        self.admin: AdminClient = self.client.admin(error_cb=self.errors.append)

    def metadata(self, topic: str | None = None, timeout_s: float = 10.0) -> ClusterMetadata:
        deadline = time.monotonic() + timeout_s
        while True:
            # Short rounds: an authentication failure shows up in error_cb well before the deadline.
            step = max(0.1, min(1.0, deadline - time.monotonic()))
            try:
                return self.admin.list_topics(topic, timeout=step)
            except KafkaException as exc:
                self.raise_if_refused()
                if time.monotonic() >= deadline:
                    raise KafkaUnavailable(
                        f"no answer from Kafka at {self.client.bootstrap} within {timeout_s}s: {exc.args[0].str()}"
                    ) from None

    def raise_if_refused(self) -> None:
        self.admin.poll(0)  # serves error_cb
        refused = [e for e in self.errors if e.code() in _AUTH_CODES]
        if refused:
            raise KafkaAuthError(f"Kafka at {self.client.bootstrap} refused the connection: {refused[-1].str()}")


def check_connection(client: KafkaClientConfig | str, timeout_s: float = 10.0) -> int:
    """Fail fast (KafkaAuthError, KafkaUnavailable) unless the brokers answer; returns the broker count."""
    return len(Admin(client).metadata(timeout_s=timeout_s).brokers)


def partition_count(client: KafkaClientConfig | str, topic: str, timeout_s: float = 10.0) -> int:
    admin = Admin(client)
    meta = admin.metadata(topic, timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise LookupError(f"topic {topic!r} does not exist on {admin.client.bootstrap}")
    return len(meta.partitions)


def ensure_topics(
    client: KafkaClientConfig | str,
    topics: dict[str, int],
    replication_factor: int = BROKER_DEFAULT_REPLICATION,
    timeout_s: float = 30.0,
    config: dict[str, str] | None = None,
) -> None:
    """Create each topic with its partition count unless it exists (existing topics are left as they are).

    replication_factor -1 takes the broker's default.replication.factor.
    """
    admin = Admin(client)
    existing = admin.metadata(timeout_s=timeout_s).topics
    wanted = [
        NewTopic(name, num_partitions=n, replication_factor=replication_factor, config=dict(config or {}))
        for name, n in topics.items()
        if name not in existing
    ]
    if wanted:
        for _name, future in admin.admin.create_topics(wanted, operation_timeout=timeout_s).items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    created = {t.topic: t.num_partitions for t in wanted}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.metadata(timeout_s=timeout_s).topics
        if all(_ready(md.get(name), created.get(name)) for name in topics):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics not visible after {timeout_s}s: {sorted(topics)}")


def _ready(meta: Any, partitions: int | None) -> bool:
    """Visible, with the partitions asked for (when created here) and a leader for each."""
    if meta is None or meta.error is not None:
        return False
    if partitions is not None and len(meta.partitions) != partitions:
        return False
    return all(p.leader >= 0 for p in meta.partitions.values())


def topic_configs(client: KafkaClientConfig | str, topic: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The effective configuration of a topic (its own settings over the broker's defaults)."""
    admin = Admin(client)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout_s)
    return {name: entry.value for name, entry in entries.items()}


def max_message_bytes(client: KafkaClientConfig | str, topics: list[str], timeout_s: float = 10.0) -> int:
    """The smallest max.message.bytes of these topics."""
    return min(int(topic_configs(client, t, timeout_s)["max.message.bytes"]) for t in topics)


def producer_size_limit(client: KafkaClientConfig, topics: list[str]) -> dict[str, int]:
    """Producer settings capping records at the topics' size limit, so an oversized record fails
    alone at produce() (RecordTooLarge) instead of the broker refusing a whole batch. Empty when
    the user set message.max.bytes, or when the topics' config may not be read (no
    DescribeConfigs ACL): librdkafka's own 1,000,000-byte default then applies."""
    if "message.max.bytes" in client.properties:
        return {}
    try:
        return {"message.max.bytes": max_message_bytes(client, topics)}
    except (KafkaException, KeyError, TimeoutError) as exc:
        log.info("kafka.size_limit_unknown", topics=topics, error=str(exc))
        return {}
