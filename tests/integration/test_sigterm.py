"""SIGTERM is heard in the long waits too (processor/runtime/stop.py), and a stop that cuts one short
commits no input offset the outputs do not cover.

- An index rebuild that an open Kafka transaction holds (read_committed waits up to 300 s): the
  processor exits at once, with no offset committed.
- A broker that hangs (SIGSTOP) while changes wait for their acknowledgements: the close's drains
  would each wait out their 30 s; they share a budget of 20 s from the signal, and nothing is lost.
- A transactional call that never returns (librdkafka#5456: send_offsets_to_transaction ignores its
  timeout when the group coordinator went away): the processor exits within the commit grace plus
  the close budget instead of its 75 s deadline, and the group's committed offsets stay those of the
  last committed batch (the revoke on close must not commit the engines' low watermarks, which are
  past the aborted batch).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
import structlog
from confluent_kafka import OFFSET_INVALID

from processor.core import events as ev
from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import KafkaClientConfig
from processor.runtime import runner as runner_module
from processor.runtime.runner import Runner
from processor.testing.verify import verify

from .processor_kit import Topics, committed_offsets, config, log_events, start_processor, write_workload

pytestmark = pytest.mark.integration


def _committed(bootstrap: str, topics: Topics) -> dict[int, int]:
    return committed_offsets(bootstrap, topics, range(4), timeout_s=20)  # write_workload's 4 partitions


def wait_for_log(path, event: str, timeout_s: float, proc) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = log_events(path, event) if path.exists() else []
        if found:
            return found[0]
        assert proc.poll() is None, f"exited with {proc.returncode}: {path.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {event} within {timeout_s}s: {path.read_text()[-3000:]}")


def test_sigterm_during_an_index_rebuild_held_by_an_open_transaction_exits_at_once(broker, tmp_path):
    topics = Topics.fresh()
    write_workload(broker.bootstrap, topics.raw, tmp_path / "expected", events=2_000, seed=5)
    client = KafkaClientConfig(broker.bootstrap)
    ensure_topics(client, {topics.transactions: 4})
    # Another instance's batch, left open for longer than the test: the rebuild's read_committed
    # read of the transactions topic waits for it (up to 300 s).
    open_txn = client.producer(**{"transactional.id": f"held-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": 600000})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    end = {"status": "END", "id": "x", "commit_scn": 1, "ts_ms": 0, "event_count": 0, "data_collections": None}
    open_txn.produce(topics.transactions, ev.encode_transaction(end), b"x")
    assert open_txn.flush(30) == 0
    log_path = tmp_path / "run.log"
    proc = start_processor(config(broker.bootstrap, topics, tmp_path / "state"), log_path=log_path)
    try:
        wait_for_log(log_path, "index.rebuild_waits", 120, proc)
        time.sleep(1.0)  # inside the wait
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        open_txn.abort_transaction(30)
    print(f"\nindex rebuild: exit {code} {took:.1f}s after SIGTERM")
    assert code == 0, log_path.read_text()[-3000:]
    assert took < 10, f"{took:.1f}s after SIGTERM"  # before: the read waited out its 300 s
    stopped = wait_for_log(log_path, "run.stop_interrupts", 1, proc)
    assert stopped["section"] == "index rebuild"
    assert set(_committed(broker.bootstrap, topics).values()) == {OFFSET_INVALID}  # nothing committed


class StuckOffsets:
    """The producer as ExactlyOnce sees it; send_offsets_to_transaction never returns once `stuck`."""

    def __init__(self, producer, stuck: threading.Event, entered: threading.Event, release: threading.Event):
        self._producer, self.stuck, self.entered, self.release = producer, stuck, entered, release

    def __getattr__(self, name):
        return getattr(self._producer, name)

    def send_offsets_to_transaction(self, *args):
        if not self.stuck.is_set():
            return self._producer.send_offsets_to_transaction(*args)
        self.entered.set()
        self.release.wait(300)
        raise RuntimeError("released by the test")


def test_sigterm_during_a_stuck_exactly_once_commit_exits_within_the_bound_committing_nothing_more(broker, tmp_path):
    topics = Topics.fresh()
    write_workload(broker.bootstrap, topics.raw, tmp_path / "expected", events=20_000, seed=9)
    cfg = config(
        broker.bootstrap, topics, tmp_path / "state", guarantee="exactly_once", max_batch=200,
        transactional_id=f"stuck-{topics.group}",
    )  # fmt: skip
    runner = Runner(cfg)
    stuck, entered, release = threading.Event(), threading.Event(), threading.Event()
    runner.delivery.producer = StuckOffsets(runner.delivery.producer, stuck, entered, release)
    end_batch = runner.delivery.end_batch
    before: dict[int, int] = {}

    def end_batch_then_get_stuck(offsets, consumer, backlog=False):
        if runner.delivery.committed_batches >= 3 and not stuck.is_set():
            before.update(_committed(broker.bootstrap, topics))  # the last committed batch's
            stuck.set()
        return end_batch(offsets, consumer, backlog)

    runner.delivery.end_batch = end_batch_then_get_stuck
    sent: list[float] = []

    def sigterm_once_stuck() -> None:
        if entered.wait(120):
            time.sleep(1.0)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=sigterm_once_stuck, daemon=True)
    killer.start()
    try:
        with structlog.testing.capture_logs() as logs:
            runner.run()
        returned = time.monotonic()
    finally:
        release.set()
        killer.join(5)
    assert sent, "the commit never got stuck"
    took = returned - sent[0]
    print(f"\nstuck commit: run() returned {took:.1f}s after SIGTERM")
    bound = runner_module.COMMIT_GRACE_S + runner_module.CLOSE_BUDGET_S
    assert took < bound, f"{took:.1f}s after SIGTERM (bound {bound}s; before: the 75 s deadline, then close)"
    events = [e["event"] for e in logs]
    assert "run.stopped" in events and "run.partitions_abandoned" in events, events[-20:]
    assert any(v >= 0 for v in before.values()), before  # three batches did commit offsets
    assert _committed(broker.bootstrap, topics) == before


def test_sigterm_while_the_broker_hangs_bounds_the_closing_drains_and_loses_nothing(own_broker, tmp_path):
    """at_least_once_dedup, mid-stream, the broker SIGSTOPped: released changes never get their
    acks, so every drain of the close (the close's, the revoke's, the producer flush) would wait out
    its 30 s. After SIGTERM the close takes at most its budget; the revoke commits nothing that is
    not acknowledged, and a run after the outage finishes the work with nothing lost."""
    broker = own_broker
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    write_workload(broker.bootstrap, topics.raw, expected, events=40_000, seed=13, open_txns=50)
    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    log_path = tmp_path / "run.log"
    proc = start_processor(cfg, log_path=log_path)
    took = None
    try:
        wait_for_log(log_path, "partition.assigned", 120, proc)
        time.sleep(2.0)  # outputs are flowing
        broker.pause()
        try:
            time.sleep(1.0)  # produced records now wait for acknowledgements that do not come
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(90)
            finally:
                took = time.monotonic() - sent
        finally:
            broker.resume()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    print(f"\nhung broker: exit {code} {took:.1f}s after SIGTERM")
    assert code == 0, log_path.read_text()[-3000:]
    bound = runner_module.POLL_GRACE_S + runner_module.CLOSE_BUDGET_S + 5  # + librdkafka's own close
    assert took < bound, f"{took:.1f}s after SIGTERM (bound {bound}s); before: 3 drains of 30 s"

    final = start_processor(cfg, "--available-now", log_path=tmp_path / "final.log")
    assert final.wait(300) == 0, (tmp_path / "final.log").read_text()[-3000:]
    rep = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert rep.ok and rep.lost == 0, rep.summary()
