"""The processor on a real broker and a real RocksDB: output, restarts, SIGKILL, bad input, memory."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time

import psutil
import pytest

from processor.core import events as ev
from processor.kafka.end_offsets import end_offsets
from processor.kafka.rawtopic import RawTopicWriter
from processor.runtime.runner import Runner
from processor.testing.generator import WorkloadGenerator
from processor.testing.verify import read_topic, verify

from .processor_kit import (
    Topics,
    committed_offsets,
    config,
    feed,
    log_events,
    read_with_headers,
    start_processor,
    write_workload,
)

pytestmark = pytest.mark.integration


def assert_exact(report) -> None:
    """Nothing lost, nothing unexpected, identical content, every transaction whole; duplicates
    (the at-least-once cost) are allowed because consumers deduplicate on event_id."""
    assert report.expected > 0
    assert (report.lost, report.unexpected, report.mismatches) == (0, 0, 0), report.summary()
    assert (report.missing_ends, report.unexpected_ends, report.end_count_mismatches) == (0, 0, 0), report.summary()


@pytest.mark.parametrize("clients", ["auto", "confluent"])
def test_generated_workload_is_emitted_exactly(broker, tmp_path, clients):
    """On both client paths: the native output producer and raw fetch (auto, as `make test` builds
    them) and confluent-kafka's Producer and consume."""
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    summary = write_workload(broker.bootstrap, topics.raw, expected, events=30_000)
    cfg = config(broker.bootstrap, topics, tmp_path / "state", available_now=True)
    runner = Runner(cfg.model_copy(update={"output_producer": clients, "raw_fetch": clients}))
    native = clients == "auto" and os.environ.get("TXBUFFER_CODEC") == "compiled"
    assert type(runner.producer).__name__ == ("NativeProducer" if native else "Producer")
    assert type(runner.fetch).__name__ == ("RawFetch" if native else "ConsumerFetch")
    run = runner.run()
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)
    assert report.duplicates_before_dedup == 0
    assert run.committed == summary["committed"] and run.changes_emitted == summary["changes"]


def test_restart_on_same_state_dir_resumes_without_reemitting(broker, tmp_path):
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    write_workload(broker.bootstrap, topics.raw, expected, events=20_000, seed=11)
    cfg = config(broker.bootstrap, topics, tmp_path / "state", available_now=True)
    first = Runner(cfg).run()
    second = Runner(cfg).run()
    if second.restores:
        assert set(second.restores.values()) == {"local"}
    else:
        # --available-now may finish before any assignment when the group's committed offsets are
        # already at every partition's end (available_now.py): check that this is why.
        ends = end_offsets(broker.bootstrap, topics.raw)
        assert committed_offsets(broker.bootstrap, topics, ends, timeout_s=30) == ends
    assert second.changes_emitted == 0 and first.changes_emitted > 0
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)
    assert report.duplicates_before_dedup == 0


def test_restart_on_empty_state_dir_rebuilds_from_low_watermark(broker, tmp_path):
    """Half the workload, lose the disk, then the rest: the rebuild re-reads from the committed low
    watermark and skips what END records prove was emitted; no change is lost or altered."""
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    # Many open transactions keep the low watermark far behind the head when the disk is lost.
    events = iter(WorkloadGenerator(20_000, seed=5, expected_dir=expected, open_txns=300))
    writer = RawTopicWriter(broker.bootstrap, topics.raw, 4)
    feed(writer, events, 10_000)
    state = tmp_path / "state"
    cfg = config(broker.bootstrap, topics, state, available_now=True)
    first_half = sum(end_offsets(broker.bootstrap, topics.raw).values())
    Runner(cfg).run()
    shutil.rmtree(state)
    feed(writer, events)  # the rest: what the first half left open commits or rolls back now
    second_half = sum(end_offsets(broker.bootstrap, topics.raw).values()) - first_half
    rebuilt = Runner(cfg).run()
    assert set(rebuilt.restores.values()) == {"rebuild-empty"}
    assert rebuilt.events > second_half  # re-read from the low watermark, below the first half's end
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)


