"""What a settling flush waits for: wall ms of producer.flush() after n records of 200 B, by the number
of partitions they go to (two topics of four), on the embedded Apache Kafka broker with the
processor's producer settings. The first 10 of 60 rounds warm up; median and mean of the rest.

    .venv/bin/python -m bench.flush_cost [--compression lz4|none|zstd]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import Producer

from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import PRODUCER_DEFAULTS
from processor.kafka.embedded import EmbeddedKafka

ROUNDS, WARMUP = 60, 10


def flush_ms(producers: list[Producer], topics: tuple[str, str], parts: int, n: int) -> tuple[float, float]:
    value, waits = b"x" * 200, []
    for _ in range(ROUNDS):
        for i in range(n):
            q = i % parts
            producer = producers[(q // 4) % len(producers)]  # with two: one per topic
            producer.produce(topics[q // 4], value, b"k%d" % i, partition=q % 4)
        t0 = time.perf_counter()
        for producer in producers:
            producer.flush(10)
        waits.append((time.perf_counter() - t0) * 1000)
    kept = waits[WARMUP:]
    return statistics.median(kept), statistics.mean(kept)


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.flush_cost")
    p.add_argument("--compression", default=PRODUCER_DEFAULTS["compression.type"])
    args = p.parse_args()
    with EmbeddedKafka() as broker:
        topics = ("a" + uuid.uuid4().hex[:6], "b" + uuid.uuid4().hex[:6])
        ensure_topics(broker.bootstrap, {t: 4 for t in topics})
        conf = {"bootstrap.servers": broker.bootstrap, **PRODUCER_DEFAULTS, "acks": "all"}
        conf["compression.type"] = args.compression
        one, two = [Producer(conf)], [Producer(conf), Producer(conf)]
        cases = [(one, parts, 1000) for parts in (1, 2, 4, 8)] + [(two, 8, 1000), (one, 4, 4000), (one, 8, 4000)]
        for producers, parts, n in cases:
            median, mean = flush_ms(producers, topics, parts, n)
            print(f"{len(producers)} producer(s), {n:5d} records over {parts} partitions: "
                  f"flush {median:.2f} ms median, {mean:.2f} mean")  # fmt: skip


if __name__ == "__main__":
    main()
