"""KafkaSink's `oversized: chunk` branch (processor/kafka/sink.py): a chunked change is acknowledged
by the settlement that covers every chunk (no report per chunk); a chunk the broker still refuses
sends the change to the DLQ instead, once, and the producer is not settled before the dead letter
is delivered. The producer here applies a size limit, reports failures only (as
delivery.report.only.error does) and delivers on demand; the same branch runs on Apache Kafka in
tests/integration/test_oversized.py."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from processor.core import events as ev
from processor.kafka.chunking import Reassembler, chunk_of
from processor.kafka.sink import KafkaSink
from processor.testing.reference import ReferenceModel

LIMIT = 2_000


class SizeLimitedProducer:
    """Refuses records over LIMIT at produce() as librdkafka does; queues the others."""

    def __init__(self):
        self.records: list[tuple[str, bytes | None, list | None]] = []
        self.pending: list = []

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, headers=None, **_):
        if value is not None and len(value) + len(key or b"") > LIMIT:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.records.append((topic, value, headers))
        self.pending.append(on_delivery)

    def __len__(self):
        return len(self.pending)

    def poll(self, timeout=None):
        return 0

    def deliver(self, n: int, err: KafkaError | None = None) -> None:
        """The first n queued records delivered (no report) or failed with err (reported)."""
        callbacks = self.pending[:n]
        del self.pending[:n]
        for callback in callbacks:
            if err is not None:
                callback(err, None)


def _big_change() -> bytes:
    row = {"table": "s.docs", "key": {"ID": 1}}
    events = [
        ev.raw_event("t1", ev.BEGIN, 0, 1),
        ev.raw_event(
            "t1", ev.INSERT, 1, 2, after={"ID": 1, "DOC": "".join(chr(65 + i % 26) for i in range(9000))}, **row
        ),
        ev.raw_event("t1", ev.COMMIT, 2, 3),
    ]
    model = ReferenceModel().feed_all((0, offset, e) for offset, e in enumerate(events))
    (change,) = model.all_committed()[0].changes
    return ev.encode_change(change)


def test_a_chunked_change_is_acknowledged_when_the_producer_settles_after_its_last_chunk():
    producer = SizeLimitedProducer()
    sink = KafkaSink(producer, "changes", "txns", "dlq", "chunk", max_record_bytes=LIMIT)
    value, acks = _big_change(), []
    sink.send_change(b"s.docs|{}", value, acks.append)

    chunks = [(v, h) for topic, v, h in producer.records if topic == "changes"]
    assert len(chunks) == len(producer.pending) >= 5
    producer.deliver(len(chunks) - 1)
    assert not sink.settled()  # the emit cursor may not pass the change yet
    producer.deliver(1)
    assert sink.settled() and acks == []  # no failure: acknowledged by the settlement
    r = Reassembler()
    results = [r.add(0, h, v) for v, h in chunks]
    assert [whole for done, whole in results if done] == [value]  # the reassembly rule gives it back
    assert {chunk_of(h)[2] for _, h in chunks} == {ev.decode_change(value)["event_id"]}
    assert (sink.chunked_changes, sink.oversized_changes) == (1, 0)


def test_a_chunk_the_broker_refuses_sends_the_change_to_the_dlq_once():
    producer = SizeLimitedProducer()
    sink = KafkaSink(producer, "changes", "txns", "dlq", "chunk", max_record_bytes=LIMIT)
    value, acks = _big_change(), []
    sink.send_change(b"s.docs|{}", value, acks.append)
    n = len(producer.pending)

    producer.deliver(1)
    producer.deliver(1, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))  # e.g. a topic limit below the producer's
    producer.deliver(1, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))  # a second refusal changes nothing
    assert acks == []
    dead = [(v, dict(h)) for topic, v, h in producer.records if topic == "dlq"]
    assert len(dead) == 1 and dead[0][1]["xid"] == b"t1" and b"record too large" in dead[0][1]["reason"]
    producer.deliver(n - 3)  # the other chunks
    assert not sink.settled()  # the dead letter is still queued
    producer.deliver(1)  # the dead letter
    assert sink.settled() and acks == []
    assert (sink.chunked_changes, sink.oversized_changes) == (1, 1)
