"""guarantee=exactly_once on Apache Kafka: outputs and input offsets commit in one Kafka transaction.

A read_committed consumer, with no deduplication, must see every change exactly once: after a
SIGKILL in the middle of the work, and when a second instance with the same transactional.id
fences the first (a zombie: the fenced one must stop, never commit again).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from processor.cli.options import EXIT_FENCED
from processor.core import events as ev
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.read import read_to_end
from processor.testing.generator import WorkloadGenerator
from processor.testing.verify import verify

from .processor_kit import Topics, config, feed, log_events, start_processor, write_workload
from .test_failover import assert_exact

pytestmark = pytest.mark.integration


def read_committed_event_ids(bootstrap: str, topic: str) -> Counter:
    """event_id -> how many records carry it, as a plain read_committed consumer sees them."""
    seen: Counter = Counter()
    for msg in read_to_end(bootstrap, topic, "eos-reader", **{"isolation.level": "read_committed"}):
        if msg.value() is not None:
            seen[ev.decode_change(msg.value())["event_id"]] += 1
    return seen


def assert_each_change_once(bootstrap: str, topics: Topics, expected: Path, changes: int | None = None) -> None:
    """A read_committed consumer without dedup sees every change exactly once, and verify is exact."""
    seen = read_committed_event_ids(bootstrap, topics.changes)
    assert seen and max(seen.values()) == 1, [e for e, n in seen.items() if n > 1][:5]
    if changes is not None:
        assert sum(seen.values()) == changes
    report = verify(bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)
    assert report.duplicates_before_dedup == 0


def test_sigkill_mid_stream_leaves_each_change_exactly_once_for_a_read_committed_consumer(broker, tmp_path):
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    summary = write_workload(broker.bootstrap, topics.raw, expected, events=40_000, seed=23)
    cfg = config(broker.bootstrap, topics, tmp_path / "state", guarantee="exactly_once")
    log = tmp_path / "processor.log"
    proc = start_processor(cfg, log_path=log)
    deadline = time.monotonic() + 120
    while '"exactly_once.batch' not in log.read_text(errors="replace") and '"progress"' not in log.read_text(
        errors="replace"
    ):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    time.sleep(2.0)  # into the work
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    final = start_processor(cfg, "--available-now", log_path=log)
    assert final.wait(300) == 0, log.read_text()[-3000:]

    assert_each_change_once(broker.bootstrap, topics, expected, summary["changes"])


def test_a_second_instance_with_the_same_transactional_id_fences_the_first(broker, tmp_path):
    """The zombie (first instance) keeps its partition and keeps polling; the second one's
    init_transactions fences it, so the zombie's next transaction fails and it stops. The second
    instance then takes over; the output is exact with no duplicates, no dedup."""
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    gen = WorkloadGenerator(12_000, seed=5, expected_dir=expected, open_txns=20)
    events = iter(gen)
    feed(RawTopicWriter(broker.bootstrap, topics.raw, partitions=1), events, 4_000)
    overrides = {"guarantee": "exactly_once", "transactional_id": f"txbuffer-{topics.group}"}
    log_a, log_b = tmp_path / "zombie.log", tmp_path / "successor.log"
    zombie = start_processor(config(broker.bootstrap, topics, tmp_path / "state-a", **overrides), log_path=log_a)
    successor = None
    try:
        deadline = time.monotonic() + 120
        while not log_events(log_a, "partition.assigned"):
            assert zombie.poll() is None and time.monotonic() < deadline, log_a.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(3.0)  # it commits transactions of its own
        cfg_b = config(broker.bootstrap, topics, tmp_path / "state-b", **overrides)
        successor = start_processor(cfg_b, "--available-now", "--available-now-timeout-ms", "240000", log_path=log_b)
        time.sleep(5.0)  # its init_transactions fences the zombie's producer epoch
        # The rest, by a new writer (its start-up delays it a little): the zombie tries to commit it.
        # Fed at once by the first writer, it often fences the zombie inside a flush, where the exit
        # code is 1, not EXIT_FENCED (seen at a815bed, 3 runs of 3).
        feed(RawTopicWriter(broker.bootstrap, topics.raw, partitions=1), events)
        assert zombie.wait(120) == EXIT_FENCED, log_a.read_text()[-3000:]  # stopped, and said why
        assert successor.wait(300) == 0, log_b.read_text()[-3000:]
        # Its available-now targets were taken before the rest was fed: one more run finishes that.
        final = start_processor(cfg_b, "--available-now", log_path=log_b)
        assert final.wait(300) == 0, log_b.read_text()[-3000:]
    finally:
        for proc in (zombie, successor):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    text_a = log_a.read_text(errors="replace").lower()
    assert "fenced" in text_a, log_a.read_text()[-3000:]

    assert_each_change_once(broker.bootstrap, topics, expected)
