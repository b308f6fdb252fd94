"""A continuous passthrough for latency: `python -m bench.echo --bootstrap B --raw-topic T --out-topic O --group G`.

The ceiling (bench.passthrough) stops at the end offsets of its start; this one runs until SIGTERM,
so it can be measured at a paced offered rate like the processor. Same clients: KafkaClientConfig's
consumer and acks=all producer (linger.ms 5, lz4), and the runner's poll: poll_batch (processor/kafka/poll.py)
waits up to --consume-timeout for the first record and takes what is fetched. --poll fill instead waits
for a full batch, librdkafka's consume(max_batch, timeout), which shows what that wait costs at low rates.
Each output record is produced when its input is consumed, so its timestamp is the passthrough's emit time.
"""

from __future__ import annotations

import argparse
import signal
import sys

from bench.peers.common import mark
from processor.kafka.admin import ensure_topics, partition_count
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.poll import poll_batch
from processor.kafka.produce import flush, produce


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.echo")
    for name in ("bootstrap", "raw-topic", "out-topic", "group"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--max-batch", type=int, default=5000)
    p.add_argument("--consume-timeout", type=float, default=0.1, help="seconds a poll waits for records")
    p.add_argument(
        "--poll", choices=("first", "fill"), default="first", help="return at the first record, or fill the batch"
    )
    args = p.parse_args(argv)
    client = KafkaClientConfig(args.bootstrap)
    ensure_topics(client, {args.out_topic: partition_count(client, args.raw_topic)})
    producer = client.producer(acks="all")
    consumer = client.consumer(args.group, **{"partition.assignment.strategy": "cooperative-sticky"})
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer.subscribe([args.raw_topic], on_assign=lambda c, parts: mark("partition.assigned"))
    while not stop:
        if args.poll == "first":
            msgs = poll_batch(consumer, args.max_batch, args.consume_timeout)
        else:
            msgs = consumer.consume(args.max_batch, args.consume_timeout)
        for msg in msgs:
            if msg.error() is None:
                produce(producer, args.out_topic, msg.value(), msg.key())
        producer.poll(0)
    flush(producer, 60, args.out_topic)
    consumer.close()
    mark("run.done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
