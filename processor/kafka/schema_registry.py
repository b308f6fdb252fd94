"""Avro in the Confluent wire format, with schemas registered in a Schema Registry.

Subjects follow TopicNameStrategy (`<topic>-key`, `<topic>-value`); a subject's compatibility is
set to BACKWARD when txbuffer first registers it. Registration is retried with exponential
backoff; when the registry stays unreachable, RegistryUnavailable says where and why, and nothing
is produced: a record is serialized only once its schema has an id. `mock://` URLs use
confluent-kafka's in-process mock registry (tests).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from processor.core.debezium.avro import to_avro, to_avro_value

log = structlog.get_logger(__name__)

COMPATIBILITY = "BACKWARD"


class RegistryUnavailable(RuntimeError):
    """The Schema Registry did not answer after every retry; the message has the URL and the last error."""


class SchemaRejected(ValueError):
    """The registry refused a schema (for example, not BACKWARD compatible with the previous version)."""


def _http_status(exc: SchemaRegistryError) -> int:
    return int(getattr(exc, "http_status_code", 0) or 0)


class AvroRecordSerializer:
    """Serializes Connect-level keys and values (processor.core.debezium) as registered Avro."""

    def __init__(
        self,
        url: str,
        attempts: int = 8,
        backoff_s: float = 0.25,
        max_backoff_s: float = 8.0,
        client: SchemaRegistryClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.url = url
        # Our own retry loop does the backoff, so the client makes one attempt per call.
        self.client = client or SchemaRegistryClient.new_client({"url": url, "max.retries": 0})
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep
        self._serializers: dict[tuple[str, str], AvroSerializer] = {}
        self._subjects_configured: set[str] = set()

    def serialize(self, topic: str, field: str, connect_schema: dict | None, payload: Any) -> bytes | None:
        """field: "key" or "value". A None payload (a null key, a tombstone) stays None."""
        if payload is None or connect_schema is None:
            return None
        schema_str = json.dumps(to_avro(connect_schema), sort_keys=True)
        serializer = self._serializers.get((topic + "-" + field, schema_str))
        if serializer is None:
            serializer = self._register(topic + "-" + field, schema_str)
        kind = MessageField.KEY if field == "key" else MessageField.VALUE
        return serializer(to_avro_value(connect_schema, payload), SerializationContext(topic, kind))

    def _register(self, subject: str, schema_str: str) -> AvroSerializer:
        schema = Schema(schema_str, "AVRO")
        schema_id = self._with_retries(subject, lambda: self._register_once(subject, schema))
        # The client now caches this schema's id: the serializer's own lookup makes no request.
        serializer = AvroSerializer(self.client, schema_str, conf={"auto.register.schemas": True})
        self._serializers[(subject, schema_str)] = serializer
        log.info("schema_registry.registered", subject=subject, schema_id=schema_id, url=self.url)
        return serializer

    def _register_once(self, subject: str, schema: Schema) -> int:
        if subject not in self._subjects_configured:
            if not isinstance(self.client, MockSchemaRegistryClient):  # the mock checks no compatibility
                self.client.set_compatibility(subject_name=subject, level=COMPATIBILITY)
            self._subjects_configured.add(subject)
        return self.client.register_schema(subject, schema)

    def _with_retries(self, subject: str, call: Callable[[], int]) -> int:
        delay = self.backoff_s
        last: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except SchemaRegistryError as exc:
                if 400 <= _http_status(exc) < 500 and _http_status(exc) != 429:
                    raise SchemaRejected(f"registry {self.url} refused the schema of {subject}: {exc}") from exc
                last = exc
            except Exception as exc:  # connection refused, DNS, timeouts: httpx raises many types
                last = exc
            log.warning(
                "schema_registry.retry", subject=subject, attempt=attempt, of=self.attempts, error=str(last)[:200]
            )
            if attempt < self.attempts:
                self.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
        raise RegistryUnavailable(
            f"Schema Registry {self.url} unreachable: registering {subject} failed {self.attempts} times; "
            f"last error: {type(last).__name__}: {last}"
        )
