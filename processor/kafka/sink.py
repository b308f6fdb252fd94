"""The Kafka side of the outputs: changes, transactions, outcomes and the dead-letter queue.

Oversized outputs (a change bigger than the size limit) follow the `oversized` policy:
  dlq   the change goes to the DLQ (reason, xid, event_id, size; the value if it fits there),
        counts as delivered, and the transaction's END record carries the reason;
  fail  the change's delivery fails with RecordTooLarge and the emitter stops the processor;
  chunk the change is written as n records on its key (processor.kafka.chunking) and counts as
        delivered once every chunk is; chunks the broker still refuses fall back to dlq.

Acknowledgement is by settlement (settled(): the producer's queue is empty; or by epochs,
processor/kafka/settlement.py), not by a report per record: the producer runs with
delivery.report.only.error, so a callback runs for failures only. Everything a change leads to (its
chunks, its dead letter) is produced inside the failure report of the change, before the queue can
be empty and counted in the change's epoch, so a settlement covers it too.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from processor.core import codec
from processor.core import events as ev
from processor.core.contracts import AckCallback
from processor.kafka import chunking
from processor.kafka.dlq import DeadLetterWriter
from processor.kafka.produce import RecordTooLarge, is_too_large, produce, record_size
from processor.kafka.settlement import Unacknowledged

OVERSIZED_POLICIES = ("dlq", "fail", "chunk")
DEFAULT_MAX_RECORD_BYTES = 1_000_000  # librdkafka's message.max.bytes default


class KafkaSink:
    """Implements the emitter's Sink on an idempotent producer; also writes dead letters and outcomes."""

    def __init__(
        self,
        producer: Producer,
        changes_topic: str,
        transactions_topic: str,
        dlq_topic: str,
        oversized: str = "dlq",
        max_record_bytes: int | None = None,
    ):
        if oversized not in OVERSIZED_POLICIES:
            raise ValueError(f"oversized must be one of {OVERSIZED_POLICIES}, not {oversized!r}")
        self.producer = producer
        self._produce = producer.produce
        self.changes_topic = changes_topic
        self.transactions_topic = transactions_topic
        self.dlq = DeadLetterWriter(producer, dlq_topic)
        self.oversized = oversized
        self._outcomes_unacked = Unacknowledged(producer)
        self.outcome_errors: list[str] = []
        self.oversized_changes = 0
        self.chunked_changes = 0
        self.max_record_bytes = max_record_bytes or DEFAULT_MAX_RECORD_BYTES  # the producer's message.max.bytes
        # xid -> reasons of its changes that went to the DLQ; consumed when its END is sent.
        self._dead_lettered: dict[str, list[str]] = {}
        # Held ENDs that took such reasons: (hold number, xid, reasons), so that one the producer gives
        # back unsent (reclaim_held) says them again when it goes the usual way.
        self._held_marks: deque[tuple[int, str, list[str]]] = deque()
        self._holds = 0  # hold_transaction calls so far
        # The delivery callbacks of the last on_ack seen (the emitter passes one for every output).
        self._reports_for: AckCallback | None = None
        self._change_report: Any = None
        self._transaction_report: Any = None

    # -- Sink ------------------------------------------------------------------------------------

    def settled(self) -> bool:
        """Every record produced so far is acknowledged or its failure was reported: librdkafka's
        queue length counts a record until it is delivered, and a failed one until its report ran."""
        return len(self.producer) == 0

    def _reports(self, on_ack: AckCallback) -> None:
        """One pair of delivery callbacks per on_ack, not one object per record."""
        self._reports_for = on_ack

        def change_report(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self._change_failed(msg.key(), msg.value(), on_ack, err)

        def transaction_report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                on_ack(err)

        self._change_report, self._transaction_report = change_report, transaction_report

    def direct_change_sender(self, on_ack: AckCallback) -> Any:
        """The emitter's frame-free path (contracts.Sink), as send_change's common case: the native
        producer's C sender for the changes topic (the emitter hands each change over in C), else
        call(value, key, -1, report), the producer's produce. Whatever either refuses (a full queue,
        an oversized record) the emitter hands to send_change."""
        if on_ack is not self._reports_for:
            self._reports(on_ack)
        change_sender = getattr(self.producer, "change_sender", None)
        if change_sender is not None:
            return change_sender(self.changes_topic, self._change_report)
        return partial(self._produce, self.changes_topic), -1, self._change_report

    def send_change(self, key: bytes, value: bytes | None, on_ack: AckCallback) -> None:
        if on_ack is not self._reports_for:
            self._reports(on_ack)
        try:
            # The common case; -1: the partitioner's.
            self._produce(self.changes_topic, value, key, -1, self._change_report)
        except (BufferError, KafkaException):
            try:
                produce(self.producer, self.changes_topic, value, key, on_delivery=self._change_report)  # waits
            except RecordTooLarge as exc:
                self._oversized_change(key, value, exc, on_ack)

    def _change_failed(self, key: bytes, value: bytes | None, on_ack: AckCallback, err: KafkaError) -> None:
        if is_too_large(err):
            self._oversized_change(key, value, RecordTooLarge(self.changes_topic, record_size(key, value)), on_ack)
        else:
            on_ack(err)

    def send_transaction(self, key: bytes, value: bytes, on_ack: AckCallback) -> None:
        value = self._transaction_value(key, value, on_ack)
        try:
            self._produce(self.transactions_topic, value, key, -1, self._transaction_report)
        except (BufferError, KafkaException):
            produce(self.producer, self.transactions_topic, value, key, on_delivery=self._transaction_report)

    def hold_transaction(self, key: bytes, value: bytes, on_ack: AckCallback) -> None:
        """An END that the native producer sends once every record produced before it is acknowledged
        (NativeProducer.hold; the emitter's hold_ends). A change dead-lettered by then is in it."""
        self._holds += 1
        if not self._dead_lettered and on_ack is self._reports_for:  # the common case: the END as it is
            self.producer.hold(self.transactions_topic, value, key, self._transaction_report)
            return
        xid = key.decode(errors="replace") if self._dead_lettered else None
        reasons = self._dead_lettered.get(xid) if xid is not None else None
        value = self._transaction_value(key, value, on_ack)
        self.producer.hold(self.transactions_topic, value, key, self._transaction_report)
        if reasons and xid not in self._dead_lettered:  # this END took them
            marks = self._held_marks
            released = self._holds - len(self.producer)  # held records go in order: these went
            while marks and marks[0][0] <= released:
                marks.popleft()
            marks.append((self._holds, xid, reasons))

    def _transaction_value(self, key: bytes, value: bytes, on_ack: AckCallback) -> bytes:
        """The record as it goes out (an END marked with its dead-lettered changes); on_ack's reports set."""
        if self._dead_lettered:
            xid = key.decode(errors="replace")
            if xid in self._dead_lettered:
                value = self._mark_end(xid, value)
        if on_ack is not self._reports_for:
            self._reports(on_ack)
        return value

    def reclaim_held(self) -> int:
        """How many held ENDs the producer gave back unsent, after a failure report (the last held).
        Their dead-letter reasons go back with them, for the END that the emitter sends instead."""
        taken = int(self.producer.reclaim_held())
        if taken:
            first = self._holds - taken + 1
            for number, xid, reasons in self._held_marks:
                if number >= first:
                    self._dead_lettered[xid] = reasons + self._dead_lettered.get(xid, [])
            self._held_marks.clear()  # the others went, with their reasons
        return taken

    def _oversized_change(self, key: bytes, value: bytes | None, exc: RecordTooLarge, on_ack: AckCallback) -> None:
        if self.oversized == "fail":
            on_ack(exc)
            return
        change = ev.decode_change(value) if value else {}
        if self.oversized == "chunk" and value:
            self._chunk_change(key, value, change, on_ack)
            return
        self._dead_letter_change(key, value, change, exc, on_ack)

    def _chunk_change(self, key: bytes, value: bytes, change: dict, on_ack: AckCallback) -> None:
        """n records on the change's key, acknowledged by the settlement that covers them all; if the
        broker refuses a chunk as too large too, the change is dead-lettered instead (once)."""
        event_id = change["event_id"]
        # Room for the key, the chunk headers and the record and batch framing (lz4 may also grow
        # incompressible data a little).
        room = self.max_record_bytes - len(key) - chunking.headers_size(999_999, event_id)
        payload = room - max(1024, self.max_record_bytes // 64)
        if payload < 1:
            self._dead_letter_change(key, value, change, RecordTooLarge(self.changes_topic, len(value)), on_ack)
            return
        pieces = chunking.split(value, payload)
        state = {"refused": False}

        def refused(err: object) -> None:
            if state["refused"]:
                return  # the change is dead-lettered (or failed) once
            state["refused"] = True
            if is_too_large(err) or isinstance(err, RecordTooLarge):
                self._dead_letter_change(key, value, change, RecordTooLarge(self.changes_topic, len(value)), on_ack)
            else:
                on_ack(err)

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                refused(err)

        self.chunked_changes += 1
        for i, piece in enumerate(pieces):
            try:
                headers = chunking.chunk_headers(i, len(pieces), event_id)
                produce(self.producer, self.changes_topic, piece, key, headers=headers, on_delivery=delivered)
            except RecordTooLarge as exc:
                refused(exc)  # chunks already queued are left incomplete: readers drop them
                return

    def _dead_letter_change(
        self, key: bytes, value: bytes | None, change: dict, exc: RecordTooLarge, on_ack: AckCallback
    ) -> None:
        xid = (change.get("source") or {}).get("xid")
        self.oversized_changes += 1
        self._dead_lettered.setdefault(xid or "", []).append(str(exc))
        # Written inside the change's failure report (or its produce call), so the settlement that
        # lets the emit cursor pass this change covers the dead letter too; its failure goes to on_ack.
        self.dlq.write(
            key,
            value,
            str(exc),
            self.changes_topic,
            xid=xid,
            event_id=change.get("event_id"),
            on_ack=on_ack,
        )

    # -- outcomes and dead letters ---------------------------------------------------------------

    def outcome(self, topic: str, xid: str, partition: int, offset: int, outcome: str) -> None:
        """Publish how a transaction finished without output; the low watermark waits for its ack."""
        value = codec.encode_outcome({"xid": xid, "input_partition": partition, "offset": offset, "outcome": outcome})
        produce(self.producer, topic, value, xid.encode(), on_delivery=self._outcome_delivered)
        self._outcomes_unacked.produced()

    def _outcome_delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.outcome_errors.append(f"outcome: {err.str()}")

    @property
    def outcomes_unacked(self) -> int:
        """Outcomes produced since the producer was last seen settled past them (0 once it is: each is
        then acknowledged, or failed into outcome_errors)."""
        return self._outcomes_unacked.count

    def dead_letter(
        self, source_topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        """The original input record, untouched, with why it was rejected and where it came from."""
        xid = key.decode(errors="replace") if key else None
        self.dlq.write(key, value, reason, source_topic, partition=partition, offset=offset, xid=xid)

    @property
    def dlq_unacked(self) -> int:
        return self.dlq.unacked

    @property
    def dlq_errors(self) -> list[str]:
        return self.dlq.errors + self.outcome_errors

    def flush_dead_letters(self, timeout_s: float = 30.0) -> None:
        """Dead letters must be durable before the input offsets behind them are persisted."""
        self.dlq.flush(timeout_s)
        if self.outcome_errors:
            raise RuntimeError(f"outcomes failed: {self.outcome_errors[:3]}")

    def transaction_aborted(self) -> None:
        """exactly_once: the batch's Kafka transaction was aborted, and its dead letters and outcomes
        with it. Their delivery errors (the purge) mean nothing, and the changes behind the recorded
        reasons are emitted again after the rewind: kept, those reasons would be counted twice in
        their END, or stick to a transaction another instance finishes."""
        self._dead_lettered.clear()
        self._held_marks.clear()
        del self.outcome_errors[:]
        del self.dlq.errors[:]

    def _mark_end(self, xid: str, value: bytes) -> bytes:
        """An END whose transaction lost changes to the DLQ says so in `reason`."""
        event = ev.decode_transaction(value)
        if event.get("status") != "END":
            return value
        reasons = self._dead_lettered.pop(xid)
        note = f"{len(reasons)} change(s) dead-lettered: {reasons[0]}"
        event["reason"] = f"{event['reason']}; {note}" if event.get("reason") else note
        return ev.encode_transaction(event)
