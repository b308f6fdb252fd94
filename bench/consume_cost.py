"""What taking one raw record costs: CPU µs per consumed record on the embedded Apache Kafka broker,
through confluent-kafka's consume (kafka/poll.py, then split by partition: the processor before) and
through the native fetch (processor/kafka/_rdkafka_fetch.pyx: the processor now). Each mode reads
the same topic from the start in a group of its own, with the processor's consumer settings, and
touches what the engine reads (offset, key, value). CPU: the process's (librdkafka's threads
included) and the main thread's (what the processor's loop pays).

    .venv/bin/python -m bench.consume_cost --records 500000
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, Producer

from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS
from processor.kafka.embedded import EmbeddedKafka
from processor.kafka.raw_fetch import ConsumerFetch, RawFetch

MODES = ("confluent", "native", "confluent", "native")  # repeats show drift
MAX_BATCH = 5000


def write(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    ensure_topics(bootstrap, {topic: 4})
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS, "linger.ms": 20})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, b"xid-%d" % (i % 997))
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0


def consume_all(bootstrap: str, topic: str, mode: str, n: int) -> dict:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            **CONSUMER_DEFAULTS,
            "group.id": f"cost-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
            "fetch.max.bytes": 8 << 20,
            "queued.max.messages.kbytes": 16384,
            "queued.min.messages": 20000,
        }
    )
    fetch = RawFetch(consumer, topic, MAX_BATCH) if mode == "native" else ConsumerFetch(consumer)

    def on_assign(c, parts):
        fetch.route([tp.partition for tp in parts])
        c.incremental_assign(parts)

    consumer.subscribe([topic], on_assign=on_assign)
    while not consumer.assignment():  # the group join is not what is measured
        fetch.poll(MAX_BATCH, 0.1)
    taken, checksum = 0, 0
    cpu0, main0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    while taken < n:
        runs, errors, count = fetch.poll(MAX_BATCH, 1.0)
        assert not errors, errors
        for run in runs.values():
            for rec in run:
                checksum += rec.offset() + len(rec.key()) + len(rec.value())
        taken += count
    cpu, main, wall = time.process_time() - cpu0, time.thread_time() - main0, time.perf_counter() - wall0
    fetch.close()
    consumer.close()
    return {
        "mode": mode,
        "cpu_us_per_record": 1e6 * cpu / taken,
        "main_us_per_record": 1e6 * main / taken,
        "records_per_s": taken / wall,
        "checksum": checksum,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.consume_cost")
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--value-bytes", type=int, default=160)
    a = p.parse_args()
    with EmbeddedKafka() as broker:
        topic = f"cost-{uuid.uuid4().hex[:8]}"
        write(broker.bootstrap, topic, a.records, b"x" * a.value_bytes)
        sums = set()
        for mode in MODES:
            if mode == "native" and RawFetch is None:
                continue  # not built: the line is missing rather than wrong
            r = consume_all(broker.bootstrap, topic, mode, a.records)
            sums.add(r["checksum"])
            print(
                f"{r['mode']:9s} {r['cpu_us_per_record']:.2f} CPU µs/record ({r['main_us_per_record']:.2f} main thread)  "
                f"{r['records_per_s']:,.0f} records/s wall",
                flush=True,
            )
        assert len(sums) == 1, f"the modes read different records: {sums}"


if __name__ == "__main__":
    main()
