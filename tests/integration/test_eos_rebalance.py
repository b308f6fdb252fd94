"""exactly_once survives a rebalance in the middle of its commit (processor/runtime/eos_recovery.py).

A member joins the group while the first instance holds a batch's Kafka transaction open. The
broker then refuses that batch's offsets (ILLEGAL_GENERATION: the group's generation moved on),
the batch is aborted, and the instance rewinds its partitions to the committed offsets in process:
no exit, a WARNING and txbuffer_eos_aborts_total. A read_committed consumer still sees every change
exactly once.

The race is made deterministic here: the first instance runs in process and, once, takes its group
metadata (member id, generation) before the second instance joins and sends its offsets only after
the group is stable with both members: what happens in bench.chaos when a kill or restart moves the
group on while send_offsets_to_transaction is on its way.
"""

from __future__ import annotations

import json
import time

import pytest
import structlog
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.core import events as ev
from processor.kafka.admin import ensure_topics
from processor.kafka.dlq import read_dlq_headers
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.read import read_to_end
from processor.runtime.metrics import Metrics
from processor.runtime.runner import Runner

from .processor_kit import Topics, config, start_processor, write_workload
from .test_exactly_once import assert_each_change_once

pytestmark = pytest.mark.integration


class StaleGroup:
    """The consumer as end_batch sees it, with group metadata taken before the group moved on."""

    def __init__(self, metadata):
        self.metadata = metadata

    def consumer_group_metadata(self):
        return self.metadata


def wait_for_stable_group(bootstrap: str, group: str, members: int, timeout_s: float, joiner) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        assert joiner.poll() is None, f"the joining instance exited with {joiner.returncode}"
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        if desc.state == ConsumerGroupState.STABLE and len(desc.members) == members:
            return
        assert time.monotonic() < deadline, f"group {group}: {desc.state}, {len(desc.members)} members"
        time.sleep(0.2)


