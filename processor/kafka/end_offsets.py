"""Log start and end offsets of topic partitions, by ListOffsets: the one offset probe.

Apache Kafka answers ListOffsets(latest) with the high watermark (read_uncommitted), which is the
true end. One AdminClient request covers every partition asked for.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from processor.kafka.admin import Admin
from processor.kafka.client_config import KafkaClientConfig

TopicPartitionId = tuple[str, int]
# A just-created partition answers these until its leader is elected and known to the client; a
# broker just restarted on its data dir answers the epoch ones until its metadata catches up (seen
# in bench.chaos: UNKNOWN_LEADER_EPOCH "Leader epoch is newer than broker epoch").
_LEADERSHIP = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
}


def _transient(error: KafkaError) -> bool:
    return error.retriable() or error.code() in _LEADERSHIP


def as_admin(client: KafkaClientConfig | str | Admin) -> Admin:
    """An Admin to reuse: each new one costs a connection and a metadata round trip (~50 ms)."""
    return client if isinstance(client, Admin) else Admin(client)


def list_offsets(
    client: KafkaClientConfig | str | Admin,
    partitions: Iterable[TopicPartitionId],
    which: str = "latest",
    timeout_s: float = 10.0,
    read_committed: bool = False,
) -> dict[TopicPartitionId, int]:
    """`latest`: the end (next offset to be written); `earliest`: the log start.

    Retriable errors (a new partition without a leader yet, a leader moving) are retried until
    timeout_s; then the last error is raised.
    """
    spec = {"latest": OffsetSpec.latest, "earliest": OffsetSpec.earliest}[which]()
    wanted = {TopicPartition(topic, p): spec for topic, p in partitions}
    admin = as_admin(client)
    if wanted:
        admin.metadata(timeout_s=timeout_s)  # clear errors for a refused or absent broker
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    found: dict[TopicPartitionId, int] = {}
    deadline = time.monotonic() + timeout_s
    while wanted:
        futures = admin.admin.list_offsets(wanted, isolation_level=isolation, request_timeout=timeout_s)
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result(timeout_s).offset
                del wanted[tp]
            except KafkaException as exc:
                if not _transient(exc.args[0]) or time.monotonic() > deadline:
                    raise
        if wanted:
            time.sleep(0.2)
    return found


def topic_partitions(
    client: KafkaClientConfig | str | Admin, topic: str, timeout_s: float = 10.0
) -> list[TopicPartitionId]:
    admin = as_admin(client)
    meta = admin.metadata(topic, timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise LookupError(f"topic {topic!r} does not exist on {admin.client.bootstrap}")
    return [(topic, p) for p in sorted(meta.partitions)]


def end_offsets(
    client: KafkaClientConfig | str | Admin, topic: str, group: str | None = None, timeout_s: float = 10.0
) -> dict[int, int]:
    """End offset per partition of one topic. (`group` is accepted for older callers; unused.)"""
    client = as_admin(client)
    ends = list_offsets(client, topic_partitions(client, topic, timeout_s), "latest", timeout_s)
    return {p: end for (_, p), end in ends.items()}


def start_offsets(client: KafkaClientConfig | str | Admin, topic: str, timeout_s: float = 10.0) -> dict[int, int]:
    """Log start offset per partition (above 0 after retention or DeleteRecords)."""
    client = as_admin(client)
    starts = list_offsets(client, topic_partitions(client, topic, timeout_s), "earliest", timeout_s)
    return {p: start for (_, p), start in starts.items()}
