"""How the processor takes its raw records: RawFetch where it can, confluent-kafka's consume otherwise.

processor.kafka._rdkafka_fetch.RawFetch takes them from librdkafka's fetch queues without building
a confluent-kafka Message per record; the consumer itself stays confluent-kafka's. ConsumerFetch is
the same interface on consumer.consume (kafka/poll.py), for a build without the extension or when
configured. Both hand over one poll batch as ({partition: records in offset order}, [KafkaError],
records taken); a record has partition(), offset(), key() and value(). RawFetch's runs are
RecordRuns (a sequence of records, and the buffer the engine's compiled lane reads them from in
place); ConsumerFetch's are lists.

The choice (config `raw_fetch`, env TXBUFFER_RAW_FETCH): auto = RawFetch when it is built; native =
that, or an error saying why not; confluent = always ConsumerFetch. TXBUFFER_CODEC=compiled (set by
`make test`) makes auto require the build, as it does for the codec and the output producer.
"""

from __future__ import annotations

from typing import Any

from processor.core import codec
from processor.kafka.poll import poll_batch

try:
    from processor.kafka._rdkafka_fetch import RawFetch  # type: ignore[import-not-found]

    UNAVAILABLE = ""
except ImportError as exc:  # not built (no C compiler), or a librdkafka without what it needs
    RawFetch = None
    UNAVAILABLE = str(exc)

CHOICES = ("auto", "native", "confluent")


class ConsumerFetch:
    """Poll batches from consumer.consume, split by partition; nothing to route."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer

    def route(self, partitions: list[int]) -> None:
        pass

    def unroute(self, partitions: list[int]) -> None:
        pass

    def poll(self, max_records: int, wait_s: float) -> tuple[dict[int, list[Any]], list[Any], int]:
        msgs = poll_batch(self.consumer, max_records, wait_s)
        runs, errors = codec.partition_runs(msgs)
        return runs, [m.error() for m in errors], len(msgs)

    def close(self) -> None:
        pass


def raw_fetch(consumer: Any, topic: str, max_records: int, choice: str = "auto") -> tuple[Any, str]:
    """(fetch, why this one) for the raw topic's records on `consumer`."""
    if choice not in CHOICES:
        raise ValueError(f"raw_fetch must be one of {CHOICES}, not {choice!r}")
    if choice == "confluent":
        return ConsumerFetch(consumer), "confluent: configured"
    required = choice == "native" or codec.builds_required()
    if UNAVAILABLE:
        if required:
            raise RuntimeError(f"the native raw fetch is required but not built: {UNAVAILABLE}")
        return ConsumerFetch(consumer), f"confluent: not built: {UNAVAILABLE}"
    return RawFetch(consumer, topic, max_records), "native"
