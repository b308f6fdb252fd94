"""The ceiling: a bare confluent-kafka consume -> produce passthrough of the raw topic.

Same client settings as processor.runner (consumer group, cooperative-sticky, CONSUMER_DEFAULTS,
fetch sizes, batch consume of max_batch; idempotent lz4 producer with acks=all), no decoding and
no state. Like `--available-now` it reads the end offsets at start and stops there. It logs the
same JSON markers as the processor (partition.assigned, run.available_now_done) on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime

from confluent_kafka import TopicPartition

from processor.kafka.admin import ensure_topics, partition_count
from processor.kafka.client_config import KafkaClientConfig, parse_pairs
from processor.kafka.end_offsets import end_offsets
from processor.kafka.produce import flush, produce


def _mark(event: str, **kw: object) -> None:
    ts = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    print(json.dumps({"event": event, "timestamp": ts, **kw}), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.passthrough")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--raw-topic", required=True)
    p.add_argument("--out-topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--max-batch", type=int, default=5000)
    p.add_argument("--kafka-config", action="append", default=[], metavar="NAME=VALUE")
    args = p.parse_args(argv)

    client = KafkaClientConfig(args.bootstrap, parse_pairs(args.kafka_config))
    n = partition_count(client, args.raw_topic)
    ensure_topics(client, {args.out_topic: n})
    producer = client.producer(acks="all")
    targets = end_offsets(client, args.raw_topic)
    consumer = client.consumer(
        args.group,
        **{
            "partition.assignment.strategy": "cooperative-sticky",
            "fetch.max.bytes": 52428800,
            "queued.max.messages.kbytes": 65536,
        },
    )
    positions: dict[int, int] = {}

    def on_assign(c, parts):
        _mark("partition.assigned", partitions=[tp.partition for tp in parts])
        c.incremental_assign(parts)

    consumer.subscribe([args.raw_topic], on_assign=on_assign)
    started = time.time()
    events = 0
    topic = args.out_topic
    while True:
        msgs = consumer.consume(args.max_batch, 0.1)
        for msg in msgs:
            if msg.error() is not None:
                continue
            produce(producer, topic, msg.value(), msg.key())
            positions[msg.partition()] = msg.offset() + 1
        events += len(msgs)
        producer.poll(0)
        if all(positions.get(p, 0) >= t for p, t in targets.items()):
            break
    flush(producer, 60, topic)
    consumer.commit(offsets=[TopicPartition(args.raw_topic, p, o) for p, o in positions.items()], asynchronous=False)
    _mark("run.available_now_done")
    consumer.close()
    print(json.dumps({"events": events, "started": started, "finished": time.time()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
