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

from bench.steady_inproc import _run_once, consumed
from bench.workloads import SmallTxns


def _write_records(path: Path, events: int, avg: int) -> None:
    src = SmallTxns("st-", 1, open_txns=50, avg=avg)
    records: list[tuple[int, bytes, bytes]] = []
    for xid, value, _kind in src.events(lambda: len(records) >= events):
        records.append((len(records), xid.encode(), value))
    path.write_bytes(pickle.dumps(records))


def _run(path: str, n: int) -> None:
    """The measured child: load and build every record (the same work at both sizes, so it cancels
    out), then one pass of the loop over the first n."""
    records = [consumed(o, k, v) for o, k, v in pickle.loads(Path(path).read_bytes())]
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)  # as the runner
    _run_once(records[:n], 5000)


def _instructions(path: Path, n: int, out: Path) -> int:
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", "bench.instructions",
         "--child", str(path), str(n)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # str hashes, and so dict probing, the same every run
    )  # fmt: skip
    total = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M)
    if total is None:
        raise RuntimeError(f"no instruction total in {out}")
    return int(total.group(1))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _run(sys.argv[2], int(sys.argv[3]))
        return
    p = argparse.ArgumentParser(prog="bench.instructions")
    p.add_argument("--events", type=int, default=120_000)
    p.add_argument("--avg", type=int, default=10, help="mean changes per transaction")
    a = p.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="txb-instructions-") as tmp:
        records = Path(tmp) / "records.pkl"
        _write_records(records, a.events, a.avg)
        small, big = a.events // 3, a.events
        counts = [_instructions(records, n, Path(tmp) / f"callgrind.{n}") for n in (small, big)]
    per_event = (counts[1] - counts[0]) / (big - small)
    print(f"{per_event:,.0f} instructions per event (callgrind, {small:,} -> {big:,} events, avg {a.avg} changes)")


if __name__ == "__main__":
    main()
