"""The `debezium` output mode: a Sink that writes what a Debezium user expects.

The emitter's one dispatch path hands every sink the same txbuffer ChangeEvent and
TransactionEvent bytes; this sink decodes them and writes Debezium's records instead:
  * each change on <prefix>.<schema>.<table>, keyed by a typed Key record, valued by the Envelope
    (a primary-key update becomes delete + tombstone + create; a delete is followed by a tombstone
    when `tombstones` is on, which is why the emitter's own tombstone is dropped here);
  * BEGIN/END on <prefix>.transaction;
  * a DDL as a schema change event on <prefix>, giving the table a new schema version.
A row that does not fit its table's schema goes to the DLQ with the reason, and counts as delivered
once the dead letter is (when the producer settles, as every output). So does a row whose record is
over the topic's size limit, unless the `oversized` policy is `fail` (Debezium consumers cannot
reassemble chunks, so `chunk` means DLQ here). Serialization failures of the registry (RegistryUnavailable) propagate:
the processor stops before producing any record of that change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import yaml

from processor import __version__ as txbuffer_version
from processor.core import events as ev
from processor.core.contracts import AckCallback, Sink
from processor.core.debezium import catalogue as cat
from processor.core.debezium import connect_json
from processor.core.debezium import source_blocks as sb
from processor.core.debezium.envelope import DebeziumRecords, Record
from processor.core.debezium.schema_change import schema_change_record
from processor.core.debezium.schemas import RowMismatch, SchemaBook, TableSchema
from processor.kafka.admin import ensure_topics
from processor.kafka.produce import RecordTooLarge, is_too_large, produce, record_size
from processor.kafka.sink import KafkaSink
from processor.runtime.config import ConfigError, ProcessorConfig

log = structlog.get_logger(__name__)

Serialize = Callable[[str, str, dict | None, Any], bytes | None]  # (topic, "key"|"value", schema, payload)
DLQ_SOURCE = "debezium-output"


def json_serializer(_topic: str, _field: str, schema: dict | None, payload: Any) -> bytes | None:
    return connect_json.render(schema, payload)


class _FirstFailure:
    """The delivery callback of the records made from one emitter change: the first failure is
    handed on (once); successes need no report, the sink's settlement acknowledges them."""

    __slots__ = ("failed", "on_failure")

    def __init__(self, on_failure: Callable[[Any], None]):
        self.on_failure, self.failed = on_failure, False

    def __call__(self, err: Any, _msg: Any = None) -> None:
        if err is not None and not self.failed:
            self.failed = True
            self.on_failure(err)


