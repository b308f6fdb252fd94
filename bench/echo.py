"""A continuous passthrough for latency: `python -m bench.echo --bootstrap B --raw-topic T --out-topic O --group G`.

The ceiling (bench.passthrough) stops at the end offsets of its start; this one runs until SIGTERM,
so it can be measured at a paced offered rate like the processor. Same clients: KafkaClientConfig's
consumer and acks=all producer (linger.ms 5, lz4), and the runner's poll: poll_batch (processor/kafka/poll.py)
waits up to --consume-timeout for the first record and takes what is fetched. --poll fill instead waits
for a full batch, librdkafka's consume(max_batch, timeout), which shows what that wait costs at low rates.
Each output record is produced when its input is consumed, so its timestamp is the passthrough's emit time.

--commit-after-ack holds each batch's COMMIT records back until the broker has acknowledged the
batch's other records, as the processor's END waits for its changes (DESIGN.md: END only after every
change is acknowledged): the floor of that contract on this machine, without the buffer's own work.
`flush` waits for them (the processor's way below saturation, before session 47: two flushes a batch); `epochs` goes on
polling and produces them once the native producer's epoch of the batch settled (its way under a
backlog), waking every --ack-wait seconds while COMMITs are held. Both use the processor's native
producer (kafka/_rdkafka_producer.pyx) with delivery.report.only.error.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections import deque

from bench.avro_prefix import first_string
from bench.peers.common import mark
from processor.core import events as ev
from processor.kafka.admin import ensure_topics, partition_count
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.output_producer import output_producer
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
    p.add_argument("--commit-after-ack", choices=("no", "flush", "epochs"), default="no")
    p.add_argument("--ack-wait", type=float, default=0.002, help="epochs: the poll's wait while COMMITs are held")
    p.add_argument("--linger-ms", type=float, default=None, help="the producer's linger.ms (default: the client's)")
    args = p.parse_args(argv)
    client = KafkaClientConfig(args.bootstrap)
    out = args.out_topic
    ensure_topics(client, {out: partition_count(client, args.raw_topic)})
    extra = {} if args.linger_ms is None else {"linger.ms": args.linger_ms}
    if args.commit_after_ack == "no":
        echo: _Echo = _Echo(client.producer(acks="all", **extra), out)
    else:
        conf = client.producer_conf(acks="all", **{"delivery.report.only.error": True}, **extra)
        echo = _CommitAfterAck(output_producer(conf, "native")[0], out, args.commit_after_ack == "flush")
    consumer = client.consumer(args.group, **{"partition.assignment.strategy": "cooperative-sticky"})
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer.subscribe([args.raw_topic], on_assign=lambda c, parts: mark("partition.assigned"))
    while not stop:
        wait_s = args.ack_wait if echo.holding() else args.consume_timeout
        if args.poll == "first":
            msgs = poll_batch(consumer, args.max_batch, wait_s)
        else:
            msgs = consumer.consume(args.max_batch, wait_s)
        echo.batch([msg for msg in msgs if msg.error() is None])
    flush(echo.producer, 60, out)
    consumer.close()
    mark("run.done")
    return 0


class _Echo:
    """Each record produced as it is consumed."""

    def __init__(self, producer, out: str) -> None:
        self.producer, self.out = producer, out

    def holding(self) -> bool:
        return False

    def batch(self, msgs: list) -> None:
        for msg in msgs:
            produce(self.producer, self.out, msg.value(), msg.key())
        self.producer.poll(0)


class _CommitAfterAck(_Echo):
    """A batch's COMMIT records produced once the broker acknowledged its other records: after a flush
    (waiting), or once the native producer's epoch of the batch settled (going on polling)."""

    def __init__(self, producer, out: str, wait: bool) -> None:
        super().__init__(producer, out)
        self.wait = wait
        self.held: deque[tuple[int, list]] = deque()  # (epoch of a batch's other records, its COMMITs)

    def holding(self) -> bool:
        return bool(self.held)

    def batch(self, msgs: list) -> None:
        producer, out = self.producer, self.out
        commits = []
        for msg in msgs:
            if _is_commit(msg.value()):
                commits.append(msg)
            else:
                produce(producer, out, msg.value(), msg.key())
        if self.wait:
            if commits:
                flush(producer, 60, out)
                super().batch(commits)
                flush(producer, 60, out)
            return
        if commits:
            self.held.append((producer.next_epoch(), commits))
        producer.poll(0)
        settled = producer.settled_epoch()
        while self.held and self.held[0][0] <= settled:
            super().batch(self.held.popleft()[1])


# The COMMIT op's index in RawEvent's Op enum, as Avro writes it (zigzag: twice the index, one byte).
_COMMIT_BYTE = 2 * ev.raw_schema()["fields"][1]["type"]["symbols"].index(ev.COMMIT)


def _is_commit(value: bytes) -> bool:
    """The op without decoding the record (a full decode, ~2 µs, kept this echo from keeping up at
    133k events/s): RawEvent begins with xid, a string, then op, an enum."""
    return value[first_string(value)[1]] == _COMMIT_BYTE


if __name__ == "__main__":
    sys.exit(main())
