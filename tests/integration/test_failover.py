"""Failover on Apache Kafka: three instances in one group lose one; lost-state detection and policy.

Lost state ("retention deleted unread events of an open transaction") is made with a real
AdminClient.delete_records, which moves the raw topic's log start past the group's committed low
watermark. Recreating the raw topic under the processor (delete + create) is the other way to move
the log under it; that test shows what the runner does then.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from processor.core import events as ev
from processor.kafka.end_offsets import end_offsets, start_offsets
from processor.kafka.rawtopic import RawTopicWriter
from processor.testing.verify import read_topic, verify

from .processor_kit import (
    Topics,
    committed_offsets,
    config,
    feed,
    log_events,
    read_with_headers,
    run_args,
    start_processor,
)

pytestmark = pytest.mark.integration

R = ev.raw_event


def wait_until_committed_at_end(bootstrap: str, topics: Topics, procs, timeout_s: float) -> dict:
    ends = end_offsets(bootstrap, topics.raw)
    deadline = time.monotonic() + timeout_s
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"a survivor exited with {proc.returncode}"
        committed = committed_offsets(bootstrap, topics, sorted(ends))
        if all(committed.get(p, -1) >= end for p, end in ends.items()):
            return committed
        time.sleep(1.0)
    raise AssertionError(f"committed low watermarks {committed} never reached the end {ends}")


def assigned_partitions(log_path: Path, after_marker: str | None = None) -> set[int]:
    """Partitions the instance holds per its log (since the marker, if given)."""
    found, armed = set(), after_marker is None
    for line in log_path.read_text(errors="replace").splitlines():
        if after_marker is not None and after_marker in line:
            armed = True
            continue
        if not armed or not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "partition.assigned":
            found.add(rec["partition"])
        elif rec.get("event") in ("partition.revoked", "partition.lost"):
            found.discard(rec["partition"])  # held now, not ever: the group may move partitions early on
    return found


def assert_exact(report) -> None:
    assert report.expected > 0
    assert (report.lost, report.unexpected, report.mismatches, report.order_violations) == (0, 0, 0, 0), (
        report.summary()
    )
    assert (report.missing_ends, report.unexpected_ends, report.end_count_mismatches) == (0, 0, 0), report.summary()


# --------------------------------------------------------------------------- (a) rebalance


def test_three_instances_lose_one_and_the_survivors_finish(broker, tmp_path):
    """Half the workload, three members, SIGKILL one while it works, then the rest of the workload:
    the survivors take over the victim's partitions (after its session times out), restore them from
    the committed low watermark and the END records, and the output is exact."""
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    from processor.testing.generator import WorkloadGenerator

    gen = WorkloadGenerator(80_000, seed=21, expected_dir=expected, open_txns=150)
    writer = RawTopicWriter(broker.bootstrap, topics.raw, partitions=6)
    events = iter(gen)

    feed(writer, events, 40_000)
    logs = [tmp_path / f"instance-{i}.log" for i in range(3)]
    procs = [
        start_processor(config(broker.bootstrap, topics, tmp_path / f"state-{i}"), log_path=logs[i]) for i in range(3)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(assigned_partitions(log) for log in logs) and time.monotonic() < deadline:
            time.sleep(0.5)
        owned = [assigned_partitions(log) for log in logs]
        assert all(owned), f"not every member got partitions: {owned}"
        time.sleep(2.0)  # into the work
        victim = max(range(3), key=lambda i: len(owned[i]))
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(10)
        for i in range(3):
            if i != victim:
                with open(logs[i], "a") as f:
                    f.write("chaos: victim killed\n")
        feed(writer, events)  # the rest, including work for the victim's partitions
        survivors = [p for i, p in enumerate(procs) if i != victim]
        wait_until_committed_at_end(broker.bootstrap, topics, survivors, timeout_s=180)
        taken_over = set().union(
            *(assigned_partitions(logs[i], "chaos: victim killed") for i in range(3) if i != victim)
        )
        assert owned[victim] <= taken_over, f"victim's partitions {owned[victim]} not taken over: {taken_over}"
        for proc in survivors:
            proc.send_signal(signal.SIGTERM)
        for proc in survivors:
            assert proc.wait(60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)


# --------------------------------------------------------------------------- (b) lost state


def _write_open_transaction(bootstrap: str, topic: str) -> None:
    """t1 stays open across offsets 0..8; t2 (offsets 5..7) commits. The committed low watermark stays 0."""
    w = RawTopicWriter(bootstrap, topic, partitions=1)
    w.write(R("t1", ev.BEGIN, 0, 1))
    for seq in range(1, 5):
        w.write(R("t1", ev.INSERT, seq, 1 + seq, table="s.t", key={"id": seq}, after={"id": seq}))
    w.write(R("t2", ev.BEGIN, 0, 10))
    w.write(R("t2", ev.INSERT, 1, 11, table="s.t", key={"id": 100}, after={"id": 100}))
    w.write(R("t2", ev.COMMIT, 2, 12))
    w.write(R("t1", ev.INSERT, 5, 13, table="s.t", key={"id": 5}, after={"id": 5}))
    w.flush()


def _delete_below(broker, topic: str, offset: int) -> None:
    """Move the raw topic's log start to `offset` with DeleteRecords, as retention would."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        future.result()
    assert start_offsets(broker.bootstrap, topic) == {0: offset}


