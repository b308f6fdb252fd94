"""A minimal transaction buffer, as a user would write it by hand: confluent-kafka + rocksdict.

`python -m bench.peers.rocksdict_buffer --bootstrap B --raw-topic T --out-topic O --group G --state-dir D`

One RocksDB key per buffered change (xid + seq), one WriteBatch per poll batch. On COMMIT the
transaction's changes are produced in seq order, unchanged (Avro bytes in, Avro bytes out) and
deleted; on ROLLBACK they are deleted. No undo, savepoints, LOBs, filters, ordering, END records,
DLQ or crash consistency between the store and the offsets. Stops at the end offsets seen at start.
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import sys

import fastavro
from confluent_kafka import Consumer, Producer, TopicPartition
from rocksdict import Options, Rdict, WriteBatch

from bench.peers.common import CHANGE_OPS, mark, raw_schema


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.peers.rocksdict_buffer")
    for name in ("bootstrap", "raw-topic", "out-topic", "group", "state-dir"):
        p.add_argument("--" + name, required=True)
    args = p.parse_args(argv)
    schema = fastavro.parse_schema(raw_schema())
    db = Rdict(args.state_dir, Options(raw_mode=True))
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        }
    )
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "lz4"})
    # Stop where the topic ended at start, like `txbuffer run --available-now`.
    meta = consumer.list_topics(args.raw_topic, timeout=30).topics[args.raw_topic].partitions
    targets = {n: consumer.get_watermark_offsets(TopicPartition(args.raw_topic, n), timeout=30)[1] for n in meta}
    consumer.subscribe([args.raw_topic], on_assign=lambda c, parts: mark("partition.assigned"))
    positions: dict[int, int] = {}
    counts = {"events": 0, "committed": 0, "rolled_back": 0, "changes_emitted": 0}
    failed: list[str] = []

    def delivered(err, msg):
        if err is not None:
            failed.append(str(err))

    while not all(positions.get(n, 0) >= t for n, t in targets.items()):
        batch = WriteBatch(raw_mode=True)
        for msg in consumer.consume(5000, 0.1):
            if msg.error() is not None:
                continue
            positions[msg.partition()] = msg.offset() + 1
            counts["events"] += 1
            e = fastavro.schemaless_reader(io.BytesIO(msg.value()), schema)
            xid, op = e["xid"], e["op"]
            prefix = xid.encode() + b"\0"
            if op in CHANGE_OPS:
                batch.put(prefix + struct.pack(">Q", e["seq"]), msg.value())
            elif op in ("COMMIT", "ROLLBACK"):
                db.write(batch)  # the transaction's changes from this batch too
                batch = WriteBatch(raw_mode=True)
                for key, value in db.items(from_key=prefix):
                    if not key.startswith(prefix):
                        break
                    if op == "COMMIT":
                        producer.produce(args.out_topic, value, xid.encode(), on_delivery=delivered)
                        counts["changes_emitted"] += 1
                    batch.delete(key)  # per key: range tombstones make every later iterator slower
                counts["committed" if op == "COMMIT" else "rolled_back"] += 1
        db.write(batch)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"outputs not delivered: {failed[:3]}")
    consumer.commit(offsets=[TopicPartition(args.raw_topic, n, o) for n, o in positions.items()], asynchronous=False)
    mark("run.available_now_done")
    consumer.close()
    db.close()
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
