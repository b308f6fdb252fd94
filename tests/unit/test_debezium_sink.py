"""DebeziumSink's bookkeeping: a change is acknowledged by the producer's settlement however many
records it becomes, and fails once; the DLQ path (rows that do not fit, rows over the size limit),
the emitter's own tombstones, and nothing produced when serialization fails. The producer is an
in-memory recorder that reports failures only, as delivery.report.only.error does (the broker
path is tests/integration/test_debezium_output.py)."""

import pytest
from confluent_kafka import KafkaError

from processor.core import events as ev
from processor.core.debezium import source_blocks as sb
from processor.core.debezium.envelope import DebeziumRecords
from processor.core.debezium.schemas import SchemaBook
from processor.kafka.produce import RecordTooLarge
from processor.kafka.sink import KafkaSink
from processor.runtime.config import ConfigError, load_config
from processor.runtime.debezium_sink import DebeziumSink, json_serializer, make_output


class Message:
    def __init__(self, key, value):
        self._key, self._value = key, value

    def key(self):
        return self._key

    def value(self):
        return self._value


class RecordingProducer:
    def __init__(self):
        self.records, self.pending = [], []

    def produce(self, topic, value=None, key=None, on_delivery=None, headers=None, **_):
        self.records.append((topic, key, value, dict(headers or [])))
        self.pending.append((on_delivery, Message(key, value)))

    def __len__(self):
        return len(self.pending)

    def deliver_all(self, err=None):
        """Every queued record delivered (no report) or failed with err (reported)."""
        pending, self.pending = self.pending, []
        for callback, msg in pending:
            if err is not None and callback is not None:
                callback(err, msg)

    def poll(self, _timeout=0):
        return 0


def _change_bytes(op, key, before=None, after=None, seq=0):
    return ev.encode_change(
        {
            "event_id": f"1:10:7:{seq}",
            "op": op,
            "ts_ms": 1,
            "key": key,
            "before": before,
            "after": after,
            "ddl": None,
            "source": {
                "table": "app.t",
                "xid": "7",
                "seq": seq,
                "scn": 9,
                "commit_scn": 10,
                "commit_ts_ms": 1,
                "thread": 1,
                "user": None,
                "row_id": None,
                "attrs": {},
            },
            "transaction": {"id": "7", "total_order": seq + 1, "data_collection_order": seq + 1},
        }
    )


def _sink(serialize=json_serializer, tombstones=True):
    producer = RecordingProducer()
    kafka = KafkaSink(producer, "changes", "transactions", "dlq")
    records = DebeziumRecords(sb.SourceContext("postgresql", "p", "db", "t"), SchemaBook())
    return DebeziumSink(kafka, records, serialize, tombstones, clock_ms=lambda: 5), producer


def test_a_change_is_acknowledged_by_settlement_however_many_records_it_becomes_and_fails_once():
    sink, producer = _sink()
    acks = []
    sink.send_change(b"k", _change_bytes("c", {"id": 1}, after={"id": 1, "v": "a"}), acks.append)
    sink.send_change(b"k", _change_bytes("d", {"id": 1}, before={"id": 1}, seq=1), acks.append)
    assert [r[0] for r in producer.records] == ["p.app.t", "p.app.t", "p.app.t"]  # c, d, tombstone
    assert producer.records[2][2] is None
    assert not sink.settled()
    producer.deliver_all()
    assert sink.settled() and acks == []  # no report per record: the settlement acknowledges
    sink.send_change(b"k", None, acks.append)  # the emitter's tombstone: already written with its delete
    assert sink.settled() and acks == [] and len(producer.records) == 3
    sink.send_change(b"k", _change_bytes("d", {"id": 1}, before={"id": 1}, seq=2), acks.append)
    producer.deliver_all(KafkaError(KafkaError._MSG_TIMED_OUT))  # the delete and its tombstone fail
    assert [str(e) for e in acks] == [str(KafkaError(KafkaError._MSG_TIMED_OUT))]  # the change fails once