def group_figures(bootstrap: str, topics: Topics) -> str:
    """Committed offsets and end offsets of the raw topic, for a failure message."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topics.group})
    try:
        tps = [TopicPartition(topics.raw, p) for p in range(4)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        ends = {p: c.get_watermark_offsets(TopicPartition(topics.raw, p), timeout=10)[1] for p in range(4)}
    finally:
        c.close()
    return f"committed {committed} ends {ends}\n"


def test_a_member_joining_during_an_exactly_once_commit_is_rewound_in_process_not_fatal(broker, tmp_path):
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    summary = write_workload(broker.bootstrap, topics.raw, expected, events=20_000, seed=31)
    common = {"guarantee": "exactly_once", "available_now": True, "max_batch": 500}
    cfg_a = config(broker.bootstrap, topics, tmp_path / "a", transactional_id=f"a-{topics.group}", **common)
    cfg_b = config(broker.bootstrap, topics, tmp_path / "b", transactional_id=f"b-{topics.group}", **common)
    log_b = tmp_path / "b.log"
    metrics = Metrics()
    runner = Runner(cfg_a, metrics=metrics)
    end_batch = runner.delivery.end_batch
    joiner = []

    def end_batch_while_a_member_joins(offsets, consumer, backlog=False):
        if joiner or runner.delivery.committed_batches < 2 or not runner.delivery.in_transaction:
            return end_batch(offsets, consumer, backlog)
        stale = consumer.consumer_group_metadata()
        joiner.append(start_processor(cfg_b, "--available-now", "--available-now-timeout-ms", "240000", log_path=log_b))
        wait_for_stable_group(broker.bootstrap, topics.group, 2, 90, joiner[0])
        return end_batch(offsets, StaleGroup(stale), backlog)

    runner.delivery.end_batch = end_batch_while_a_member_joins
    try:
        with structlog.testing.capture_logs() as logs:
            try:
                run = runner.run()  # before the recovery: KafkaException ILLEGAL_GENERATION out of here
            finally:
                (tmp_path / "a.log").write_text("\n".join(json.dumps(e, default=str) for e in logs))
        assert joiner, "the batch never reached the hook: the workload is too small"
        assert joiner[0].wait(180) == 0, group_figures(broker.bootstrap, topics) + log_b.read_text()[-3000:]
    finally:
        for proc in joiner:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    recovered = [e for e in logs if e["event"] == "exactly_once.rebalance_recovered"]
    assert recovered and recovered[0]["error"] == "ILLEGAL_GENERATION", [e["event"] for e in logs][-30:]
    assert recovered[0]["log_level"] == "warning"
    assert recovered[0]["partitions"], recovered[0]  # it held partitions and rewound them
    assert metrics.registry.get_sample_value("txbuffer_eos_aborts_total", {"error": "ILLEGAL_GENERATION"}) >= 1
    assert run.events > 0

    assert_each_change_once(broker.bootstrap, topics, expected, summary["changes"])


def test_an_aborted_batch_forgets_its_dead_lettered_changes_so_end_counts_them_once(broker, tmp_path):
    """A change too large for the changes topic is dead-lettered (oversized: dlq) in a batch whose
    Kafka transaction is then aborted before its END: the rewind emits the transaction again and
    dead-letters the change again. Its END must count one dead-lettered change, not the aborted
    attempt's as well (KafkaSink forgets them on the abort)."""
    topics = Topics.fresh()
    ensure_topics(broker.bootstrap, {topics.changes: 1}, config={"max.message.bytes": "100000"})
    writer = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    row = {"table": "s.docs", "key": {"ID": 1}}
    writer.write(ev.raw_event("big", ev.BEGIN, 0, 1))
    writer.write(ev.raw_event("big", ev.INSERT, 1, 2, after={"ID": 1, "DOC": "b" * 300_000}, **row))
    writer.write(ev.raw_event("big", ev.COMMIT, 2, 3))
    small = {"table": "s.docs", "key": {"ID": 2}}
    writer.write(ev.raw_event("small", ev.INSERT, 1, 4, after={"ID": 2, "DOC": "ok"}, **small))
    writer.write(ev.raw_event("small", ev.COMMIT, 2, 5))
    writer.heartbeat(10)
    writer.flush()

    cfg = config(
        broker.bootstrap, topics, tmp_path / "a", guarantee="exactly_once", available_now=True,
        transactional_id=f"a-{topics.group}", oversized="dlq",
    )  # fmt: skip
    runner = Runner(cfg)
    aborted = []

    class AbortsTheBatchThatDeadLettered:
        """The delivery's producer; the commit of the batch that dead-lettered fails as when the
        group moves on mid-commit: the dead letter and the END were written, then aborted."""

        def __init__(self, producer):
            self._producer = producer

        def __getattr__(self, name):
            return getattr(self._producer, name)

        def commit_transaction(self, timeout):
            if aborted or not runner.sink.oversized_changes:
                return self._producer.commit_transaction(timeout)
            aborted.append(True)
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION, "test abort", txn_requires_abort=True))

    runner.delivery.producer = AbortsTheBatchThatDeadLettered(runner.delivery.producer)
    with structlog.testing.capture_logs() as logs:
        runner.run()
    assert aborted and any(e["event"] == "exactly_once.rebalance_recovered" for e in logs)
    assert runner.sink.oversized_changes == 2  # dead-lettered in the aborted batch and again after the rewind

    dead = list(read_to_end(broker.bootstrap, topics.dlq))  # read_committed: the aborted one is gone
    assert [read_dlq_headers(m.headers())["xid"] for m in dead] == ["big"]
    ends = {
        t["id"]: t
        for t in (ev.decode_transaction(m.value()) for m in read_to_end(broker.bootstrap, topics.transactions))
        if t["status"] == "END"
    }
    assert set(ends) == {"big", "small"}
    assert ends["big"]["reason"].startswith("1 change(s) dead-lettered: record too large"), ends["big"]["reason"]
    changes = [ev.decode_change(m.value()) for m in read_to_end(broker.bootstrap, topics.changes)]
    assert [c["source"]["xid"] for c in changes] == ["small"]
