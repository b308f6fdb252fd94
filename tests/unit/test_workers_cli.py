"""What each `txbuffer run --workers N` worker gets of its own (processor/cli/workers.py)."""

from __future__ import annotations

import socket

from processor.cli.workers import strip_workers_flag, worker_overrides
from processor.runtime.config import ProcessorConfig


def test_the_workers_flag_is_removed_in_both_spellings():
    argv = ["--log-format", "json", "run", "--workers", "3", "--group", "g", "--workers=2", "--available-now"]
    assert strip_workers_flag(argv) == ["--log-format", "json", "run", "--group", "g", "--available-now"]


def test_each_worker_has_its_own_state_dir_and_no_transactional_id_under_at_least_once():
    cfg = ProcessorConfig(state_dir="/data/state", group="g")
    assert worker_overrides(cfg, 1) == ["--state-dir", "/data/state/worker-1"]


def test_exactly_once_workers_get_distinct_stable_transactional_ids():
    cfg = ProcessorConfig(state_dir="s", group="g", guarantee="exactly_once")
    ids = [worker_overrides(cfg, i)[3] for i in range(2)]
    assert ids == [f"g-{socket.gethostname()}-w0", f"g-{socket.gethostname()}-w1"]
    given = ProcessorConfig(state_dir="s", guarantee="exactly_once", transactional_id="tx")
    assert worker_overrides(given, 0)[3] == "tx-w0"


def test_metrics_ports_follow_the_worker_index():
    cfg = ProcessorConfig(state_dir="s", metrics_port=9400)
    assert worker_overrides(cfg, 2)[-2:] == ["--metrics-port", "9402"]
