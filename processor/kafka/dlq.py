"""The dead-letter writer: one header format for every record the project rejects.

A dead letter is the rejected record's key and value, untouched, plus these headers (UTF-8):

  reason     why it was rejected (always)
  source     where it came from: the input topic (processor), or the source kind for a
             replayed or captured log (oracle, ibmi, postgres, generate)
  partition  input partition   } when it came from a Kafka topic
  offset     input offset      }
  file       input file        } when it came from a file (replay)
  line       line or record number in that file
  xid        the transaction it belongs to, when known
  event_id   the output change it would have been (oversized outputs)
  size       the record's size in bytes: for a source event too large for the raw topic, and
             whenever the value was dropped because it is too large for the DLQ as well

A value that is itself too large for the DLQ topic is dropped; `size` then says how big it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Producer

from processor.kafka.produce import RecordTooLarge, produce
from processor.kafka.settlement import Unacknowledged

HEADERS = ("reason", "source", "partition", "offset", "file", "line", "xid", "event_id", "size")
MAX_REASON_CHARS = 2000


def dlq_headers(reason: str, source: str, **fields: Any) -> list[tuple[str, bytes]]:
    """Headers in the documented order; fields that are None are left out."""
    unknown = set(fields) - set(HEADERS)
    if unknown:
        raise ValueError(f"unknown dead-letter headers: {sorted(unknown)}")
    values = {"reason": reason[:MAX_REASON_CHARS], "source": source, **fields}
    return [(name, str(values[name]).encode()) for name in HEADERS if values.get(name) is not None]


def read_dlq_headers(headers: list[tuple[str, bytes]] | None) -> dict[str, str]:
    """A dead letter's headers as text (for tools and tests)."""
    return {k: (v or b"").decode(errors="replace") for k, v in headers or [] if k in HEADERS}


class DeadLetterWriter:
    """Writes dead letters and tracks their acknowledgements: callers make them durable (flush)
    before they persist any input offset past the rejected records.

    Acknowledgement is by settlement (processor/kafka/settlement.py): once the producer settled past
    the last dead letter, every one written before is delivered or its failure was reported (the
    delivery callback runs for failures; a producer with delivery.report.only.error reports nothing
    else)."""

    def __init__(self, producer: Producer, topic: str):
        self.producer, self.topic = producer, topic
        self._unacked = Unacknowledged(producer)
        self.written = 0
        self.errors: list[str] = []

    @property
    def unacked(self) -> int:
        """Dead letters not known to be acknowledged (0 once the producer settled past the last one)."""
        return self._unacked.count

    def write(
        self,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        source: str,
        on_ack: Callable[[KafkaError | None], None] | None = None,
        **fields: Any,
    ) -> None:
        """Queue one dead letter; `on_ack` (if given) runs with its error if it fails."""

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self.errors.append(err.str())
                if on_ack is not None:
                    on_ack(err)

        try:
            produce(
                self.producer,
                self.topic,
                value,
                key,
                headers=dlq_headers(reason, source, **fields),
                on_delivery=delivered,
            )
        except RecordTooLarge:
            # Keep the reason and where to find the original; the value cannot travel.
            headers = dlq_headers(reason, source, **{**fields, "size": len(value or b"")})
            produce(self.producer, self.topic, None, key, headers=headers, on_delivery=delivered)
        self._unacked.produced()
        self.written += 1

    def flush(self, timeout_s: float = 30.0) -> None:
        """Every dead letter so far is acknowledged, or this raises."""
        if self.unacked:
            self.producer.flush(timeout_s)
            if self.unacked:
                raise TimeoutError(f"{self.unacked} dead letters not acknowledged after {timeout_s}s")
        if self.errors:
            raise RuntimeError(f"dead letters failed: {self.errors[:3]}")
