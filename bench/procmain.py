"""The processor as the harness runs it: `python -m bench.procmain --bootstrap ... [--available-now]`.

A thin entry point over processor.runner.Runner, so the benchmark measures the processor alone
(its own process, its own RSS) and does not depend on which CLI subcommands are registered.
Logs are JSON lines on stderr (the harness reads partition.assigned / run.available_now_done);
the run summary is printed as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.procmain")
    for name in (
        "bootstrap",
        "state_dir",
        "group",
        "raw_topic",
        "changes_topic",
        "transactions_topic",
        "dlq_topic",
        "ordering",
        "max_batch",
        "max_hold_ms",
        "guarantee",
    ):
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    p.add_argument("--available-now", action="store_true", default=None)
    args = p.parse_args(argv)

    from processor.runtime.config import load_config
    from processor.runtime.logs import configure_logging
    from processor.runtime.runner import Runner

    configure_logging("json", "INFO")
    overrides = {k: v for k, v in vars(args).items() if v is not None}
    cfg = load_config(None, env={}, overrides=overrides)
    started = time.time()
    summary = Runner(cfg).run()
    out = {k: v for k, v in summary.__dict__.items() if isinstance(v, (int, float, str))}
    out["phases"] = summary.phases.seconds()  # the loop's wall and CPU seconds by phase
    out["stalls"] = summary.phases.stall_list()  # its laps over 50 ms but polls, with when they ended
    out.update(started=started, finished=time.time())
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
