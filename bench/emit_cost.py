"""What handing one change to the producer costs: CPU µs per emitted change of the emitter's
per-change loop (ChangeStream.send_all: the change's key and ChangeEvent written in C, then handed
over) into the native producer, by the two paths a sink can offer (contracts.Sink.direct_change_sender):
`call`, the producer's produce() called with the change's key and value as bytes objects, and
`sender`, the producer's ChangeSender capsule, which takes them from the C buffers they were
written in. No broker: the records stay queued in librdkafka (the queue is sized for all of them),
so only the loop's own work is timed, on the main thread.

    .venv/bin/python -m bench.emit_cost --changes 300000 [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from bench.workloads import SmallTxns
from processor.core import codec
from processor.kafka.output_producer import NativeProducer


def changes(n: int) -> list[tuple[bytes, bytes]]:
    """n buffered change events of the steady workload, as (key, raw) pairs."""
    out: list[tuple[bytes, bytes]] = []
    for xid, value, kind in SmallTxns("ec-", 1, open_txns=50, avg=10).events(lambda: len(out) >= n):
        if kind == "change":
            out.append((xid.encode(), value))
    return out


def run(pairs: list, path: str) -> float:
    """CPU µs per change of one send_all over pairs by `path`, on a fresh producer."""
    module = codec._compiled()["module"]
    producer = NativeProducer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # nothing listens: the records stay queued
            "queue.buffering.max.messages": len(pairs) + 10,
            "queue.buffering.max.kbytes": 2_000_000,
            "delivery.report.only.error": True,
            "message.timeout.ms": 600_000,
            "log_level": 0,
        }
    )

    def report(err, msg) -> None:
        pass

    def refused(key, value, failed) -> None:
        raise AssertionError("the producer refused a change")

    direct = producer.change_sender("ec", report) if path == "sender" else (partial(producer.produce, "ec"), -1, report)
    stream = module.ChangeStream(module.ChangeWriter("x1", 5, 7, 1, None), 0, {})
    stream.sent, stream.last_seq = 0, -1
    t0 = time.thread_time()
    stream.send_all(pairs, refused, "failed", None, direct)
    spent = time.thread_time() - t0
    assert stream.sent == len(pairs)
    del direct
    return spent / len(pairs) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.emit_cost")
    p.add_argument("--changes", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if codec.BACKEND != "compiled":
        raise SystemExit("bench.emit_cost needs the compiled codec")
    pairs = changes(args.changes)
    results: dict[str, list[float]] = {"call": [], "sender": []}
    for _ in range(args.rounds):
        for path in results:
            results[path].append(run(pairs, path))
    for path, us in results.items():
        print(f"{path:7} {min(us):.3f} CPU µs per change (rounds: {', '.join(f'{u:.3f}' for u in us)})")
    print(f"sender / call: {min(results['sender']) / min(results['call']):.2f}")


if __name__ == "__main__":
    main()
