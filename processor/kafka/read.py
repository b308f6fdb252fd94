"""Reading a topic from its start (or given offsets) up to the end offsets taken when the read begins.

The one bounded reader for verifiers, tools and benchmarks. Completion is judged by the consumer's
position, not by the last record seen: a transactional topic ends in a commit marker that no
record reports, and a read_committed consumer skips aborted records. Chunked records
(`oversized: chunk`) come out reassembled (processor.kafka.chunking).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from processor.kafka.admin import Admin
from processor.kafka.chunking import reassembled
from processor.kafka.client_config import KafkaClientConfig, as_client_config
from processor.kafka.end_offsets import as_admin, end_offsets, start_offsets


def read_to_end(
    client: KafkaClientConfig | str | Admin,
    topic: str,
    group: str = "txbuffer-reader",
    timeout_s: float = 120.0,
    starts: Mapping[int, int] | None = None,
    ends: Mapping[int, int] | None = None,
    reassemble: bool = True,
    **consumer_conf: Any,
) -> Iterator[Message]:
    """Yield every record of `topic` (in partition order per partition) below its end offsets.

    starts: offset to begin at per partition (default: the log start, looked up now); ends: where to
    stop (default: the end offsets now). TimeoutError if the ends are not reached in timeout_s.
    reassemble: a complete set of chunks comes out as one record, at its last chunk's offset;
    chunks of a set that does not complete below the ends are left out.
    """
    records = _records(client, topic, group, timeout_s, starts, ends, consumer_conf)
    yield from reassembled(records) if reassemble else records


def _records(
    client: KafkaClientConfig | str | Admin,
    topic: str,
    group: str,
    timeout_s: float,
    starts: Mapping[int, int] | None,
    ends: Mapping[int, int] | None,
    consumer_conf: dict[str, Any],
) -> Iterator[Message]:
    if ends is None or starts is None:
        # Absolute start offsets: a partition assigned at OFFSET_BEGINNING first asks its leader for
        # the log start, and librdkafka retries that look-up 500 ms later when the connection to the
        # leader is not up yet, which for a new consumer it never is (each read began 0.5 s late).
        admin, lookup_s = as_admin(client), min(timeout_s, 30.0)
        ends = ends if ends is not None else end_offsets(admin, topic, timeout_s=lookup_s)
        starts = starts if starts is not None else start_offsets(admin, topic, lookup_s)
    client = client.client if isinstance(client, Admin) else as_client_config(client)
    ends, starts = dict(ends), dict(starts)
    pending = {p for p, end in ends.items() if end > starts.get(p, 0)}
    if not pending:
        return
    consumer = client.consumer(group, **consumer_conf)
    try:
        consumer.assign([TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to their end in {timeout_s}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() or msg.partition() not in pending or msg.offset() >= ends[msg.partition()]:
                    continue
                yield msg
            done = [
                tp.partition
                for tp in consumer.position([TopicPartition(topic, p) for p in pending])
                if tp.offset >= ends[tp.partition]
            ]
            if done:
                pending.difference_update(done)
                consumer.incremental_unassign([TopicPartition(topic, p) for p in done])
    finally:
        consumer.close()
