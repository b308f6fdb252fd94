"""The processor in `envelope: debezium` mode on a real broker: per-table topics, typed keys, Debezium
envelopes, transaction metadata, schema-change events, tombstones, and the DLQ for rows that do not fit."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor.core import events as ev
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.schema_registry import AvroRecordSerializer
from processor.runtime.runner import Runner

from .processor_kit import Topics, config, read_with_headers

pytestmark = pytest.mark.integration

TABLE = "app.items"


class _Txn:
    """RawEvents of one transaction with increasing seq and scn."""

    scn = 100

    def __init__(self, xid: str):
        self.xid, self.seq, self.events = xid, 0, []
        self.add(ev.BEGIN)

    def add(self, op: str, **fields) -> _Txn:
        _Txn.scn += 1
        self.events.append(ev.raw_event(self.xid, op, self.seq, _Txn.scn, ts_ms=1_700_000_000_000, **fields))
        self.seq += 1
        return self

    def row(self, op: str, key: int | str, before=None, after=None) -> _Txn:
        return self.add(op, table=TABLE, key={"id": key}, before=before, after=after)

    def end(self, op: str = ev.COMMIT) -> list[dict]:
        self.add(op)
        return self.events


def workload() -> list[dict]:
    return [
        *_Txn("1")
        .row(ev.INSERT, 1, after={"id": 1, "name": "one", "qty": 5, "price": 1.5})
        .row(ev.INSERT, 2, after={"id": 2, "name": "two", "qty": None, "price": 2.0})
        .end(),
        *_Txn("2")
        .row(ev.UPDATE, 1, after={"id": 1, "name": "one", "qty": 6, "price": 1.5})
        .row(ev.UPDATE, 3, before={"id": 2}, after={"id": 3, "name": "two", "qty": None, "price": 2.0})
        .row(ev.DELETE, 1, before={"id": 1})
        .end(),
        *_Txn("3").row(ev.INSERT, 9, after={"id": 9, "name": "never", "qty": 1, "price": 0.0}).end(ev.ROLLBACK),
        *_Txn("4")
        .row(ev.INSERT, "x", after={"id": "x", "name": "bad key", "qty": 1, "price": 0.0})
        .row(ev.INSERT, 4, after={"id": 4, "name": "four", "qty": 1, "price": 4.0})
        .end(),
        *_Txn("5")
        .add(ev.DDL, table=TABLE, ddl="ALTER TABLE app.items ADD COLUMN note text")
        .row(ev.INSERT, 5, after={"id": 5, "name": "five", "qty": 1, "price": 5.0, "note": "new"})
        .end(),
    ]


def run_debezium(broker, tmp_path, **overrides) -> tuple[Topics, str]:
    topics = Topics.fresh()
    prefix = f"dbz{uuid.uuid4().hex[:6]}"
    writer = RawTopicWriter(broker.bootstrap, topics.raw, 1)  # one partition: one global commit order
    for event in workload():
        writer.write(event)
    writer.producer.flush(30)
    cfg = config(
        broker.bootstrap,
        topics,
        tmp_path / "state",
        available_now=True,
        envelope="debezium",
        topic_prefix=prefix,
        tombstones=True,
        **overrides,
    )
    summary = Runner(cfg).run()
    assert summary.committed == 4
    return topics, prefix


def _json(raw: bytes | None):
    return None if raw is None else json.loads(raw)


def test_json_mode_writes_debeziums_topics_keys_envelopes_and_metadata(broker, tmp_path):
    topics, prefix = run_debezium(broker, tmp_path, serialization="json")
    rows = [(_json(k), _json(v)) for _, _, k, v, _ in read_with_headers(broker.bootstrap, f"{prefix}.{TABLE}")]
    changes = [(k["payload"], v and v["payload"]["op"]) for k, v in rows]
    assert changes == [
        ({"id": 1}, "c"),
        ({"id": 2}, "c"),
        ({"id": 1}, "u"),
        ({"id": 2}, "d"),  # the primary-key update: delete of the old key, its tombstone, create
        ({"id": 2}, None),
        ({"id": 3}, "c"),
        ({"id": 1}, "d"),
        ({"id": 1}, None),
        ({"id": 4}, "c"),
        ({"id": 5}, "c"),
    ]
    key, first = rows[0]
    assert key["schema"]["name"] == f"{prefix}.app.items.Key"
    assert first["schema"]["name"] == f"{prefix}.app.items.Envelope"
    payload = first["payload"]
    assert payload["after"] == {"id": 1, "name": "one", "qty": 5, "price": 1.5}
    assert payload["source"]["table"] == "items" and payload["source"]["schema"] == "app"
    block = payload["transaction"]
    assert (block["total_order"], block["data_collection_order"]) == (1, 1)
    assert block["id"].startswith("1:")  # PostgreSQL-style "<txId>:<commit LSN>"
    # The DDL widened the schema: the last insert carries the new column.
    assert rows[-1][1]["payload"]["after"]["note"] == "new"
    assert "note" not in rows[0][1]["payload"]["after"]

    tx = [_json(v)["payload"] for _, _, _, v, _ in read_with_headers(broker.bootstrap, f"{prefix}.transaction")]
    ends = [t for t in tx if t["status"] == "END"]
    assert ends[0]["id"] == block["id"]
    assert [t["status"] for t in tx].count("BEGIN") == 4 and len(ends) == 4
    assert ends[1]["event_count"] == 3
    assert ends[1]["data_collections"] == [{"data_collection": TABLE, "event_count": 3}]
    assert ends[2]["event_count"] == 2  # transaction 4: the bad row counts as emitted (to the DLQ)

    ddl = [_json(v)["payload"] for _, _, _, v, _ in read_with_headers(broker.bootstrap, prefix)]
    assert [d["ddl"] for d in ddl] == ["ALTER TABLE app.items ADD COLUMN note text"]

    dead = read_with_headers(broker.bootstrap, topics.dlq)
    assert len(dead) == 1
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in dead[0][4].items()}
    assert headers["source"] == "debezium-output" and headers["xid"] == "4"
    assert "key column 'id'" in headers["reason"] and "app.items" in headers["reason"]
    assert ev.decode_change(dead[0][3])["after"]["id"] == "x"  # the change itself, kept


def test_avro_mode_registers_topic_name_subjects_and_round_trips(broker, tmp_path, monkeypatch):
    client = SchemaRegistryClient.new_client({"url": "mock://it"})
    real_init = AvroRecordSerializer.__init__

    def with_shared_client(self, url, **kw):  # the test reads back through the same in-process mock
        real_init(self, url, client=client, **kw)

    monkeypatch.setattr(AvroRecordSerializer, "__init__", with_shared_client)
    _, prefix = run_debezium(broker, tmp_path, serialization="avro", schema_registry_url="mock://it")
    subjects = set(client.get_subjects())
    assert {f"{prefix}.{TABLE}-key", f"{prefix}.{TABLE}-value", f"{prefix}.transaction-value"} <= subjects
    assert sorted(client.get_versions(f"{prefix}.{TABLE}-value")) == [1, 2]  # the DDL: a second version
    records = read_with_headers(broker.bootstrap, f"{prefix}.{TABLE}")
    decode = AvroDeserializer(client)
    ctx = SerializationContext(f"{prefix}.{TABLE}", MessageField.VALUE)
    values = [decode(v, ctx) for _, _, _, v, _ in records if v is not None]
    assert [v["op"] for v in values] == ["c", "c", "u", "d", "c", "d", "c", "c"]
    assert values[0]["after"] == {"id": 1, "name": "one", "qty": 5, "price": 1.5}
