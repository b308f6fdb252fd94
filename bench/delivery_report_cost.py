"""What one delivery report costs: CPU µs per produced record on the embedded Apache Kafka broker,
with a Python callback per record, with none, with `delivery.report.only.error` (the callback is
passed, confluent-kafka calls it for failures only), and with the processor's native producer
(processor/kafka/_rdkafka_producer.pyx: the same callback and setting, successes never reach Python).
The processor's producer settings otherwise. CPU: the process's (librdkafka's threads included) and
the main thread's (what the processor's loop pays).

    .venv/bin/python -m bench.delivery_report_cost --records 200000
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Producer

from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import PRODUCER_DEFAULTS
from processor.kafka.embedded import EmbeddedKafka
from processor.kafka.output_producer import NativeProducer

MODES = (
    "none",
    "callback",
    "only_error",
    "native",
    "callback",
    "native",
    "none",
)  # the first run warms the broker; repeats show drift


def produce_all(bootstrap: str, mode: str, n: int, value: bytes) -> dict:
    topic = f"drcost-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: 4})
    conf = {"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS}
    if mode in ("only_error", "native"):
        conf["delivery.report.only.error"] = True
    producer = NativeProducer(conf) if mode == "native" else Producer(conf)
    reports = [0]

    def delivered(err, msg) -> None:
        reports[0] += 1

    cpu0, main0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    for i in range(n):
        key = b"k%d" % i
        while True:
            try:
                if mode == "none":
                    producer.produce(topic, value, key)
                else:
                    producer.produce(topic, value, key, -1, delivered)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    cpu, main, wall = time.process_time() - cpu0, time.thread_time() - main0, time.perf_counter() - wall0
    return {
        "mode": mode,
        "cpu_us_per_record": 1e6 * cpu / n,
        "main_us_per_record": 1e6 * main / n,
        "records_per_s": n / wall,
        "reports": reports[0],
        "unflushed": left,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.delivery_report_cost")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--value-bytes", type=int, default=200)
    a = p.parse_args()
    with EmbeddedKafka() as broker:
        for mode in MODES:
            if mode == "native" and NativeProducer is None:
                continue  # not built: the line is missing rather than wrong
            r = produce_all(broker.bootstrap, mode, a.records, b"x" * a.value_bytes)
            print(
                f"{r['mode']:11s} {r['cpu_us_per_record']:.2f} CPU µs/record ({r['main_us_per_record']:.2f} main thread)  "
                f"{r['records_per_s']:,.0f} records/s wall  "
                f"reports={r['reports']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
