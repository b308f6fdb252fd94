"""The Quix Streams peer: a transaction buffer written the way a Quix Streams user would write it.

`.venv-quix/bin/python -m bench.peers.quix_buffer --bootstrap B --raw-topic T --out-topic O --group G
 --state-dir D --expect N`

The raw topic is keyed by XID, so Quix's per-key state is per-transaction state: each change is
appended to the transaction's list in the RocksDB state store; COMMIT emits the list (Avro in
through Quix's AvroDeserializer, Avro out through its AvroSerializer) and deletes it; ROLLBACK
deletes it. Stops once N changes are out (Quix's `run(count=...)`), or after 30 s without input.
Runs in its own virtualenv (.venv-quix): quixstreams pins confluent-kafka < 2.13.
"""

from __future__ import annotations

import argparse
import json
import sys

from quixstreams import Application, State
from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

from bench.peers.common import CHANGE_OPS, mark, raw_schema


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.peers.quix_buffer")
    for name in ("bootstrap", "raw-topic", "out-topic", "group", "state-dir"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--expect", type=int, required=True, help="changes to emit before stopping")
    args = p.parse_args(argv)

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        use_changelog_topics=False,  # like txbuffer, whose state is rebuilt from the raw topic
    )
    schema = raw_schema()
    raw = app.topic(args.raw_topic, key_deserializer="str", value_deserializer=AvroDeserializer(schema))
    out = app.topic(args.out_topic, key_serializer="str", value_serializer=AvroSerializer(schema))
    counts = {"events": 0, "committed": 0, "rolled_back": 0, "changes_emitted": 0}

    def buffer(event: dict, state: State) -> list[dict]:
        if counts["events"] == 0:
            mark("partition.assigned")  # the first record: the group join is behind us
        counts["events"] += 1
        op = event["op"]
        if op in CHANGE_OPS:
            state.set("changes", [*state.get("changes", []), event])
        elif op == "COMMIT":
            changes = state.get("changes", [])
            state.delete("changes")
            counts["committed"] += 1
            counts["changes_emitted"] += len(changes)
            return changes
        elif op == "ROLLBACK":
            state.delete("changes")
            counts["rolled_back"] += 1
        return []

    sdf = app.dataframe(raw)
    sdf = sdf.apply(buffer, stateful=True, expand=True)
    sdf.to_topic(out, key=lambda change: change["xid"])
    app.run(count=args.expect, timeout=30.0)
    mark("run.available_now_done")
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
