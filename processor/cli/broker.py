"""`txbuffer broker`: run the embedded broker until SIGTERM/SIGINT."""

from __future__ import annotations

import signal
import threading
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("broker", help="run the embedded Apache Kafka broker (KRaft) and print its bootstrap address")
    p.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    p.add_argument("--data-dir", default=None, help="keep topics here across restarts (default: a temporary dir)")
    p.set_defaults(func=run)


def run(args) -> int:
    from processor.kafka.embedded import SERVER_JVM_FLAGS, EmbeddedKafka

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    data_dir = Path(args.data_dir) if args.data_dir else None
    # It serves until stopped: the JVM Kafka's own scripts give a broker, not the tests' quick-start one.
    broker = EmbeddedKafka(
        port=args.port, data_dir=data_dir, keep_data=data_dir is not None, jvm_flags=list(SERVER_JVM_FLAGS)
    ).start()
    print(broker.bootstrap, flush=True)
    try:
        while not stop.wait(1.0):
            if broker.process.poll() is not None:
                return 1
    finally:
        broker.stop()
    return 0
