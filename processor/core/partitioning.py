"""Where the producer puts an XID: Kafka's murmur2 partitioner, reproduced to predict placement.

Used to fan a generated source log out into per-partition streams exactly as the raw topic holds
them (for the reference model and the benchmarks), without a broker. tests check it against
Kafka's published vectors and against the real producer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from processor.core.events import HEARTBEAT


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Java's default partitioner, librdkafka's murmur2_random), unsigned 32 bits."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length - length % 4
    extra = length % 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_of(xid: str, partitions: int) -> int:
    """The raw-topic partition the producer picks for an XID key."""
    return (murmur2(xid.encode()) & 0x7FFFFFFF) % partitions


def fan_out(source: Iterable[dict[str, Any]], partitions: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(partition, offset, event) as the raw topic would hold them: heartbeats go to every partition."""
    offsets = [0] * partitions
    cache: dict[str, int] = {}
    for ev in source:
        if ev["op"] == HEARTBEAT:
            targets: Iterable[int] = range(partitions)
        else:
            p = cache.get(ev["xid"])
            if p is None:
                p = cache[ev["xid"]] = partition_of(ev["xid"], partitions)
                if len(cache) > 100_000:  # keep memory bounded on long runs
                    cache.clear()
            targets = (p,)
        for p in targets:
            yield p, offsets[p], ev
            offsets[p] += 1
