"""Rebuilding the completed-transaction index from END records after a failover to an empty disk.

Why: a transaction that began below the committed low watermark but committed above it would be
re-read only in part after a rewind. Its END record (input partition + commit offset) proves it
was emitted whole, so the rebuilt engine skips the re-read tail instead of emitting it again.
"""

from __future__ import annotations

import time

import structlog
from confluent_kafka import Consumer, TopicPartition

from . import events as ev
from .kafka_util import CONSUMER_DEFAULTS, end_offsets

log = structlog.get_logger(__name__)


def completed_from_end_records(bootstrap: str, transactions_topic: str,
                               starts: dict[int, int]) -> dict[int, dict[str, int]]:
    """{raw partition: {xid: commit offset}} for END records with commit_offset >= starts[partition]."""
    found: dict[int, dict[str, int]] = {p: {} for p in starts}
    if not starts:
        return found
    try:
        ends = end_offsets(bootstrap, transactions_topic, group="txbuffer-index-rebuild")
    except LookupError:
        return found
    todo = {p: end for p, end in ends.items() if end > 0}
    if not todo:
        return found
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txbuffer-index-rebuild", **CONSUMER_DEFAULTS})
    started = time.monotonic()
    read = 0
    try:
        consumer.assign([TopicPartition(transactions_topic, p, 0) for p in todo])
        deadline = time.monotonic() + 300
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                if msg.error() is not None:
                    continue
                read += 1
                p_out = msg.partition()
                if p_out in todo and msg.offset() + 1 >= todo[p_out]:
                    del todo[p_out]
                try:
                    rec = ev.decode_transaction(msg.value())
                except ev.DecodeError:
                    continue
                p = rec["input_partition"]
                if rec["status"] == "END" and p in starts and rec["commit_offset"] >= starts[p]:
                    found[p][rec["id"]] = rec["commit_offset"]
        if todo:
            raise TimeoutError(f"could not read {transactions_topic} to its end: {todo}")
    finally:
        consumer.close()
    log.info("index.rebuilt_from_end_records", records_read=read, seconds=round(time.monotonic() - started, 2),
             found={p: len(x) for p, x in found.items()})
    return found
