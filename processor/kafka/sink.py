"""The Kafka side of the outputs: changes, transactions and the dead-letter queue."""

from __future__ import annotations

from confluent_kafka import Producer

from processor.core import events as ev
from processor.core.contracts import AckCallback


class KafkaSink:
    """Implements emitter.Sink on an idempotent producer; also writes dead letters."""

    def __init__(self, producer: Producer, changes_topic: str, transactions_topic: str, dlq_topic: str):
        self.producer = producer
        self.changes_topic = changes_topic
        self.transactions_topic = transactions_topic
        self.dlq_topic = dlq_topic
        self.dlq_unacked = 0
        self.outcomes_unacked = 0
        self.dlq_errors: list[str] = []

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, on_delivery, headers=None) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=on_delivery, headers=headers)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                self.producer.poll(0.05)

    def send_change(self, key: bytes, value: bytes | None, on_ack: AckCallback) -> None:
        self._produce(self.changes_topic, key, value, lambda err, _msg: on_ack(err))

    def send_transaction(self, key: bytes, value: bytes, on_ack: AckCallback) -> None:
        self._produce(self.transactions_topic, key, value, lambda err, _msg: on_ack(err))

    def outcome(self, topic: str, xid: str, partition: int, offset: int, outcome: str) -> None:
        """Publish how a transaction finished without output; the low watermark waits for its ack."""
        self.outcomes_unacked += 1
        value = ev.encode_outcome({"xid": xid, "input_partition": partition, "offset": offset, "outcome": outcome})
        self._produce(topic, xid.encode(), value, self._outcome_delivered)

    def _outcome_delivered(self, err, _msg) -> None:
        self.outcomes_unacked -= 1
        if err is not None:
            self.dlq_errors.append(f"outcome: {err}")

    def dead_letter(
        self, source_topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        """The original record, untouched, with why it was rejected and where it came from."""
        headers = [
            ("reason", reason.encode()),
            ("topic", source_topic.encode()),
            ("partition", str(partition).encode()),
            ("offset", str(offset).encode()),
        ]
        self.dlq_unacked += 1
        self._produce(self.dlq_topic, key, value, self._dlq_delivered, headers)

    def _dlq_delivered(self, err, _msg) -> None:
        self.dlq_unacked -= 1
        if err is not None:
            self.dlq_errors.append(str(err))

    def flush_dead_letters(self, timeout_s: float = 30.0) -> None:
        """Dead letters must be durable before the input offsets behind them are persisted."""
        if self.dlq_unacked:
            self.producer.flush(timeout_s)
            if self.dlq_unacked:
                raise TimeoutError(f"{self.dlq_unacked} dead letters not acknowledged after {timeout_s}s")
        if self.dlq_errors:
            raise RuntimeError(f"dead letters failed: {self.dlq_errors[:3]}")
