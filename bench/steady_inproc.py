"""The steady workload in process, without Kafka: one partition's share of `bench.run`'s steady input
(interleaved small transactions, 10% rolled back) applied in poll-sized batches by
PartitionEngine.apply_records on RocksDB, committed transactions released by the Emitter into a
sink that only counts, settled and checkpointed per batch, as the runner does. CPU µs per event
for the buffer side (apply + checkpoint) and the emit side (release, END, finish): the project's own
cost, apart from librdkafka's consume and produce.

    .venv/bin/python -m bench.steady_inproc --events 400000 [--batch 5000] [--repeat 5]

Under `py-spy record --native -o out.json -f speedscope -- python -m bench.steady_inproc` it shows
the C frames too.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import tempfile
import time

from confluent_kafka import Message

from bench.workloads import SmallTxns, many_open_events
from processor.core.actions import Committed
from processor.core.engine import STAGE_HORIZON, Filters, PartitionEngine
from processor.runtime.emitter import Emitter
from processor.store.rocks import RocksStore


def consumed(offset: int, key: bytes, value: bytes) -> Message:
    """A record as the consumer hands it over: a confluent-kafka Message, whose offset(), key() and
    value() are C methods (a Python stand-in would add a Python call per field)."""
    return Message(topic="raw", partition=0, offset=offset, key=key, value=value)


# Stands in for the producer's produce(topic, value, key, partition, on_delivery): one C call that
# takes the change and does nothing with it (itertools.chain makes an iterator that never runs).
_PRODUCE = itertools.chain


class CountingSink:
    """Takes outputs like a producer that is always settled: a failure callback is never called.
    Changes have KafkaSink's two paths: send_change, a Python frame around one C call, and
    direct_change_sender, that C call alone (the emitter's loop in C then calls it with no frame)."""

    def __init__(self) -> None:
        self.changes = self.transactions = 0

    def direct_change_sender(self, on_ack):
        return _PRODUCE, -1, on_ack

    def send_change(self, key, value, on_ack) -> None:
        _PRODUCE(value, key, -1, on_ack)

    def send_transaction(self, key, value, on_ack) -> None:
        self.transactions += 1

    def hold_transaction(self, key, value, on_ack) -> None:
        """An END held until the changes before it are acknowledged (KafkaSink on the native producer,
        which at_least_once uses): here, at once, as everything is."""
        self.transactions += 1

    def reclaim_held(self) -> int:
        return 0  # no failure report ever stops the releases

    def settled(self) -> bool:
        return True


def workload(shape: str, events: int, open_txns: int = 50, avg: int = 10) -> list[tuple[bytes, bytes]]:
    """The (key, value) records of one partition's input."""
    if shape == "many_open":
        return many_open_records(events // 3)
    src = SmallTxns("st-", 1, open_txns=open_txns, avg=avg)
    out: list[tuple[bytes, bytes]] = []
    for xid, value, _kind in src.events(lambda: len(out) >= events):
        out.append((xid.encode(), value))
    return out


def many_open_records(n_open: int) -> list[tuple[bytes, bytes]]:
    """bench.workloads.write_many_open's input, in process."""
    return [(xid.encode(), value) for xid, value, _kind in many_open_events(n_open)]


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.steady_inproc")
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--batch", type=int, default=5000, help="records per apply_records call (the poll batch)")
    p.add_argument("--open", type=int, default=50, help="open transactions at once (the steady bench's 200 / 4)")
    p.add_argument("--avg", type=int, default=10, help="mean changes per transaction")
    p.add_argument(
        "--shape",
        choices=("steady", "many_open"),
        default="steady",
        help="many_open: every BEGIN, then one change each, then every COMMIT (bench.run's many_open, "
        "one partition's share: --events 75000 is 25k open transactions)",
    )
    p.add_argument(
        "--stage-horizon",
        type=int,
        default=STAGE_HORIZON,
        help="0: every transaction open at a checkpoint goes to the store (as those older than "
        "STAGE_MAX_AGE_MS do: many_open's, on a machine slow to write its input)",
    )
    p.add_argument(
        "--ends",
        choices=("held", "sent"),
        default="held",
        help="held: each END handed over as soon as its changes are sent, acknowledged at the next "
        "batch's settlement (at_least_once on the native producer); sent: each END sent once its changes "
        "are acknowledged (any other producer)",
    )
    p.add_argument(
        "--repeat", type=int, default=1, help="passes over the same records (fresh state each); the best is shown"
    )
    a = p.parse_args()
    records = [
        consumed(offset, key, value) for offset, (key, value) in enumerate(workload(a.shape, a.events, a.open, a.avg))
    ]
    gc.freeze()  # as the runner does: the startup heap is never collected
    gc.set_threshold(50_000, 20, 100)  # as the runner does
    n = len(records)
    runs = [_run_once(records, a.batch, a.stage_horizon, a.ends == "held") for _ in range(a.repeat)]
    # The minimum of the repeats: the machine's noise only ever adds time.
    sink, buffer_s, emit_s = min(runs, key=lambda r: r[1] + r[2])
    print(
        f"events={n} changes_out={sink.changes} transactions_out={sink.transactions} "
        f"buffer {1e6 * buffer_s / n:.2f} CPU µs/event, emit {1e6 * emit_s / n:.2f} CPU µs/event, "
        f"total {1e6 * (buffer_s + emit_s) / n:.2f} ({n / (buffer_s + emit_s):,.0f} events per CPU second)"
        + (
            f", best of {a.repeat}: totals {sorted(round(1e6 * (b + e) / n, 2) for _, b, e in runs)}"
            if a.repeat > 1
            else ""
        )
    )


def _run_once(
    records: list, batch: int, stage_horizon: int = STAGE_HORIZON, hold_ends: bool = True
) -> tuple[CountingSink, float, float]:
    """One pass of the records through a fresh engine on a fresh store: (sink, buffer s, emit s). With
    hold_ends, a batch's ENDs are held and acknowledged at the next batch's settlement, as at_least_once
    settles by epochs; the last batch's at a final one."""
    with tempfile.TemporaryDirectory() as state:
        store = RocksStore(state)
        engine = PartitionEngine(0, store, Filters(), stage_horizon=stage_horizon)
        sink = CountingSink()
        emitter = Emitter(sink)
        emitter.hold_ends = hold_ends
        buffer_s = emit_s = 0.0
        for i in range(0, len(records), batch):
            t0 = time.process_time()
            actions = engine.apply_records(records[i : i + batch])
            committed = [action.txn for action in actions if isinstance(action, Committed)]
            if any(txn.staged is None for txn in committed):  # as Dispatcher.release_committed
                engine.flush_data()
            t1 = time.process_time()
            for txn in committed:
                emitter.release(engine, txn)
            emitter.advance(settled=True)
            t2 = time.process_time()
            engine.checkpoint()
            t3 = time.process_time()
            buffer_s += (t1 - t0) + (t3 - t2)
            emit_s += t2 - t1
        t0 = time.process_time()
        emitter.advance(settled=True)  # the last batch's held ENDs
        emit_s += time.process_time() - t0
        assert not emitter.queue, f"{len(emitter.queue)} released transactions did not finish"
        store.close()
    sink.changes = emitter.changes_emitted  # by either path
    return sink, buffer_s, emit_s


if __name__ == "__main__":
    main()
