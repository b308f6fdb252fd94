"""What writing the raw topic costs a source: the writer process's CPU (all its threads, librdkafka's
included) while RawTopicWriter writes the latency bench's small transactions at a fixed rate onto the
embedded broker (workloads.feed_paced, as the latency levels do), by the writer's producer and its
delivery reports:
  * `every-report`: confluent-kafka's Producer calling back into Python for every record (the
    writer before session 46, and still what a caller's on_delivery gets);
  * `confluent`: confluent-kafka's Producer with delivery.report.only.error;
  * `native`: kafka/output_producer.NativeProducer, failures only (RawTopicWriter's default).
The arms alternate, each on a fresh topic; the broker's own CPU over the same seconds is printed
beside it.

    .venv/bin/python -m bench.source_cost --rate 175000 --seconds 8 [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import psutil

from bench import workloads as wl
from processor.kafka.embedded import SERVER_JVM_FLAGS, EmbeddedKafka
from processor.kafka.rawtopic import RawTopicWriter


def _ignore(err, msg) -> None:
    pass


ARMS = (("every-report", "confluent", _ignore), ("confluent", "confluent", None), ("native", "native", None))


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=175_000.0, help="events/s written")
    ap.add_argument("--seconds", type=float, default=8.0, help="how long each arm writes")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with EmbeddedKafka(jvm_flags=list(SERVER_JVM_FLAGS)) as broker:
        for i in range(args.rounds):
            for arm, producer, on_delivery in ARMS:
                topic = f"raw.source-cost.{arm}{i}"
                writer = RawTopicWriter(
                    broker.bootstrap, topic, partitions=4, on_delivery=on_delivery, producer=producer
                )
                evs = wl.pregenerate(wl.SmallTxns(f"{arm}{i}-", 100), int(args.rate * args.seconds))
                cpu0, broker0, t0 = time.process_time(), process_cpu_s(broker.process.pid), time.monotonic()
                _, offered_s = wl.feed_paced(writer, evs, args.rate)
                wall = time.monotonic() - t0  # with the closing flush, as the broker's CPU is
                cpu = time.process_time() - cpu0
                print(
                    f"round {i + 1} {arm:12}: {len(evs) / offered_s:,.0f} events/s; writer {cpu / wall:.2f} cores, "
                    f"{cpu / len(evs) * 1e6:.2f} µs per event; broker {(process_cpu_s(broker.process.pid) - broker0) / wall:.2f} cores",
                    flush=True,
                )


if __name__ == "__main__":
    main()
