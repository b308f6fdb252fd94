"""The Kafka helper layer in one import, for callers that want several helpers at once.

client_config  KafkaClientConfig: bootstrap + pass-through properties, builds every client
admin          ensure_topics, partition_count, max_message_bytes, check_connection
end_offsets    end_offsets / start_offsets / list_offsets (ListOffsets)
produce        produce (retry on a full queue, RecordTooLarge), produce_all, flush
dlq            DeadLetterWriter and the one dead-letter header format
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from processor.kafka.admin import (
    BROKER_DEFAULT_REPLICATION,
    KafkaAuthError,
    KafkaUnavailable,
    check_connection,
    ensure_topics,
    max_message_bytes,
    partition_count,
)
from processor.kafka.client_config import (
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    KafkaClientConfig,
    as_client_config,
)
from processor.kafka.dlq import DeadLetterWriter, dlq_headers, read_dlq_headers
from processor.kafka.end_offsets import end_offsets, list_offsets, start_offsets
from processor.kafka.produce import RecordTooLarge, flush, produce, produce_all


def make_producer(client: KafkaClientConfig | str, **overrides: Any) -> Producer:
    """An idempotent producer with the project's defaults (murmur2, bounded queue)."""
    return as_client_config(client).producer(**overrides)


__all__ = [
    "BROKER_DEFAULT_REPLICATION",
    "CONSUMER_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "DeadLetterWriter",
    "KafkaAuthError",
    "KafkaClientConfig",
    "KafkaUnavailable",
    "RecordTooLarge",
    "as_client_config",
    "check_connection",
    "dlq_headers",
    "end_offsets",
    "ensure_topics",
    "flush",
    "list_offsets",
    "make_producer",
    "max_message_bytes",
    "partition_count",
    "produce",
    "produce_all",
    "read_dlq_headers",
    "start_offsets",
]