class DebeziumSink:
    """Implements core.contracts.Sink with Debezium's topics, keys and envelopes."""

    def __init__(
        self,
        kafka_sink: KafkaSink,
        records: DebeziumRecords,
        serialize: Serialize,
        tombstones: bool = False,
        ensure_topic: Callable[[str], None] | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        self.kafka = kafka_sink
        self.producer = kafka_sink.producer
        self.records = records
        self.serialize = serialize
        self.tombstones = tombstones
        self.ensure_topic = ensure_topic
        self.clock_ms = clock_ms
        self.topics: set[str] = set()
        self.warned: set[tuple[str, int]] = set()
        self.rows_dead_lettered = 0
        self.oversized_rows = 0

    # -- Sink --------------------------------------------------------------------------------------

    def settled(self) -> bool:
        return self.kafka.settled()

    def send_change(self, key: bytes, value: bytes | None, on_ack: AckCallback) -> None:
        if value is None:
            return  # the emitter's tombstone: written with its delete, on the right topic and key
        change = ev.decode_change(value)
        now = self.clock_ms()
        if change["op"] == "ddl":
            out = [self._schema_change(change, now)]
        else:
            try:
                out = self.records.row_records(change, now, self.tombstones)
            except RowMismatch as exc:
                self._dead_letter(key, value, change, str(exc), on_ack)
                return
            self._warn_fallbacks(self.records.book.tables.get(change["source"]["table"] or ""))
        # Serialize everything first: a registry failure must not leave part of a change written.
        encoded = [self._encode(r) for r in out]

        size = max(record_size(k, v) for _, k, v in encoded)
        if size > self.kafka.max_record_bytes:  # nothing of the change is written
            self._too_large(key, value, change, RecordTooLarge(encoded[0][0], size), on_ack)
            return

        def failed(err: Any) -> None:
            if isinstance(err, RecordTooLarge) or is_too_large(err):  # e.g. the topic's limit is lower
                self._too_large(key, value, change, RecordTooLarge(encoded[0][0], size), on_ack)
            else:
                on_ack(err)

        # The dead letter of a refused record is written inside its failure report, before the
        # producer can be settled: the settlement that acknowledges the change covers it too.
        report = _FirstFailure(failed)
        for topic, k, v in encoded:
            try:
                produce(self.producer, topic, v, k, on_delivery=report)
            except RecordTooLarge as exc:  # refused by the client after all: the rest is not written
                report(exc)
                return

    def send_transaction(self, key: bytes, value: bytes, on_ack: AckCallback) -> None:
        record = self.records.transaction(ev.decode_transaction(value))
        topic, k, v = self._encode(record)
        produce(self.producer, topic, v, k, on_delivery=lambda err, _msg: err is not None and on_ack(err))

    # -- pieces ------------------------------------------------------------------------------------

    def _encode(self, record: Record) -> tuple[str, bytes | None, bytes | None]:
        if record.topic not in self.topics:
            if self.ensure_topic is not None:
                self.ensure_topic(record.topic)
            self.topics.add(record.topic)
        key = self.serialize(record.topic, "key", record.key_schema, record.key)
        value = self.serialize(record.topic, "value", record.value_schema, record.value)
        return record.topic, key, value

    def _schema_change(self, change: dict, now: int) -> Record:
        table = change["source"]["table"] or ""
        schema = self.records.book.apply_ddl(table, change.get("ddl"))
        log.info("debezium.schema_change", table=table, version=schema.version if schema else "next row")
        return schema_change_record(self.records, change, schema, now)

    def _too_large(self, key: bytes, value: bytes, change: dict, exc: RecordTooLarge, on_ack: AckCallback) -> None:
        """A row whose Debezium record the broker can never take: fail, or dead-letter it (the
        txbuffer change, which is what the DLQ holds for every output row)."""
        if self.kafka.oversized == "fail":
            on_ack(exc)
            return
        self.oversized_rows += 1
        log.warning("debezium.row_too_large", event_id=change["event_id"], topic=exc.topic, size=exc.size)
        self._dead_letter(key, value, change, str(exc), on_ack, oversized=True)

    def _dead_letter(
        self, key: bytes, value: bytes, change: dict, reason: str, on_ack: AckCallback, oversized: bool = False
    ) -> None:
        table = change["source"]["table"]
        self.rows_dead_lettered += 1
        if not oversized:
            log.warning("debezium.row_mismatch", table=table, event_id=change["event_id"], reason=reason)
        self.kafka.dlq.write(
            key,
            value,
            reason if oversized else f"row does not fit the schema of {table}: {reason}",
            DLQ_SOURCE,
            xid=change["source"]["xid"],
            event_id=change["event_id"],
            on_ack=on_ack,
        )

    def _warn_fallbacks(self, schema: TableSchema | None) -> None:
        if schema is None or not schema.fallbacks or (schema.table, schema.version) in self.warned:
            return
        self.warned.add((schema.table, schema.version))
        types = {n: schema.column(n).type.name for n in schema.fallbacks}  # type: ignore[union-attr]
        log.warning("debezium.unknown_type_as_string", table=schema.table, columns=types)


def load_catalogue(path: Path | None, family: str) -> dict[str, cat.TableColumns]:
    if path is None:
        return {}
    if not Path(path).is_file():
        raise ConfigError(f"column_catalogue: file not found: {path}")
    text = Path(path).read_text()
    try:
        doc = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
        return cat.load(doc, family)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"column_catalogue {path}: {exc}") from None


def make_output(cfg: ProcessorConfig, kafka_sink: KafkaSink, partitions: int = 1) -> Sink:
    """The emitter's Sink for the configured output mode (`envelope`)."""
    if cfg.envelope == "txbuffer":
        return kafka_sink
    serialize: Serialize
    if cfg.serialization == "avro":
        if not cfg.schema_registry_url:
            raise ConfigError("serialization avro needs schema_registry_url (--schema-registry-url)")
        from processor.kafka.schema_registry import AvroRecordSerializer

        serialize = AvroRecordSerializer(cfg.schema_registry_url).serialize
    else:
        serialize = json_serializer
    ctx = sb.SourceContext(
        cfg.debezium_connector, cfg.topic_prefix, cfg.debezium_database or cfg.topic_prefix, txbuffer_version
    )
    book = SchemaBook(load_catalogue(cfg.column_catalogue, cfg.debezium_connector))
    client = cfg.kafka_client()

    def ensure_topic(topic: str) -> None:
        ensure_topics(client, {topic: partitions}, cfg.replication_factor)

    log.info(
        "debezium.output", prefix=cfg.topic_prefix, serialization=cfg.serialization, connector=cfg.debezium_connector
    )
    if cfg.ordering != "global":
        # Debezium consumers apply a table topic in order: two transactions on different raw
        # partitions that touch one row reach it in commit order only with ordering: global.
        log.warning("debezium.per_partition_ordering", hint="set ordering: global for per-row commit order")
    return DebeziumSink(kafka_sink, DebeziumRecords(ctx, book), serialize, cfg.tombstones, ensure_topic)
