"""Produce with retry: the one place that writes records, waits for queue room and flags oversized records.

librdkafka raises BufferError when its local queue is full; the answer is always to serve delivery
reports (poll) and try again. A record over `message.max.bytes` fails at produce() with
MSG_SIZE_TOO_LARGE (and a broker with a lower topic limit rejects it in the delivery report):
both become RecordTooLarge, which callers turn into a dead letter instead of a crash loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

Headers = list[tuple[str, bytes]]
DeliveryCallback = Callable[[KafkaError | None, Any], None]


class RecordTooLarge(Exception):
    """A record bigger than the producer's or the broker's size limit; it can never be written."""

    def __init__(self, topic: str, size: int, detail: str = ""):
        self.topic, self.size = topic, size
        super().__init__(f"record too large for {topic}: {size} bytes ({detail or 'MSG_SIZE_TOO_LARGE'})")


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None = None) -> int:
    return len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers or [])


def is_too_large(err: object) -> bool:
    """True for a delivery error meaning the record exceeds a size limit (client or broker)."""
    return isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def produce(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    *,
    partition: int | None = None,
    headers: Headers | None = None,
    on_delivery: DeliveryCallback | None = None,
) -> None:
    """Queue one record, serving delivery reports while the local queue is full.

    Raises RecordTooLarge for a record over message.max.bytes; other errors propagate.
    """
    extra: dict[str, Any] = {} if partition is None else {"partition": partition}
    if headers:
        extra["headers"] = headers
    if on_delivery is not None:
        extra["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, value=value, key=key, **extra)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            if is_too_large(exc.args[0]):
                raise RecordTooLarge(topic, record_size(key, value, headers), exc.args[0].str()) from None
            raise


def flush(producer: Producer, timeout_s: float, what: str) -> None:
    """Wait until every queued record is acknowledged; TimeoutError names what was left."""
    remaining = producer.flush(timeout_s)
    if remaining:
        raise TimeoutError(f"{remaining} records not delivered to {what} within {timeout_s}s")


def produce_all(producer: Producer, topic: str, records: Iterable[tuple[bytes | None, bytes, int | None]]) -> int:
    """Produce (key, value, partition) tuples in order and flush; returns the count."""
    failed: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failed.append(err.str())

    n = 0
    for key, value, partition in records:
        produce(producer, topic, value, key, partition=partition, on_delivery=delivered)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)
    flush(producer, 60, topic)
    if failed:
        raise RuntimeError(f"{len(failed)} records to {topic} failed, first: {failed[0]}")
    return n
