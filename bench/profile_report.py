"""Summarise a py-spy speedscope profile of the processor: `python -m bench.profile_report FILE [events] [changes]`.

Prints self time per function, inclusive time of the hot-path functions (seconds, % of samples and
microseconds per event / per emitted change) and a category split (Avro decode, Avro encode,
RocksDB, librdkafka, Python logic) in which each sample counts once, for its innermost match.
Produce a profile with `python -m bench.run --quick --only steady --profile`.
"""

from __future__ import annotations

import collections
import json
import sys

CATEGORIES = [  # innermost frame (leaf upwards) that matches decides
    ("decode@events.py", "Avro decode (fastavro, full record)"),
    ("decode_routing@events.py", "Avro decode (fastavro, routing prefix)"),
    ("decode_key_at@events.py", "Avro decode (fastavro, key)"),
    ("encode@events.py", "Avro encode (fastavro)"),
    ("encode_change_spliced@events.py", "Avro encode (fastavro)"),
    ("change_key@events.py", "change_key (json.dumps)"),
    ("RocksStore.write@buffer.py", "RocksDB (write, put, scan, get)"),
    ("RocksBatch.put@buffer.py", "RocksDB (write, put, scan, get)"),
    ("RocksBatch.delete_range@buffer.py", "RocksDB (write, put, scan, get)"),
    ("RocksBatch.delete@buffer.py", "RocksDB (write, put, scan, get)"),
    ("RocksStore.scan@buffer.py", "RocksDB (write, put, scan, get)"),
    ("RocksStore.get@buffer.py", "RocksDB (write, put, scan, get)"),
    ("KafkaSink._produce@sink.py", "librdkafka produce()"),
    ("Txn.to_bytes@txn.py", "checkpoint: Txn.to_bytes (asdict + json)"),
]
HOT = (
    "Runner._process",
    "PartitionEngine.apply",
    "PartitionEngine.apply_decoded",
    "PartitionEngine._change",
    "decode_raw",
    "decode_routing",
    "Emitter.release",
    "iter_changes",
    "change_event_bytes",
    "encode_change_spliced",
    "change_key",
    "KafkaSink.send_change",
    "KafkaSink.send_transaction",
    "Emitter.advance",
    "Emitter._change_acked",
    "Runner._checkpoint_all",
    "Txn.to_bytes",
    "PartitionEngine.flush_data",
    "RocksStore.write",
    "RocksStore.scan",
    "RocksBatch.put",
    "Runner._commit_offsets",
    "Runner.run",
)


def main(argv: list[str]) -> None:
    path = argv[0]
    events = int(argv[1]) if len(argv) > 1 else 0
    changes = int(argv[2]) if len(argv) > 2 else 0
    doc = json.load(open(path))
    frames = doc["shared"]["frames"]
    name = [f"{f['name']}@{f.get('file', '').split('/')[-1]}" for f in frames]
    self_t, incl, cats = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0.0
    for prof in doc["profiles"]:
        for stack, w in zip(prof["samples"], prof["weights"]):
            if not stack:
                continue
            total += w
            names = [name[i] for i in stack]  # root first
            self_t[names[-1]] += w
            for n in set(names):
                incl[n.split("@")[0]] += w
            cat = None
            for n in reversed(names):
                cat = next((c for key, c in CATEGORIES if n == key), None)
                if cat:
                    break
            if cat is None:
                if any(n.startswith("Runner.run@") for n in names):
                    leaf = names[-1]
                    cat = (
                        "librdkafka consume()/poll() (native, attributed to the caller)"
                        if leaf.startswith(("Runner.run@", "Runner._drain@"))
                        else "Python logic (engine/emitter/runner)"
                    )
                else:
                    cat = "startup, imports, shutdown"
            cats[cat] += w

    def per(v: float) -> str:
        s = f"{v:6.2f}s {100 * v / total:5.1f}%"
        if events:
            s += f" {1e6 * v / events:6.1f} us/event"
        if changes:
            s += f" {1e6 * v / changes:6.1f} us/change"
        return s

    print(f"{path}: {total:.2f}s sampled")
    print("\nself time, top 20")
    for k, v in self_t.most_common(20):
        print(f"  {per(v)}  {k}")
    print("\ninclusive, hot path")
    for k in HOT:
        if incl.get(k):
            print(f"  {per(incl[k])}  {k}")
    print("\ncategories (each sample once)")
    for k, v in cats.most_common():
        print(f"  {per(v)}  {k}")


if __name__ == "__main__":
    main(sys.argv[1:])