def _run(cfg, *extra: str, log_path: Path, timeout_s: float = 120) -> int:
    """`txbuffer run` as a subprocess."""
    with open(log_path, "ab") as out:
        return subprocess.run(run_args(cfg) + list(extra), stdout=out, stderr=out, timeout=timeout_s).returncode


def _resync_records(bootstrap: str, topic: str) -> list[dict]:
    out = []
    for _, _, _, value in read_topic(bootstrap, topic):
        rec = ev.decode_transaction(value)
        if rec["status"] == "RESYNC_REQUIRED":
            out.append(rec)
    return out


def test_lost_state_fail_policy_stops_with_resync_record_and_dlq(broker, tmp_path):
    topics = Topics.fresh()
    _write_open_transaction(broker.bootstrap, topics.raw)
    cfg = config(broker.bootstrap, topics, tmp_path / "state-a")
    log = tmp_path / "processor.log"
    assert _run(cfg, "--available-now", log_path=log) == 0
    assert committed_offsets(broker.bootstrap, topics, [0]) == {0: 0}  # t1 is open

    _delete_below(broker, topics.raw, 3)
    # Failover to an empty disk: the open t1's first events are gone from the log.
    cfg_b = config(broker.bootstrap, topics, tmp_path / "state-b", lost_state_policy="fail")
    code = _run(cfg_b, "--available-now", "--lost-state-policy", "fail", log_path=log)
    assert code != 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "LostStateError" in text and "below log start 3" in text, text[-3000:]
    lost = log_events(log, "partition.lost_state")
    assert lost and lost[-1]["lost"] == 3 and lost[-1]["low_watermark"] == 0 and lost[-1]["policy"] == "fail"

    resync = _resync_records(broker.bootstrap, topics.transactions)
    assert len(resync) == 1, resync
    assert resync[0]["input_partition"] == 0 and resync[0]["event_count"] == 3 and resync[0]["commit_offset"] == 0
    assert "below log start 3" in resync[0]["reason"]
    dlq = read_with_headers(broker.bootstrap, topics.dlq)
    assert len(dlq) == 1, dlq
    headers = dlq[0][4]
    assert b"below log start 3" in headers["reason"] and headers["partition"] == b"0" and headers["offset"] == b"0"
    # Never continue silently: nothing moved the committed low watermark past the hole.
    assert committed_offsets(broker.bootstrap, topics, [0]) == {0: 0}


def test_lost_state_skip_policy_continues_and_counts_the_loss(broker, tmp_path):
    topics = Topics.fresh()
    _write_open_transaction(broker.bootstrap, topics.raw)
    log = tmp_path / "processor.log"
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-a"), "--available-now", log_path=log) == 0
    _delete_below(broker, topics.raw, 3)
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    w.write(R("t1", ev.COMMIT, 6, 20))  # offset 9
    w.write(R("t3", ev.BEGIN, 0, 21))
    w.write(R("t3", ev.INSERT, 1, 22, table="s.t", key={"id": 300}, after={"id": 300}))
    w.write(R("t3", ev.COMMIT, 2, 23))
    w.flush()

    cfg_b = config(broker.bootstrap, topics, tmp_path / "state-b")
    code = _run(cfg_b, "--available-now", "--lost-state-policy", "skip", log_path=log)
    assert code == 0, log.read_text()[-3000:]
    done = log_events(log, "run.done")
    assert done and done[-1]["lost_events"] == 3, done
    lost = log_events(log, "partition.lost_state")
    assert lost and lost[-1]["policy"] == "skip"
    assert len(_resync_records(broker.bootstrap, topics.transactions)) == 1
    assert len(read_with_headers(broker.bootstrap, topics.dlq)) == 1
    # It went on: t3 (after the hole) is emitted, t2 (emitted before, END record) is not re-emitted.
    changes = [ev.decode_change(v) for *_, v in read_topic(broker.bootstrap, topics.changes)]
    by_xid: dict[str, list[int]] = {}
    for c in changes:
        by_xid.setdefault(c["source"]["xid"], []).append(c["key"]["id"])
    assert by_xid.get("t3") == [300] and by_xid.get("t2") == [100], by_xid
    assert committed_offsets(broker.bootstrap, topics, [0]) == {0: 13}


