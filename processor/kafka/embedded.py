"""The embedded broker: one Apache Kafka JVM in KRaft combined mode (broker and controller).

It runs from the official jars (processor/kafka/jars.py resolves them from Maven Central once), so
the demo, the tests and the benchmarks exercise the same broker code as production: transactions,
ListOffsets, DeleteRecords and restarts behave as they do there. Topics live in `data_dir` and
survive stop/kill + restart, which the outage tests rely on.
"""

from __future__ import annotations

import atexit
import base64
import collections
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from processor.kafka import jars

log = structlog.get_logger(__name__)

KAFKA_VERSION = "4.1.1"  # must match deploy/maven/kafka/pom.xml
PR_SET_PDEATHSIG = 1  # linux/prctl.h
BROKER_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"

# Every property here differs from Kafka's default for a reason:
# - one broker, so internal topics need replication factor 1 and min ISR 1;
# - one partition per internal topic: a single broker gains nothing from 50 coordinator partitions,
#   and fewer partitions make the first group join and the restart-time coordinator load faster;
# - no rebalance delay: tests join groups and expect assignments at once;
# - a 3 s broker session (heartbeats every 0.5 s) instead of 9 s: after a SIGKILL the restarted
#   controller refuses the new broker incarnation until the old session expires, so a kill+restart
#   took ~9 s longer than a clean restart;
# - a 16 MB cleaner dedupe buffer instead of 128 MB, which would take a quarter of the 512 MB heap.
# auto.create.topics.enable keeps Kafka's default (true), as production brokers and the images the
# suite used before do: the processor creates its own topics with explicit partition counts, so
# auto-creation only serves tools and tests that produce to a fresh name.
DEFAULT_CONFIG = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
}

# Measured on 2 cores, restart of a formatted data dir: G1 ~7 s, SerialGC ~3.4 s, SerialGC with C1
# only ~2.2 s. C1 only also cost the broker less CPU over 1M produced + consumed records (C2's
# compile threads compete for the two cores), so it suits short-lived brokers: the tests'.
JVM_FLAGS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
# A broker that serves for long (the bench, `txbuffer broker`) gets what Kafka's own scripts give one
# (kafka-server-start.sh's heap, kafka-run-class.sh's G1 settings) and C2. Once warm it answers far
# faster under load: commit-to-END at 133k events/s (bench.latency_probe, rounds 4-6 of 6 on one
# broker) had p50 12-22 ms with these, 28-59 ms with JVM_FLAGS (docs/benchmarks.md, session 44).
SERVER_JVM_FLAGS = (
    "-Xms1G",
    "-Xmx1G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    # The embedded broker shares its machine with the processor and the writer: its GC gets half the
    # cores, not all of them (the JVM's default). On 2 vCPUs two GC threads made 10% of the young
    # pauses last 100-207 ms (median 10 ms), a thread preempted while the other waits for it; one
    # thread: median 14 ms, longest 33 ms. The processor's slowest settling flushes were exactly those
    # pauses (bench.latency_probe at 36k events/s with -Xlog:gc, docs/benchmarks.md, session 45).
    f"-XX:ParallelGCThreads={max(1, (os.cpu_count() or 2) // 2)}",
    "-Djava.awt.headless=true",
)

_running: weakref.WeakSet[EmbeddedKafka] = weakref.WeakSet()