def test_sigkill_at_random_instants_loses_nothing(broker, tmp_path):
    topics = Topics.fresh()
    expected = tmp_path / "expected"
    write_workload(broker.bootstrap, topics.raw, expected, events=60_000, seed=3, open_txns=100)
    state = tmp_path / "state"
    cfg = config(broker.bootstrap, topics, state)
    rnd = random.Random(42)
    kills = 0
    for _ in range(4):
        proc = start_processor(cfg, log_path=tmp_path / "processor.log")
        time.sleep(rnd.uniform(4.0, 9.0))  # past the ~3 s group join, into the middle of the work
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        kills += 1
        if kills == 2:
            shutil.rmtree(state, ignore_errors=True)  # one restart also loses its disk
    final = start_processor(cfg, "--available-now", log_path=tmp_path / "processor.log")
    assert final.wait(240) == 0, (tmp_path / "processor.log").read_text()[-3000:]
    report = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert_exact(report)


def _wrong_schema_record() -> bytes:
    """A TransactionEvent's bytes on the raw topic: valid Avro, wrong schema."""
    return ev.encode_transaction(
        {
            "status": "END",
            "id": "zzz",
            "commit_scn": 1,
            "ts_ms": 0,
            "thread": 1,
            "event_count": 3,
            "data_collections": None,
            "input_partition": 0,
            "commit_offset": 5,
            "ordering": None,
            "reason": None,
        }
    )


def _commit_with_string_scn(xid: str) -> bytes:
    """A COMMIT whose producer encoded `scn` as a string: the bytes no longer fit RawEvent."""
    import io
    import json

    import fastavro

    doc = json.load(open(ev.SCHEMA_DIR / "raw_event.avsc"))
    for f in doc["fields"]:
        if f["name"] == "scn":
            f["type"] = "string"
    bad_schema = fastavro.parse_schema(doc)
    record = ev.raw_event(xid, ev.COMMIT, 9, 0)
    record["scn"] = "not-a-number-" * 4
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, bad_schema, record)
    return buf.getvalue()


def test_bad_input_goes_to_dlq_with_reason_and_no_valid_change_is_lost(broker, tmp_path):
    topics = Topics.fresh()
    writer = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    R = ev.raw_event
    writer.write(R("t1", ev.BEGIN, 0, 1))
    writer.write(R("t1", ev.INSERT, 1, 2, table="s.t", key={"id": 1}, after={"id": 1}))
    writer.write_encoded("t1", b"\x00\xff\xfe garbage")
    writer.write_encoded("t1", _wrong_schema_record())
    writer.write_encoded("t1", _commit_with_string_scn("t1"))
    writer.write(R("t1", ev.INSERT, 2, 3, table="s.t", key={"id": 2}, after={"id": 2}))
    writer.write(R("t1", ev.COMMIT, 3, 4))
    writer.flush()
    cfg = config(broker.bootstrap, topics, tmp_path / "state", available_now=True)
    summary = Runner(cfg).run()
    assert summary.dead_letters == 3

    dlq = read_with_headers(broker.bootstrap, topics.dlq)
    assert len(dlq) == 3
    reasons = [h["reason"].decode() for *_, h in dlq]
    assert all(r.strip() for r in reasons), reasons
    assert sorted(h["offset"] for *_, h in dlq) == [b"2", b"3", b"4"]
    assert all(h["source"] == topics.raw.encode() for *_, h in dlq)
    by_offset = {h["offset"]: value for _, _, _, value, h in dlq}
    assert by_offset[b"2"] == b"\x00\xff\xfe garbage"  # the original bytes, untouched
    assert by_offset[b"4"] == _commit_with_string_scn("t1")

    changes = [ev.decode_change(v) for *_, v in read_topic(broker.bootstrap, topics.changes)]
    assert sorted(c["key"]["id"] for c in changes) == [1, 2]
    assert {c["source"]["commit_scn"] for c in changes} == {4}


def test_one_transaction_of_500k_events_stays_under_300mb_rss(broker, tmp_path):
    topics = Topics.fresh()
    writer = RawTopicWriter(broker.bootstrap, topics.raw, partitions=2)
    n = 500_000
    R = ev.raw_event
    writer.write(R("huge", ev.BEGIN, 0, 0))
    template = R("huge", ev.INSERT, 0, 0, table="s.big", key={"id": 0}, after={"id": 0, "pad": "x" * 150})
    for seq in range(1, n + 1):
        template["seq"] = template["scn"] = seq
        template["key"] = {"id": seq}
        template["after"]["id"] = seq
        writer.write(template)
    writer.write(R("huge", ev.COMMIT, n + 1, n + 1))
    writer.flush()

    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    proc = start_processor(cfg, "--available-now", log_path=tmp_path / "processor.log")
    peak = 0
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    assert proc.returncode == 0, (tmp_path / "processor.log").read_text()[-3000:]
    assert peak > 0
    assert peak < 300 * 2**20, f"peak RSS {peak / 2**20:.0f} MB"
    emitted = sum(1 for _ in read_topic(broker.bootstrap, topics.changes))
    assert emitted == n


