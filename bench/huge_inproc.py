"""One huge transaction in process, without Kafka: buffered through PartitionEngine.apply_records
into RocksDB, then emitted by the Emitter into a sink that acknowledges at once. CPU time per
change for each phase: the buffer's own cost, apart from librdkafka's.

    .venv/bin/python -m bench.huge_inproc --changes 200000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from bench.workloads import _Encoder
from processor.core import events as ev
from processor.core.actions import Committed
from processor.core.engine import Filters, PartitionEngine
from processor.runtime.emitter import Emitter
from processor.store.rocks import RocksStore


class Record:
    """What the consumer hands the engine: offset(), key(), value()."""

    __slots__ = ("_key", "_offset", "_value")

    def __init__(self, offset: int, key: bytes, value: bytes):
        self._offset, self._key, self._value = offset, key, value

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value


class AckingSink:
    def send_change(self, key, value, on_ack) -> None:
        on_ack(None)

    def send_transaction(self, key, value, on_ack) -> None:
        on_ack(None)


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.huge_inproc")
    p.add_argument("--changes", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=5000, help="records per apply_records call (the poll batch)")
    a = p.parse_args()
    enc, xid = _Encoder(random.Random(2)), "huge"
    values = [enc.control(xid, ev.BEGIN, 0)]
    values += [enc.change(xid, seq, seq) for seq in range(1, a.changes + 1)]
    values.append(enc.control(xid, ev.COMMIT, a.changes + 1))
    records = [Record(i, xid.encode(), v) for i, v in enumerate(values)]

    with tempfile.TemporaryDirectory() as state:
        store = RocksStore(state)
        engine = PartitionEngine(0, store, Filters())
        t0 = time.process_time()
        actions = []
        for i in range(0, len(records), a.batch):
            actions += engine.apply_records(records[i : i + a.batch])
            engine.flush_data()
            engine.checkpoint()
        t1 = time.process_time()
        txn = next(x.txn for x in actions if isinstance(x, Committed))
        emitter = Emitter(AckingSink())
        emitter.release(engine, txn)
        t2 = time.process_time()
    n = a.changes
    print(
        f"changes={n} buffer {1e6 * (t1 - t0) / n:.2f} CPU µs/change ({n / (t1 - t0):,.0f}/s)  "
        f"emit {1e6 * (t2 - t1) / n:.2f} CPU µs/change ({n / (t2 - t1):,.0f}/s)  emitted={emitter.changes_emitted}"
    )


if __name__ == "__main__":
    main()