def test_a_row_that_does_not_fit_goes_to_the_dlq_and_acks_with_its_dead_letter():
    sink, producer = _sink()
    acks = []
    sink.send_change(b"k", _change_bytes("c", {"id": 1}, after={"id": 1}), acks.append)
    bad = _change_bytes("c", {"id": "one"}, after={"id": "one"}, seq=1)
    sink.send_change(b"k2", bad, acks.append)
    topic, key, value, headers = producer.records[-1]
    assert (topic, key, value) == ("dlq", b"k2", bad)
    assert headers["source"] == b"debezium-output" and b"key column 'id'" in headers["reason"]
    assert not sink.settled()
    producer.deliver_all()
    assert sink.settled() and acks == [] and sink.rows_dead_lettered == 1


def test_a_serialization_failure_produces_nothing_of_that_change():
    def failing(topic, field, schema, payload):
        if field == "value":
            raise RuntimeError("registry down")
        return b"key"

    sink, producer = _sink(failing)
    with pytest.raises(RuntimeError, match="registry down"):
        sink.send_change(b"k", _change_bytes("c", {"id": 1}, after={"id": 1}), lambda err: None)
    assert producer.records == []


def test_make_output_selects_the_mode_and_checks_the_registry_setting():
    producer = RecordingProducer()
    kafka = KafkaSink(producer, "changes", "transactions", "dlq")
    assert make_output(load_config(env={}), kafka) is kafka
    with pytest.raises(ConfigError, match="schema_registry_url"):
        make_output(load_config(env={}, overrides={"envelope": "debezium", "serialization": "avro"}), kafka)
    cfg = load_config(env={"TXBUFFER_ENVELOPE": "debezium", "TXBUFFER_TOPIC_PREFIX": "inv"})
    out = make_output(cfg, kafka)
    assert isinstance(out, DebeziumSink) and out.records.ctx.topic_prefix == "inv"


def _big_sink(oversized: str, limit: int = 2_000):
    sink, producer = _sink()
    sink.kafka.oversized, sink.kafka.max_record_bytes = oversized, limit
    return sink, producer


def test_a_row_over_the_size_limit_goes_to_the_dlq_with_the_reason_and_nothing_of_it_is_written():
    sink, producer = _big_sink("dlq")
    acks = []
    big = _change_bytes("c", {"id": 1}, after={"id": 1, "v": "x" * 5_000})
    sink.send_change(b"k", big, acks.append)
    assert [r[0] for r in producer.records] == ["dlq"]
    _, key, value, headers = producer.records[0]
    assert (key, value) == (b"k", big) and b"record too large for p.app.t" in headers["reason"]
    producer.deliver_all()
    assert sink.settled() and acks == [] and sink.oversized_rows == 1


def test_chunk_means_dlq_for_debezium_records_and_fail_fails_the_change():
    sink, producer = _big_sink("chunk")
    acks = []
    sink.send_change(b"k", _change_bytes("c", {"id": 1}, after={"id": 1, "v": "x" * 5_000}), acks.append)
    producer.deliver_all()
    assert [r[0] for r in producer.records] == ["dlq"] and acks == [] and sink.settled()
    sink, producer = _big_sink("fail")
    sink.send_change(b"k", _change_bytes("c", {"id": 1}, after={"id": 1, "v": "x" * 5_000}), acks.append)
    assert producer.records == [] and isinstance(acks[-1], RecordTooLarge)


def test_a_row_the_broker_refuses_as_too_large_is_dead_lettered_after_the_refusal():
    sink, producer = _big_sink("dlq", limit=1_000_000)  # the producer lets it through, the topic does not
    acks = []
    sink.send_change(b"k", _change_bytes("c", {"id": 1}, after={"id": 1, "v": "x" * 5_000}), acks.append)
    assert [r[0] for r in producer.records] == ["p.app.t"]
    producer.deliver_all(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    # The dead letter is queued inside the refusal's report: the producer is not settled before it is.
    assert [r[0] for r in producer.records] == ["p.app.t", "dlq"] and acks == [] and not sink.settled()
    producer.deliver_all()
    assert sink.settled() and acks == [] and sink.oversized_rows == 1
