"""Broker outages mid-stream: a 30 s SIGSTOP, and a stop + restart on the same data dir.

The processor runs as a real subprocess against its own Apache Kafka broker (the outage must not
disturb the session broker). It either rides the outage out or exits with a clear error and is
restarted; either way nothing is lost and nothing is duplicated after dedup, and the metrics
endpoint (and `txbuffer status --url`) shows the outage as a growing broker_contact_age.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.chaos_checks import own_pass
from processor.kafka.admin import KafkaUnavailable
from processor.kafka.embedded import free_port
from processor.kafka.end_offsets import end_offsets
from processor.kafka.rawtopic import RawTopicWriter
from processor.runtime.status import from_url
from processor.testing.generator import WorkloadGenerator
from processor.testing.verify import verify
from tests.integration.processor_kit import Topics, committed_offsets, config, feed, start_processor

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAUSE_S = 30.0


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return next((s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name), None)


def _wait_metric(port: int, name: str, ok, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    value = None
    while time.monotonic() < deadline:
        value = _metric(port, name)
        if value is not None and ok(value):
            return value
        time.sleep(0.5)
    raise AssertionError(f"{name} never satisfied the condition in {timeout_s}s (last {value})")


class Supervised:
    """The processor, restarted if it exits on its own (counted, with its exit codes)."""

    def __init__(self, cfg, port: int, log):
        self.cfg, self.port, self.log = cfg, port, log
        self.exits: list[int] = []
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        return start_processor(self.cfg, "--metrics-port", str(self.port), log_path=self.log)

    def check(self) -> None:
        if self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.proc = self._start()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def _until_done(bootstrap: str, topics: Topics, ends: dict[int, int], proc: Supervised, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        proc.check()
        try:
            committed = committed_offsets(bootstrap, topics, sorted(ends))
        except Exception:
            committed = {}
        if committed and all(committed.get(p, -1) >= end for p, end in ends.items()):
            return
        time.sleep(1.0)
    raise AssertionError(f"the group never reached the end: committed {committed}, ends {ends}")


@pytest.mark.parametrize("outage", ["sigstop-30s", "stop-restart"])
def test_broker_outage_mid_stream_loses_and_duplicates_nothing(own_broker, tmp_path, outage):
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    log = tmp_path / "processor.log"
    cfg = config(own_broker.bootstrap, topics, tmp_path / "state")
    # Half the workload before the outage, the rest after it: the transactions the first half leaves
    # open stay buffered through the outage and commit or roll back after it. (Written whole, the
    # input could be read to its end before the outage began.)
    events = iter(WorkloadGenerator(40_000, seed=3, expected_dir=expected, open_txns=50))
    feed(RawTopicWriter(own_broker.bootstrap, topics.raw, 4), events, 20_000)
    port = free_port()
    proc = Supervised(cfg, port, log)
    # Mid-stream: outputs are flowing, and open transactions hold the committed low watermark back.
    _wait_metric(port, "txbuffer_changes_emitted_total", lambda v: v > 0, 120)
    half = end_offsets(own_broker.bootstrap, topics.raw)
    assert sum(committed_offsets(own_broker.bootstrap, topics, sorted(half)).values()) < sum(half.values())
    healthy = _wait_metric(port, "txbuffer_broker_contact_age_seconds", lambda v: v == v, 30)  # not NaN
    assert healthy < 15

    started = time.monotonic()
    if outage == "sigstop-30s":
        own_broker.pause()
        try:
            # The outage shows while it lasts: in the metrics and in `txbuffer status --url`.
            age = _wait_metric(port, "txbuffer_broker_contact_age_seconds", lambda v: v > 20, PAUSE_S)
            status = from_url(f"http://127.0.0.1:{port}/metrics")
            assert status.totals["broker_contact_age_s"] > 20, status.totals
            time.sleep(max(0.0, PAUSE_S - (time.monotonic() - started)))
        finally:
            own_broker.resume()
    else:
        own_broker.stop()
        age = _wait_metric(port, "txbuffer_broker_contact_age_seconds", lambda v: v > 12, 60)
        status = from_url(f"http://127.0.0.1:{port}/metrics")
        assert status.totals["broker_contact_age_s"] > 12, status.totals
        own_broker.start(timeout_s=120)  # same data dir, same ports
    assert age > 12

    # The rest, once the broker answers again: the processor's contact age falls first (a broker just
    # thawed from SIGSTOP may still refuse a new client's metadata request for a while).
    _wait_metric(port, "txbuffer_broker_contact_age_seconds", lambda v: v < 15, 120)
    deadline = time.monotonic() + 120
    while True:
        try:
            writer = RawTopicWriter(own_broker.bootstrap, topics.raw, 4)
            break
        except KafkaUnavailable:
            if time.monotonic() > deadline:
                raise
    feed(writer, events)
    ends = end_offsets(own_broker.bootstrap, topics.raw)
    _until_done(own_broker.bootstrap, topics, ends, proc, timeout_s=300)
    # Contact is back (the age fell again) and the processor stops cleanly.
    _wait_metric(port, "txbuffer_broker_contact_age_seconds", lambda v: v < 15, 60)
    assert proc.stop() == 0, log.read_text()[-3000:]
    text = log.read_text()
    for code in proc.exits:  # an exit during the outage must say why
        assert code != 0 and ('"level": "error"' in text or "Traceback" in text), (proc.exits, text[-3000:])

    rep = verify(own_broker.bootstrap, expected, topics.changes, topics.transactions)
    assert rep.ok, rep.summary()
    own = own_pass(own_broker.bootstrap, topics.changes, topics.transactions, topics.group)
    assert own["duplicates_after_dedup"] == 0 and not own["order_violations_per_input_partition"], own
