"""The Kafka side of the outputs: changes, transactions, outcomes and the dead-letter queue.

Oversized outputs (a change bigger than the size limit) follow the `oversized` policy:
  dlq   the change goes to the DLQ (reason, xid, event_id, size; the value if it fits there),
        counts as delivered, and the transaction's END record carries the reason;
  fail  the change's delivery fails with RecordTooLarge and the emitter stops the processor.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Producer

from processor.core import events as ev
from processor.core.contracts import AckCallback
from processor.kafka.dlq import DeadLetterWriter
from processor.kafka.produce import RecordTooLarge, is_too_large, produce, record_size

OVERSIZED_POLICIES = ("dlq", "fail")


class KafkaSink:
    """Implements the emitter's Sink on an idempotent producer; also writes dead letters and outcomes."""

    def __init__(
        self,
        producer: Producer,
        changes_topic: str,
        transactions_topic: str,
        dlq_topic: str,
        oversized: str = "dlq",
    ):
        if oversized not in OVERSIZED_POLICIES:
            raise ValueError(f"oversized must be one of {OVERSIZED_POLICIES}, not {oversized!r}")
        self.producer = producer
        self.changes_topic = changes_topic
        self.transactions_topic = transactions_topic
        self.dlq = DeadLetterWriter(producer, dlq_topic)
        self.oversized = oversized
        self.outcomes_unacked = 0
        self.outcome_errors: list[str] = []
        self.oversized_changes = 0
        # xid -> reasons of its changes that went to the DLQ; consumed when its END is sent.
        self._dead_lettered: dict[str, list[str]] = {}

    # -- Sink ------------------------------------------------------------------------------------

    def send_change(self, key: bytes, value: bytes | None, on_ack: AckCallback) -> None:
        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if is_too_large(err):
                self._oversized_change(key, value, RecordTooLarge(self.changes_topic, record_size(key, value)), on_ack)
            else:
                on_ack(err)

        try:
            produce(self.producer, self.changes_topic, value, key, on_delivery=delivered)
        except RecordTooLarge as exc:
            self._oversized_change(key, value, exc, on_ack)

    def send_transaction(self, key: bytes, value: bytes, on_ack: AckCallback) -> None:
        xid = key.decode(errors="replace")
        if xid in self._dead_lettered:
            value = self._mark_end(xid, value)
        produce(self.producer, self.transactions_topic, value, key, on_delivery=lambda err, _msg: on_ack(err))

    def _oversized_change(self, key: bytes, value: bytes | None, exc: RecordTooLarge, on_ack: AckCallback) -> None:
        if self.oversized == "fail":
            on_ack(exc)
            return
        change = ev.decode_change(value) if value else {}
        xid = (change.get("source") or {}).get("xid")
        self.oversized_changes += 1
        self._dead_lettered.setdefault(xid or "", []).append(str(exc))
        # Acknowledged once the dead letter is: the emit cursor may then move past this change.
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
        self.outcomes_unacked += 1
        value = ev.encode_outcome({"xid": xid, "input_partition": partition, "offset": offset, "outcome": outcome})
        produce(self.producer, topic, value, xid.encode(), on_delivery=self._outcome_delivered)

    def _outcome_delivered(self, err: KafkaError | None, _msg: Any) -> None:
        self.outcomes_unacked -= 1
        if err is not None:
            self.outcome_errors.append(f"outcome: {err.str()}")

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

    def _mark_end(self, xid: str, value: bytes) -> bytes:
        """An END whose transaction lost changes to the DLQ says so in `reason`."""
        event = ev.decode_transaction(value)
        if event.get("status") != "END":
            return value
        reasons = self._dead_lettered.pop(xid)
        note = f"{len(reasons)} change(s) dead-lettered: {reasons[0]}"
        event["reason"] = f"{event['reason']}; {note}" if event.get("reason") else note
        return ev.encode_transaction(event)
