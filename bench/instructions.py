"""Instructions per steady event, counted by valgrind's callgrind: a figure the machine's load does
not move, for changes too small to see in timed runs on a noisy 2-core machine.

    .venv/bin/python -m bench.instructions [--events 120000] [--avg 10]

It runs bench.steady_inproc's loop (the engine and the emitter in process, no Kafka) under callgrind
twice, on the first third of the records and on all of them, and prints the difference per event:
the start-up (imports, the records' loading) cancels out. Instructions are not time (cache misses and
branches are not counted), so a claimed speed-up still comes from the timed benchmarks; this tells
whether a change removed work. Needs valgrind (Debian: `apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.steady_inproc import _run_once, consumed, workload
from processor.core.engine import STAGE_HORIZON


def _write_records(path: Path, shape: str, events: int, avg: int) -> None:
    """Both runs' inputs in one file, so that both children load and build the same records. A steady
    small run is the first third of the big one's records; a many_open one is a third of the
    transactions, each with its BEGIN, change and COMMIT."""
    big = workload(shape, events, avg=avg)
    small = big[: events // 3] if shape == "steady" else workload(shape, events // 3)
    path.write_bytes(pickle.dumps([[(o, k, v) for o, (k, v) in enumerate(run)] for run in (small, big)]))


def _run(path: str, which: int, batch: int, stage_horizon: int, hold_ends: int) -> None:
    """The measured child: load and build every record of both runs (the same work at both sizes, so
    it cancels out), then one pass of the loop over run `which` (0 small, 1 big)."""
    runs = [[consumed(o, k, v) for o, k, v in run] for run in pickle.loads(Path(path).read_bytes())]
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)  # as the runner
    _run_once(runs[which], batch, stage_horizon, bool(hold_ends))


def _instructions(path: Path, which: int, a: argparse.Namespace, out: Path) -> int:
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", "bench.instructions",
         "--child", str(path), str(which), str(a.batch), str(a.stage_horizon), str(int(a.ends == "held"))],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # str hashes, and so dict probing, the same every run
    )  # fmt: skip
    total = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
    if total is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(total.group(1))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _run(sys.argv[2], *map(int, sys.argv[3:7]))
        return
    p = argparse.ArgumentParser(prog="bench.instructions")
    p.add_argument("--events", type=int, default=120_000)
    p.add_argument("--avg", type=int, default=10, help="mean changes per transaction")
    p.add_argument(
        "--shape",
        choices=("steady", "many_open"),
        default="steady",
        help="many_open: n/3 BEGINs, a change each, n/3 COMMITs; the small run is then a third of the "
        "transactions, each whole",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=5000,
        help="records per engine per batch (bench.run's 5000-record polls over 4 partitions: ~1250 each)",
    )
    p.add_argument("--stage-horizon", type=int, default=STAGE_HORIZON, help="0: open transactions go to the store")
    p.add_argument(
        "--ends", choices=("held", "sent"), default="held", help="bench.steady_inproc's --ends (held: at_least_once's)"
    )
    a = p.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="txb-instructions-") as tmp:
        records = Path(tmp) / "records.pkl"
        _write_records(records, a.shape, a.events, a.avg)
        small, big = pickle.loads(records.read_bytes())
        counts = [_instructions(records, which, a, Path(tmp) / f"callgrind.{which}") for which in (0, 1)]
        small, big = len(small), len(big)
    per_event = (counts[1] - counts[0]) / (big - small)
    shape = f"avg {a.avg} changes" if a.shape == "steady" else "many_open"
    print(
        f"{per_event:,.0f} instructions per event (callgrind, {small:,} -> {big:,} events, {shape}, batch {a.batch}, "
        f"stage horizon {a.stage_horizon}, ENDs {a.ends})"
    )


if __name__ == "__main__":
    main()
