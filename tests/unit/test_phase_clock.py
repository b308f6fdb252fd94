"""The loop's phase clock (processor/runtime/figures.py): wall and CPU seconds per phase, so a slow
run tells computing from waiting."""

from __future__ import annotations

import time

from processor.runtime.figures import PhaseClock, RunSummary


def test_a_wait_counts_as_wall_time_and_work_as_cpu_time_of_its_phase():
    clock = PhaseClock()
    lap = clock.now()
    time.sleep(0.05)
    lap = clock.lap("poll", lap)
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:
        pass
    clock.lap("apply", lap)
    phases = clock.seconds()
    assert list(phases) == ["poll", "apply"]
    assert phases["poll"]["wall_s"] >= 0.05 and phases["poll"]["cpu_s"] < 0.02
    assert phases["apply"]["cpu_s"] >= 0.045 and phases["apply"]["wall_s"] >= phases["apply"]["cpu_s"] - 0.005


def test_laps_of_a_phase_add_up_and_each_run_has_its_own_clock():
    clock = PhaseClock()
    for _ in range(3):
        lap = clock.now()
        time.sleep(0.01)
        clock.lap("settle", lap)
    assert clock.seconds()["settle"]["wall_s"] >= 0.03
    assert clock.seconds()["settle"]["laps"] == 3
    assert RunSummary().phases is not RunSummary().phases


def test_a_phase_keeps_its_longest_lap_apart_from_its_total():
    clock = PhaseClock()
    for pause in (0.001, 0.04, 0.002):
        lap = clock.now()
        time.sleep(pause)
        clock.lap("checkpoint", lap)
    checkpoint = clock.seconds()["checkpoint"]
    assert 40 <= checkpoint["longest_ms"] < checkpoint["wall_s"] * 1000


def test_a_lap_over_the_stall_threshold_is_kept_with_its_phase_cpu_and_end_but_a_poll_is_not():
    clock = PhaseClock()
    for phase, pause in (("settle", 0.06), ("apply", 0.001), ("poll", 0.06)):
        lap = clock.now()
        time.sleep(pause)
        clock.lap(phase, lap)
    (stall,) = clock.stall_list()
    assert stall["phase"] == "settle" and stall["wall_ms"] >= 60 and stall["cpu_ms"] < 20
    assert abs(stall["at"] - time.time()) < 5
