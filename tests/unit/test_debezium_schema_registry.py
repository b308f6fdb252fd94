"""Avro in the Confluent wire format through confluent-kafka's registry client (mock:// registry).

No runnable Schema Registry is published on the package registries this project can reach (Apicurio
Registry's app is on Maven Central only as a Quarkus library jar, not a runnable distribution), so
the registry side is confluent-kafka's own mock; the unreachable case uses a real closed port.
"""

import decimal
import io
import struct

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor.core.debezium import pg_types
from processor.core.debezium import source_blocks as sb
from processor.core.debezium.avro import to_avro, to_avro_value
from processor.core.debezium.catalogue import Column
from processor.core.debezium.envelope import DebeziumRecords
from processor.core.debezium.schemas import SchemaBook
from processor.kafka.schema_registry import AvroRecordSerializer, RegistryUnavailable


def _records():
    book = SchemaBook()
    cols = (
        Column("id", pg_types.from_oid(23), False),
        Column("price", pg_types.from_oid(1700, ((10 << 16) | 2) + 4)),
        Column("at", pg_types.from_oid(1184)),
        Column("tags", pg_types.from_oid(1009)),
        Column("ratio", pg_types.from_oid(1700)),
    )
    book.set_columns("shop.items", cols, ("id",))
    return DebeziumRecords(sb.SourceContext("postgresql", "srv", "db", "t"), book), book


def _change(after, op="c"):
    return {
        "event_id": "1:10:5:0",
        "op": op,
        "ts_ms": 1,
        "key": {"id": after["id"]},
        "before": None,
        "after": after,
        "ddl": None,
        "source": {
            "table": "shop.items",
            "xid": "5",
            "seq": 0,
            "scn": 9,
            "commit_scn": 10,
            "commit_ts_ms": 1,
            "thread": 1,
            "user": None,
            "row_id": None,
            "attrs": {},
        },
        "transaction": {"id": "5", "total_order": 1, "data_collection_order": 1},
    }


def test_avro_round_trip_in_confluent_wire_format_with_topic_name_subjects():
    client = SchemaRegistryClient.new_client({"url": "mock://roundtrip"})
    ser = AvroRecordSerializer("mock://roundtrip", client=client)
    records, _ = _records()
    after = {"id": 3, "price": "12.50", "at": "2024-01-01 10:00:00+00", "tags": "{a,b}", "ratio": "0.125"}
    rec = records.change(_change(after), 0)
    value = ser.serialize(rec.topic, "value", rec.value_schema, rec.value)
    key = ser.serialize(rec.topic, "key", rec.key_schema, rec.key)
    assert value[0] == 0 and key[0] == 0  # magic byte, then the 4-byte schema id
    assert sorted(client.get_subjects()) == ["srv.shop.items-key", "srv.shop.items-value"]
    value_id = struct.unpack(">I", value[1:5])[0]
    assert client.get_schema(value_id).schema_type == "AVRO"
    decoded = AvroDeserializer(client)(value, SerializationContext(rec.topic, MessageField.VALUE))
    assert decoded["after"]["price"] == decimal.Decimal("12.50")
    assert decoded["after"]["at"] == "2024-01-01T10:00:00Z"
    assert decoded["after"]["tags"] == ["a", "b"]
    assert decoded["after"]["ratio"] == {"scale": 3, "value": b"\x7d"}
    assert decoded["source"]["lsn"] == 9 and decoded["op"] == "c"
    assert AvroDeserializer(client)(key, SerializationContext(rec.topic, MessageField.KEY)) == {"id": 3}


def test_a_new_column_registers_a_second_version_of_the_value_subject():
    client = SchemaRegistryClient.new_client({"url": "mock://versions"})
    ser = AvroRecordSerializer("mock://versions", client=client)
    records, book = _records()
    rec = records.change(_change({"id": 1}), 0)
    ser.serialize(rec.topic, "value", rec.value_schema, rec.value)
    rec2 = records.change(_change({"id": 2, "note": "new column"}), 0)
    ser.serialize(rec2.topic, "value", rec2.value_schema, rec2.value)
    assert book.tables["shop.items"].version == 2
    assert sorted(client.get_versions("srv.shop.items-value")) == [1, 2]
    # BACKWARD: a reader on version 2 reads what version 1 wrote (the new column is an optional field).
    v1 = fastavro.parse_schema(to_avro(rec.value_schema))
    v2 = fastavro.parse_schema(to_avro(rec2.value_schema))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, v1, to_avro_value(rec.value_schema, rec.value))
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, v1, v2)["after"] == {
        "id": 1,
        "price": None,
        "at": None,
        "tags": None,
        "ratio": None,
        "note": None,
    }


def test_unreachable_registry_retries_with_backoff_then_fails_clearly():
    waits = []
    ser = AvroRecordSerializer("http://127.0.0.1:9", attempts=4, backoff_s=0.1, sleep=waits.append)
    records, _ = _records()
    rec = records.change(_change({"id": 1}), 0)
    with pytest.raises(RegistryUnavailable, match=r"127\.0\.0\.1:9 unreachable.*srv\.shop\.items-value failed 4 times"):
        ser.serialize(rec.topic, "value", rec.value_schema, rec.value)
    assert waits == [0.1, 0.2, 0.4]
