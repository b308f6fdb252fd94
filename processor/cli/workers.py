"""`txbuffer run --workers N`: N processor processes in one consumer group, on one machine.

The processor is one Python process, so it uses one core. Kafka already shares the raw partitions
among a group's members, so more cores means more members: this starts N copies of the same
command and supervises them. Each worker gets what must not be shared between members:
  * its own state dir, <state_dir>/worker-<i> (a RocksDB directory has one owner);
  * exactly_once: its own transactional.id, <id>-w<i> (two producers with one id fence each
    other); the index is stable, so a restarted worker fences its own zombie and nobody else's;
  * its own metrics port, <port>+i, when metrics are on.
Partitions move between workers as between any instances: a worker that takes over a partition
rebuilds it from the committed low watermark (docs/operations.md).

Supervision: SIGTERM and SIGINT go to every worker. A worker that exits with an error stops the
others and the supervisor exits with its code, so the orchestrator restarts the whole set (a
half-running set would only hide the failure). Workers die with the supervisor (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import structlog

from processor.kafka.embedded import die_with_parent
from processor.runtime.config import ProcessorConfig

log = structlog.get_logger(__name__)

STOP_GRACE_S = 30.0  # a worker's own close is bounded at 20 s after SIGTERM (runtime/stop.py)


def strip_workers_flag(argv: list[str]) -> list[str]:
    """The command line without --workers N / --workers=N."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return out


def worker_overrides(cfg: ProcessorConfig, index: int) -> list[str]:
    """Flags appended to worker `index`'s command line (argparse keeps the last value given)."""
    flags = ["--state-dir", str(Path(cfg.state_dir) / f"worker-{index}")]
    if cfg.guarantee == "exactly_once":
        import socket

        base = cfg.transactional_id or f"{cfg.group}-{socket.gethostname()}"
        flags += ["--transactional-id", f"{base}-w{index}"]
    if cfg.metrics_port:
        flags += ["--metrics-port", str(cfg.metrics_port + index)]
    return flags


def supervise(argv: list[str], cfg: ProcessorConfig, workers: int) -> int:
    base = [sys.executable, "-m", "processor.cli", *strip_workers_flag(argv)]
    procs: list[subprocess.Popen] = []
    stopping = {"signal": 0}

    def forward(signum: int, _frame: object) -> None:
        stopping["signal"] = signum
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for i in range(workers):
            procs.append(subprocess.Popen([*base, *worker_overrides(cfg, i)], preexec_fn=die_with_parent()))
            log.info("workers.started", worker=i, pid=procs[-1].pid)
        failed: tuple[int, int] | None = None
        while any(p.poll() is None for p in procs):
            for i, proc in enumerate(procs):
                rc = proc.poll()
                if rc not in (None, 0) and failed is None and not stopping["signal"]:
                    failed = (i, rc)
                    log.error("workers.worker_failed", worker=i, exit_code=rc, action="stopping the other workers")
                    forward(signal.SIGTERM, None)
                    stopping["signal"] = 0  # a failure, not a requested stop: its code is the result
            time.sleep(0.2)
            if failed is not None:
                _reap(procs)
                break
        codes = [p.wait() for p in procs]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    log.info("workers.done", exit_codes=codes)
    if failed is not None:
        return _exit_status(failed[1])
    return next((_exit_status(rc) for rc in codes if rc != 0), 0)


def _exit_status(rc: int) -> int:
    """A worker killed by signal s (Popen says -s) is reported as 128 + s, as a shell does."""
    return 128 - rc if rc < 0 else rc


def _reap(procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("workers.kill", pid=proc.pid, reason=f"still running {STOP_GRACE_S:g}s after SIGTERM")
            proc.kill()
            proc.wait()
