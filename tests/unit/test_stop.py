"""SIGTERM handling (processor/runtime/stop.py) and the backoff of repeated exactly_once recoveries
(processor/runtime/eos_recovery.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from processor.runtime import eos_recovery, stop
from processor.runtime.eos_recovery import BACKOFF_MAX_S, EosRecovery, backoff_s
from processor.runtime.metrics import Metrics
from processor.runtime.stop import Stopping, StopSignal


@pytest.fixture
def installed():
    s = StopSignal()
    s.install()
    stop.set_current(s)
    try:
        yield s
    finally:
        s.uninstall()
        stop.set_current(None)


def sigterm_in(seconds: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(seconds), os.kill(os.getpid(), signal.SIGTERM)), daemon=True)
    t.start()
    return t


def test_outside_a_section_a_signal_only_sets_the_flag(installed):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)
    assert installed.requested


def test_a_zero_grace_section_is_cut_short_at_once(installed):
    sigterm_in(0.2)
    started = time.monotonic()
    with pytest.raises(Stopping, match="index rebuild"), stop.interruptible("index rebuild"):
        threading.Event().wait(30)  # a blocked wait: the signal wakes it
    assert time.monotonic() - started < 2


def test_a_graced_section_that_ends_in_time_is_not_cut(installed):
    sigterm_in(0.1)
    with installed.interruptible("batch commit", 2.0):
        time.sleep(0.5)
    assert installed.requested
    time.sleep(2.0)  # the grace timer was cancelled: nothing fires later


def test_a_graced_section_still_waiting_is_cut_after_its_grace(installed):
    sigterm_in(0.1)
    started = time.monotonic()
    with pytest.raises(Stopping, match="grace of 1s passed"), installed.interruptible("batch commit", 1.0):
        threading.Event().wait(30)
    assert 1.0 <= time.monotonic() - started < 3


def test_a_second_signal_does_not_wait_for_the_grace(installed):
    sigterm_in(0.1)
    sigterm_in(0.4)
    started = time.monotonic()
    with pytest.raises(Stopping), installed.interruptible("close drain", 20.0):
        threading.Event().wait(30)
    assert time.monotonic() - started < 2


def test_a_section_entered_after_the_request_gets_its_grace_or_none(installed):
    installed.request()
    with pytest.raises(Stopping):
        with installed.interruptible("index rebuild"):
            pass
    started = time.monotonic()
    with pytest.raises(Stopping), installed.interruptible("producer flush", 0.5):
        threading.Event().wait(30)
    assert time.monotonic() - started < 2


def test_remaining_budget_counts_from_the_request():
    s = StopSignal()
    assert s.remaining(20, 30) == 30
    s.request()
    assert 19 < s.remaining(20, 30) <= 20
    s.requested_at = time.monotonic() - 25
    assert s.remaining(20, 30) == 0


def test_without_a_run_sections_do_nothing():
    with stop.interruptible("anything"):
        pass


# -- exactly_once recoveries back off --------------------------------------------------------------


def test_backoff_doubles_from_the_second_recovery_in_a_row_and_is_capped():
    assert [backoff_s(n) for n in range(1, 8)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, BACKOFF_MAX_S]
    assert backoff_s(50) == BACKOFF_MAX_S


class FakeParts:
    def __init__(self):
        self.held: dict = {}
        self.to_resume: list = []
        self.cfg = SimpleNamespace(raw_topic="raw")
        self.delivery = SimpleNamespace(committed_batches=0)
        sink = SimpleNamespace(transaction_aborted=lambda: None)
        self.dispatcher = SimpleNamespace(
            committed=[], take_dead_letters=lambda: 0, emitter=SimpleNamespace(errors=[]), sink=sink
        )
        self.changes = 0

    def take_on(self, consumer, partitions):
        return {}

    def pause_finished(self, consumer, starts):
        pass

    def on_change(self):
        self.changes += 1


def test_recoveries_with_no_committed_batch_between_them_back_off(monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(eos_recovery.time, "sleep", waits.append)
    parts = FakeParts()
    metrics = Metrics(CollectorRegistry())
    rec = EosRecovery(parts, consumer=None, producer=SimpleNamespace(poll=lambda _t: 0), metrics=metrics)
    error = KafkaError(KafkaError.ILLEGAL_GENERATION, "moved on")
    for _ in range(4):
        rec.recover(error)
    assert waits == [0.5, 1.0, 2.0] and rec.in_a_row == 4 and rec.backoff_total_s == 3.5
    sample = metrics.registry.get_sample_value
    assert sample("txbuffer_eos_recovery_backoff_seconds_total") == 3.5
    assert sample("txbuffer_eos_recoveries_in_a_row") == 4
    assert sample("txbuffer_eos_aborts_total", {"error": "ILLEGAL_GENERATION"}) == 4
    parts.delivery.committed_batches = 1  # a batch committed: the group settled
    rec.recover(error)
    assert waits == [0.5, 1.0, 2.0] and rec.in_a_row == 1
    assert sample("txbuffer_eos_recoveries_in_a_row") == 1
    rec.recover(error)
    assert waits[-1] == 0.5


def test_a_stop_during_the_backoff_skips_the_restore(installed):
    parts = FakeParts()
    parts.dispatcher.drop_partition = lambda engine: None
    taken: list = []

    def take_on(consumer, partitions):
        taken.append(partitions)
        parts.held[0] = SimpleNamespace(engine=None, move=lambda phase: None)
        return {}

    parts.take_on = take_on
    take_on(None, [])
    taken.clear()
    rec = EosRecovery(parts, consumer=None, producer=SimpleNamespace(poll=lambda _t: 0))
    error = KafkaError(KafkaError.ILLEGAL_GENERATION, "moved on")
    rec.recover(error)
    assert len(taken) == 1
    for _ in range(4):
        rec.in_a_row += 1  # deep into a flapping group: an 8 s wait
    installed.request()
    started = time.monotonic()
    rec.recover(error)
    assert time.monotonic() - started < 1 and len(taken) == 1
