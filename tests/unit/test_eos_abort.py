"""exactly_once: an aborted batch takes its dead letters with it, so the sink forgets the changes it
had dead-lettered (KafkaSink.transaction_aborted, called by EosRecovery): kept, their reasons would
be counted again in the END of the rewound transaction, or stick to one another instance finishes."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError

from processor.core import events as ev
from processor.core.assemble import transaction_event
from processor.core.txn import Commit, Txn
from processor.kafka.produce import RecordTooLarge
from processor.kafka.sink import KafkaSink
from processor.runtime.eos_recovery import EosRecovery


class Producer:
    """Takes every record; delivery reports are served on flush."""

    def __init__(self):
        self.records: list[tuple[str, bytes | None, list | None]] = []
        self.reports: list = []

    def produce(self, topic, value=None, key=None, *args, headers=None, on_delivery=None, **_):
        self.records.append((topic, value, headers))
        if on_delivery is not None:
            self.reports.append(on_delivery)

    def poll(self, _timeout=None):
        return 0

    def flush(self, _timeout=None):
        while self.reports:
            self.reports.pop(0)(None, None)
        return 0


def end_of(xid: str) -> bytes:
    txn = Txn(0, xid, 0, commit=Commit(10, 0, 1, 5))
    return ev.encode_transaction(transaction_event("END", txn, "partition", 1, {"s.docs": 1}))


def dead_letter_a_change(sink: KafkaSink, xid: str) -> None:
    change = {"source": {"xid": xid}, "event_id": f"1:10:{xid}:1"}
    sink._dead_letter_change(b"k", b"v" * 10, change, RecordTooLarge("changes", 2_000_000), lambda _err: None)


def sent_end(producer: Producer, sink: KafkaSink, xid: str) -> dict:
    sink.send_transaction(xid.encode(), end_of(xid), lambda _err: None)
    topic, value, _ = producer.records[-1]
    assert topic == "transactions"
    return ev.decode_transaction(value)


def parts_with(sink: KafkaSink) -> SimpleNamespace:
    dispatcher = SimpleNamespace(
        committed=[], take_dead_letters=lambda: 0, emitter=SimpleNamespace(errors=[]), sink=sink
    )
    return SimpleNamespace(
        held={},
        to_resume=[],
        cfg=SimpleNamespace(raw_topic="raw"),
        delivery=SimpleNamespace(committed_batches=0),
        dispatcher=dispatcher,
        on_change=lambda: None,
        pause_finished=lambda consumer, starts: None,
    )


def test_without_an_abort_the_end_counts_its_dead_lettered_change():
    producer = Producer()
    sink = KafkaSink(producer, "changes", "transactions", "dlq")
    dead_letter_a_change(sink, "big")
    assert sent_end(producer, sink, "big")["reason"].startswith("1 change(s) dead-lettered: record too large")


def test_after_an_abort_the_rewound_transaction_counts_its_dead_lettered_change_once():
    producer = Producer()
    sink = KafkaSink(producer, "changes", "transactions", "dlq")
    dead_letter_a_change(sink, "big")  # in the batch that is then aborted, before its END
    EosRecovery(parts_with(sink), consumer=None, producer=producer).recover(
        KafkaError(KafkaError.ILLEGAL_GENERATION, "moved on", txn_requires_abort=True)
    )
    dead_letter_a_change(sink, "big")  # the rewound batch dead-letters it again
    assert sent_end(producer, sink, "big")["reason"].startswith("1 change(s) dead-lettered")


def test_after_an_abort_a_transaction_finished_elsewhere_leaves_nothing_behind():
    producer = Producer()
    sink = KafkaSink(producer, "changes", "transactions", "dlq")
    dead_letter_a_change(sink, "moved")
    sink.dlq.errors.append("purged by the abort")
    EosRecovery(parts_with(sink), consumer=None, producer=producer).recover(
        KafkaError(KafkaError.ILLEGAL_GENERATION, "moved on", txn_requires_abort=True)
    )
    assert sink._dead_lettered == {} and sink.dlq_errors == []
    assert sent_end(producer, sink, "moved")["reason"] is None  # if it comes back here, unmarked
