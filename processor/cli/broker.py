"""`txbuffer broker`: run the embedded broker until SIGTERM/SIGINT."""

from __future__ import annotations

import signal
import threading


def register(sub) -> None:
    p = sub.add_parser(
        "broker", help="run the embedded Kafka-compatible broker (Tansu) and print its bootstrap address"
    )
    p.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.kafka.tansu import EmbeddedBroker

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    broker = EmbeddedBroker(port=args.port).start()
    print(broker.bootstrap, flush=True)
    try:
        while not stop.wait(1.0):
            if broker.process.poll() is not None:
                return 1
    finally:
        broker.stop()
    return 0