def test_raw_topic_recreated_under_a_processor_is_not_continued_silently(broker, tmp_path):
    """The raw topic is deleted and recreated (fewer records) while the instance keeps its state dir.

    Kafka drops the group's committed offsets of a deleted topic, so the runner's
    check (committed low watermark < log start) cannot fire; the local store still says
    next_offset=9 with t1 open. The new topic's records 0..3 sit below that position. The runner must
    not skip them silently: it must report lost state (RESYNC_REQUIRED) or process them.
    """
    topics = Topics.fresh()
    _write_open_transaction(broker.bootstrap, topics.raw)
    state = tmp_path / "state"
    cfg = config(broker.bootstrap, topics, state)
    log = tmp_path / "processor.log"
    assert _run(cfg, "--available-now", log_path=log) == 0

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics([topics.raw], operation_timeout=30).values():
        future.result()
    deadline = time.monotonic() + 30
    while topics.raw in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    w.write(R("t9", ev.BEGIN, 0, 100))
    w.write(R("t9", ev.INSERT, 1, 101, table="s.t", key={"id": 900}, after={"id": 900}))
    w.write(R("t9", ev.COMMIT, 2, 102))
    w.write(R("t9b", ev.COMMIT, 0, 103))
    w.flush()
    assert end_offsets(broker.bootstrap, topics.raw) == {0: 4}

    code = _run(cfg, "--available-now", log_path=log)
    resync = _resync_records(broker.bootstrap, topics.transactions)
    emitted = {ev.decode_change(v)["source"]["xid"] for *_, v in read_topic(broker.bootstrap, topics.changes)}
    assert resync or "t9" in emitted, (
        f"exit {code}: the recreated topic's records were skipped silently (no RESYNC_REQUIRED, t9 not "
        f"emitted); log tail:\n{log.read_text()[-2500:]}"
    )


def test_rebuild_does_not_dead_letter_the_tail_of_a_transaction_rolled_back_above_the_low_watermark(broker, tmp_path):
    """t1 begins below the committed low watermark (2, pinned by t2) and is rolled back above it.
    Rolled-back transactions leave no END record, so a rebuild on an empty disk re-reads t1 from its
    middle: its ROLLBACK_TO_SAVEPOINT names a savepoint declared below the watermark. The input is
    valid (found by bench.chaos: "ROLLBACK_TO_SAVEPOINT: unknown savepoint 'sp0' in s3-151"), so
    nothing may go to the DLQ as bad input."""
    topics = Topics.fresh()
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    w.write(R("t1", ev.BEGIN, 0, 1))  # 0
    w.write(R("t1", ev.SAVEPOINT, 1, 2, savepoint="sp0"))  # 1
    w.write(R("t2", ev.BEGIN, 0, 3))  # 2
    w.write(R("t1", ev.INSERT, 2, 4, table="s.t", key={"id": 1}, after={"id": 1}))  # 3
    w.write(R("t1", ev.ROLLBACK_TO_SAVEPOINT, 3, 5, savepoint="sp0"))  # 4
    w.write(R("t1", ev.ROLLBACK, 4, 6))  # 5
    w.write(R("t2", ev.INSERT, 1, 7, table="s.t", key={"id": 2}, after={"id": 2}))  # 6
    w.flush()
    log = tmp_path / "processor.log"
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-a"), "--available-now", log_path=log) == 0
    assert committed_offsets(broker.bootstrap, topics, [0]) == {0: 2}  # t2 open
    assert read_with_headers(broker.bootstrap, topics.dlq) == []

    w.write(R("t2", ev.COMMIT, 2, 8))  # 7
    w.flush()
    # Failover to an empty disk: rebuilt from the committed low watermark 2.
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-b"), "--available-now", log_path=log) == 0
    changes = [ev.decode_change(v) for *_, v in read_topic(broker.bootstrap, topics.changes)]
    assert [(c["source"]["xid"], c["key"]["id"]) for c in changes] == [("t2", 2)]
    dlq = read_with_headers(broker.bootstrap, topics.dlq)
    assert dlq == [], [h["reason"] for *_, h in dlq]