@pytest.mark.parametrize("guarantee", ["at_least_once_dedup", "exactly_once"])
def test_retention_policy_abandons_old_open_transactions_with_a_dead_letter(broker, tmp_path, guarantee):
    topics = Topics.fresh()
    writer = RawTopicWriter(broker.bootstrap, topics.raw, partitions=1)
    R = ev.raw_event
    writer.write(R("old", ev.INSERT, 1, 1, ts_ms=1_000, table="s.t", key={"id": 1}, after={"id": 1}))
    for i in range(50):  # source time moves on by a minute
        writer.write(
            R(f"n{i}", ev.INSERT, 1, 10 + i, ts_ms=61_000 + i, table="s.t", key={"id": 100 + i}, after={"id": i})
        )
        writer.write(R(f"n{i}", ev.COMMIT, 2, 10 + i, ts_ms=61_000 + i))
    writer.flush()
    cfg = config(
        broker.bootstrap, topics, tmp_path / "state", available_now=True, max_open_age_ms=30_000, commit_interval_ms=50,
        guarantee=guarantee, transactional_id=f"retention-{topics.group}",
    )  # fmt: skip
    runner = Runner(cfg)
    runner.run()
    writer.write(R("old", ev.COMMIT, 2, 200, ts_ms=62_000))  # the late COMMIT
    writer.flush()
    Runner(cfg).run()

    dlq = read_with_headers(broker.bootstrap, topics.dlq)
    reasons = [h["reason"].decode() for *_, h in dlq]
    assert any(r.startswith("abandoned: transaction old") for r in reasons), reasons
    assert any("COMMIT for abandoned transaction old" in r for r in reasons), reasons
    changes = [ev.decode_change(v) for *_, v in read_topic(broker.bootstrap, topics.changes)]
    assert len(changes) == 50 and all(c["source"]["xid"] != "old" for c in changes)


def test_an_idle_processor_has_checkpointed_every_record_it_read(broker, tmp_path):
    """The loop checkpoints a batch only once CHECKPOINT_EVERY_S has passed since the last checkpoint;
    the empty polls of an idle loop write what its last batches left. So once the input stops, the
    store's position covers every record read, and a crash would re-read none (read with `txbuffer
    status`'s read-only store while the processor runs)."""
    from processor.runtime.runner import CHECKPOINT_EVERY_S, IDLE_WAIT_S
    from processor.runtime.status import from_state_dir

    topics = Topics.fresh()
    writer = RawTopicWriter(broker.bootstrap, topics.raw, partitions=4)
    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    log = tmp_path / "processor.log"
    proc = start_processor(cfg, log_path=log)
    try:
        deadline = time.monotonic() + 60
        while not log_events(log, "partition.assigned") and time.monotonic() < deadline:
            time.sleep(0.1)
        R, scn, committed = ev.raw_event, 0, 0
        # A burst every few ms for a while: most batches land within CHECKPOINT_EVERY_S of the last
        # checkpoint and are not checkpointed themselves, the last ones likely among them.
        for burst in range(60):
            for t in range(5):
                xid = f"b{burst}t{t}"
                writer.write(R(xid, ev.BEGIN, 0, scn := scn + 1))
                writer.write(R(xid, ev.INSERT, 1, scn := scn + 1, table="s.t", key={"id": t}, after={"id": t}))
                if t:  # a fifth stay open: their events are staged, and the position still moves on
                    writer.write(R(xid, ev.COMMIT, 2, scn := scn + 1))
                    committed += 1
            writer.flush()
            time.sleep(0.003)
        while time.monotonic() < deadline:
            ends = [value for _, _, _, value, _ in read_with_headers(broker.bootstrap, topics.transactions, 10)]
            if sum(ev.decode_transaction(v)["status"] == "END" for v in ends) >= committed:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"fewer than {committed} ENDs: {log.read_text()[-3000:]}")
        time.sleep(2 * (IDLE_WAIT_S + CHECKPOINT_EVERY_S))  # idle: at least one empty poll past the interval
        status = from_state_dir(cfg.state_dir)
        read_to = {row.partition: row.next_offset for row in status.partitions}
        assert read_to == {p: o for p, o in end_offsets(broker.bootstrap, topics.raw).items() if o > 0}
        assert any(row.reread_from is not None for row in status.partitions)  # open ones stayed staged
    finally:
        proc.terminate()
        proc.wait(60)