_ports_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def free_port() -> int:
    """A loopback TCP port nothing listened on when asked, never one this process was given before.

    Once the probing socket closes, the kernel may hand the same ephemeral port to the next probe:
    a broker given it for both its listeners fails to format ("two listeners on the same port",
    seen in CI). Remembering what was handed out keeps every port this process asks for distinct."""
    with _ports_lock:
        for _ in range(1000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port
    raise RuntimeError("no free loopback port that this process was not already given")


def random_cluster_id() -> str:
    """A Kafka Uuid string: 16 random bytes, URL-safe base64 without padding, never starting with
    '-' (Kafka's own Uuid.randomUuid rule, so the id never reads as a command-line flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class Listener:
    """An extra client listener, e.g. SASL_SSL for the security tests.

    `config` holds listener-scoped settings; each key is written as
    `listener.name.<name lowercased>.<key>` (e.g. "ssl.keystore.location",
    "scram-sha-256.sasl.jaas.config"). Broker-wide settings such as
    `sasl.enabled.mechanisms` go in EmbeddedKafka.extra_config; SCRAM users are created at format
    time through EmbeddedKafka.format_args (["--add-scram", "SCRAM-SHA-256=[name=u,password=p]"]).
    """

    name: str
    protocol: str = "PLAINTEXT"
    port: int = 0
    config: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass(eq=False)  # identity semantics: instances live in a WeakSet
class EmbeddedKafka:
    """Apache Kafka on loopback ports. Use as a context manager or call start()/stop().

    `data_dir` None means a temporary directory, removed by stop() unless `keep_data`. The work
    dir holds server.properties, the KRaft log dirs (kraft/), the broker log (server.log, unless
    `log_path` is given) and the JVM's own stdout/stderr (jvm.out).
    """

    port: int = 0
    log_path: Path | None = None
    data_dir: Path | None = None
    keep_data: bool = False
    extra_config: dict[str, str] = field(default_factory=dict)
    listeners: list[Listener] = field(default_factory=list)
    format_args: list[str] = field(default_factory=list)
    controller_port: int = 0
    jvm_flags: list[str] = field(default_factory=lambda: list(JVM_FLAGS))
    process: subprocess.Popen | None = field(default=None, init=False)
    version: str | None = field(default=None, init=False)
    _temp_dir: bool = field(default=False, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listener(self, name: str) -> Listener:
        return next(item for item in self.listeners if item.name == name)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> EmbeddedKafka:
        if self.running():
            return self
        libs = jars.ensure_bundle("kafka", KAFKA_VERSION, jars.bundle_pom("kafka"))
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="txbuffer-kafka-"))
            self._temp_dir = True
        self.data_dir = Path(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:
            self.log_path = self.data_dir / "server.log"
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        for item in self.listeners:
            item.port = item.port or free_port()
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))

        started = time.monotonic()
        java = [jars.java_binary(), *self.jvm_flags, *self._log_flags(), "-cp", jars.classpath(libs)]
        try:
            if not (self.data_dir / "kraft" / "meta.properties").exists():
                self._format(java, props)
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.data_dir / "jvm.out", "ab") as out:
                self.process = subprocess.Popen(
                    [*java, "kafka.Kafka", str(props)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=die_with_parent(),
                )
            _running.add(self)
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()  # no JVM left behind; a temporary data dir goes too (the error has the log tail)
            raise
        self.version = self._logged_version(log_offset)
        log.info(
            "kafka.started",
            bootstrap=self.bootstrap,
            version=self.version,
            pid=self.process.pid,
            seconds=round(time.monotonic() - started, 2),
            data_dir=str(self.data_dir),
        )
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after `timeout_s`; then remove a
        temporary data dir unless keep_data."""
        self._terminate(timeout_s)
        if self._temp_dir and not self.keep_data and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if self.log_path is not None and self.data_dir in self.log_path.parents:
                self.log_path = None
            self.data_dir, self._temp_dir = None, False

    def kill(self) -> None:
        """SIGKILL: a crash. The data dir stays; restart() recovers from it as Kafka would."""
        if self.running():
            self.process.kill()
            self.process.wait()
            log.info("kafka.killed", bootstrap=self.bootstrap)

    def restart(self, timeout_s: float = 60.0) -> EmbeddedKafka:
        """Stop (if running) and start again on the same data dir and ports."""
        self._terminate(30.0)
        return self.start(timeout_s)

    def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP (chaos testing): clients see a hung, not a dead, broker.

        kill() only queues the signal; each JVM thread stops when the kernel next schedules it. On
        a loaded machine a network thread can still answer a request sent right after kill(), so
        this returns only once every thread is stopped."""
        os.kill(self.process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not _all_threads_stopped(self.process.pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker pid {self.process.pid} not stopped after {timeout}s")
            time.sleep(0.005)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- configuration -----------------------------------------------------------------------

    def server_properties(self) -> dict[str, str]:
        """The broker's server.properties: listeners and KRaft quorum, DEFAULT_CONFIG, then
        each extra listener's scoped settings, then extra_config (which wins)."""
        host = "127.0.0.1"
        endpoints = {
            BROKER_LISTENER: (BROKER_LISTENER, self.port),
            CONTROLLER_LISTENER: ("PLAINTEXT", self.controller_port),
        }
        endpoints.update({item.name: (item.protocol, item.port) for item in self.listeners})
        urls = ",".join(f"{name}://{host}:{port}" for name, (_, port) in endpoints.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{host}:{self.controller_port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "inter.broker.listener.name": BROKER_LISTENER,
            "listeners": urls,
            "advertised.listeners": urls,
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, (p, _) in endpoints.items()),
            "log.dirs": str(self.data_dir / "kraft"),
            **DEFAULT_CONFIG,
        }
        for item in self.listeners:
            props.update({f"listener.name.{item.name.lower()}.{k}": v for k, v in item.config.items()})
        props.update(self.extra_config)
        return props

    def _log_flags(self) -> list[str]:
        config = jars.maven_dir() / "kafka" / "log4j2.yaml"
        return [f"-Dlog4j2.configurationFile={config}", f"-Dtxbuffer.log.file={self.log_path}"]

    def _format(self, java: list[str], props: Path) -> None:
        """Kafka's StorageTool, once per data dir: a standalone (dynamic) KRaft quorum of one."""
        cmd = [
            *java,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            random_cluster_id(),
            "--config",
            str(props),
            "--standalone",
            *self.format_args,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka storage format failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")

    # -- readiness and shutdown --------------------------------------------------------------

    def _wait_ready(self, timeout_s: float) -> None:
        """Ready means the broker answers a metadata request with itself in it."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        admin = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.process.returncode}:\n{self.log_tail()}")
            if admin is None:
                try:  # no client before the port accepts: librdkafka would log refused connects
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                except OSError:
                    time.sleep(0.1)
                    continue
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
            try:
                if admin.list_topics(timeout=1).brokers:
                    return
            except Exception:  # KafkaException while the broker is still catching up
                time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"kafka not ready on {self.bootstrap} after {timeout_s}s:\n{self.log_tail()}")

    def _logged_version(self, offset: int) -> str | None:
        """The version the broker itself reports (AppInfoParser's "Kafka version: X" line)."""
        with open(self.log_path, "rb") as fh:
            fh.seek(offset)
            found = re.search(rb"Kafka version: (\S+)", fh.read())
        return found.group(1).decode() if found else None

    def _terminate(self, timeout_s: float) -> None:
        if not self.running():
            return
        os.kill(self.process.pid, signal.SIGCONT)  # a paused JVM cannot run its shutdown hook
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("kafka.stop.timeout", bootstrap=self.bootstrap, seconds=timeout_s)
            self.process.kill()
            self.process.wait()
        log.info("kafka.stopped", bootstrap=self.bootstrap, returncode=self.process.returncode)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker log and of the JVM's stdout (crashes land there)."""
        parts = []
        for path in (self.log_path, self.data_dir / "jvm.out" if self.data_dir else None):
            if path is not None and path.exists():
                with open(path, errors="replace") as fh:
                    parts.append(f"--- {path}\n" + "".join(collections.deque(fh, maxlen=lines)))
        return "\n".join(parts)


def die_with_parent():
    """A preexec_fn that asks Linux to SIGTERM the JVM when its parent dies, even by SIGKILL (the
    atexit hook below covers only normal exits). The kernel ties this to the thread that forks,
    so it is set only from the main thread: a broker started from a worker thread would
    otherwise be stopped when that thread ends."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)

    return set_parent_death_signal


@atexit.register
def _stop_leftovers() -> None:
    """A JVM must not outlive the Python process that forgot to stop it."""
    for broker in list(_running):
        broker._terminate(10.0)


def _all_threads_stopped(pid: int) -> bool:
    """True once every thread of pid is in state T (stopped) per /proc/<pid>/task/*/stat."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread exited meanwhile
            continue
        states.append(stat[stat.rindex(")") + 2])  # the comm field may hold spaces and ')'
    return bool(states) and all(state in "tT" for state in states)