def test_rebuild_drops_a_late_duplicate_commit_like_the_local_store_does(broker, tmp_path):
    """t1 commits at offset 2 and is emitted; the low watermark moves to 3. The source then re-sends
    t1's COMMIT (offset 3). On the same disk the completed index (kept min_completed entries below
    the low watermark) drops it as late. On an empty disk the index is rebuilt only from END records
    with commit_offset >= 3, t1 is unknown, and the duplicate COMMIT opens and commits an empty t1:
    a second END for t1@3 with event_count 0. DESIGN §6.3: the same output on the same or an empty disk."""
    topics = Topics.fresh()
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    w.write(R("t1", ev.BEGIN, 0, 1))  # 0
    w.write(R("t1", ev.INSERT, 1, 2, table="s.t", key={"id": 1}, after={"id": 1}))  # 1
    w.write(R("t1", ev.COMMIT, 2, 3))  # 2
    w.flush()
    log = tmp_path / "processor.log"
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-a"), "--available-now", log_path=log) == 0
    assert committed_offsets(broker.bootstrap, topics, [0]) == {0: 3}
    w.write(R("t1", ev.COMMIT, 2, 3))  # 3: re-sent
    w.flush()
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-b"), "--available-now", log_path=log) == 0
    ends = [ev.decode_transaction(v) for *_, v in read_topic(broker.bootstrap, topics.transactions)]
    ends = [(t["id"], t["event_count"]) for t in ends if t["status"] == "END"]
    assert ends == [("t1", 1)], ends


def test_rebuild_does_not_dead_letter_the_first_attempt_of_a_restarted_transaction(broker, tmp_path):
    """t1 is restarted (a repeated BEGIN: the source re-sent it) while t2, begun in between, stays
    open. The first attempt's events stay in the log, so the committed low watermark must not pass
    them: a rebuild on an empty disk would otherwise re-read the first attempt's tail without its
    start and dead-letter its valid ROLLBACK_TO_SAVEPOINT as "unknown savepoint" (the false DLQ
    records of the kill campaign)."""
    topics = Topics.fresh()
    w = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    w.write(R("t1", ev.BEGIN, 0, 1))  # 0
    w.write(R("t1", ev.SAVEPOINT, 1, 2, savepoint="sp0"))  # 1
    w.write(R("t2", ev.BEGIN, 0, 3))  # 2
    w.write(R("t1", ev.INSERT, 2, 4, table="s.t", key={"id": 1}, after={"id": 1}))  # 3
    w.write(R("t1", ev.ROLLBACK_TO_SAVEPOINT, 3, 5, savepoint="sp0"))  # 4
    w.write(R("t1", ev.BEGIN, 0, 6))  # 5: restart
    w.write(R("t1", ev.INSERT, 1, 7, table="s.t", key={"id": 10}, after={"id": 10}))  # 6
    w.flush()
    log = tmp_path / "processor.log"
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-a"), "--available-now", log_path=log) == 0
    assert read_with_headers(broker.bootstrap, topics.dlq) == []

    w.write(R("t1", ev.COMMIT, 2, 8))  # 7
    w.write(R("t2", ev.INSERT, 1, 9, table="s.t", key={"id": 2}, after={"id": 2}))  # 8
    w.write(R("t2", ev.COMMIT, 2, 10))  # 9
    w.flush()
    # Failover to an empty disk: rebuilt from the committed low watermark.
    assert _run(config(broker.bootstrap, topics, tmp_path / "state-b"), "--available-now", log_path=log) == 0
    dlq = read_with_headers(broker.bootstrap, topics.dlq)
    assert dlq == [], [h["reason"] for *_, h in dlq]
    changes = [ev.decode_change(v) for *_, v in read_topic(broker.bootstrap, topics.changes)]
    assert sorted((c["source"]["xid"], c["key"]["id"]) for c in changes) == [("t1", 10), ("t2", 2)]
