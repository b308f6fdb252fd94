"""Batch consumption with the Java client's poll() semantics.

librdkafka's consume(n, timeout) returns only when n records are there or the timeout has passed,
so below n records per timeout every call waits the whole timeout, and that wait lands on every
record's latency (measured on the embedded broker: 10 fetched records, consume(5000, 1.0) returned
after 1000 ms). Java's poll() returns as soon as any record is there. poll_batch does the same:
wait up to `wait_s` for the first record, then take whatever is already fetched without waiting.
Under load the fetch queue is full, so batches still reach `max_records`.
"""

from __future__ import annotations

from typing import Any


def poll_batch(consumer: Any, max_records: int, wait_s: float) -> list:
    first = consumer.consume(1, wait_s)
    if not first or max_records <= 1:
        return first
    return first + consumer.consume(max_records - 1, 0)
