"""The Spark stage's sinks on a real local SparkSession and broker: exactly-once change log and
current-state tables that equal the source tables whatever the arrival order."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from processor.kafka.clients import make_producer, produce_all
from processor.spark.job import run_job
from processor.spark.readback import committed_changelog_files, read_changelog, read_state
from processor.testing.expected import apply_changes
from processor.testing.spark_synth import change_event, kafka_record

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC_PARTITIONS = 3


def reference(events: list[dict]) -> dict:
    """What the source tables hold: every distinct change applied in (commit_scn, seq) order."""
    unique = {e["event_id"]: e for e in events}.values()
    ordered = sorted(unique, key=lambda e: (e["source"]["commit_scn"], e["source"]["seq"]))
    return apply_changes(
        {"table": e["source"]["table"], "op": e["op"], "key": e["key"], "after": e["after"]} for e in ordered
    )


def produce(bootstrap: str, topic: str, events: list[dict], partition_of=None) -> None:
    records = [(*kafka_record(e), partition_of(e) if partition_of else None) for e in events]
    produce_all(make_producer(bootstrap), topic, records)


def workload(n_txns: int, seed: int) -> list[dict]:
    """Committed transactions over two tables, with updates, deletes and re-inserts of few keys."""
    rng = random.Random(seed)
    live: dict[tuple[str, int], dict] = {}
    events = []
    for t in range(n_txns):
        commit_scn = 1000 + 10 * t
        for seq in range(1, rng.randint(2, 5)):
            table = rng.choice(["inv.orders", "inv.items"])
            k = rng.randint(0, 19)
            key = {"id": k} if table == "inv.orders" else {"region": "eu", "id": k}
            if (table, k) in live and rng.random() < 0.3:
                op, after = "d", None
                live.pop((table, k))
            else:
                op = "u" if (table, k) in live else "c"
                after = {
                    **key,
                    "qty": rng.randint(0, 99),
                    "price": rng.random() * 10,
                    "blob": bytes([t % 256]),
                    "note": None if rng.random() < 0.2 else f"t{t}",
                }
                live[(table, k)] = after
            events.append(change_event(table, key, op, commit_scn, seq, xid=f"x{t}", after=after, total_order=seq))
    return events


def test_final_state_after_deletes_and_reinserts_of_the_same_key_and_a_truncate(spark, broker, changes_topic, tmp_path):
    e = change_event
    events = [
        e("app.users", {"id": 1}, "c", 100, 1, after={"id": 1, "name": "ann", "vip": False}),
        e("app.users", {"id": 2}, "c", 100, 2, after={"id": 2, "name": "bob", "vip": True}),
        e("app.users", {"id": 1}, "d", 110, 1),
        e("app.users", {"id": 1}, "c", 120, 1, after={"id": 1, "name": "ann-again", "vip": True}),
        e("app.users", {"id": 2}, "d", 130, 1),
        e("app.users", {"id": 2}, "c", 130, 2, after={"id": 2, "name": "bob-2", "vip": None}),
        e("app.users", {"id": 2}, "d", 130, 3),  # deleted again in the same transaction
        e("app.users", {"id": 3}, "c", 140, 1, after={"id": 3, "name": "cy", "score": 1.5, "pic": b"\x00\xff"}),
        e("app.tmp", {"id": 7}, "c", 150, 1, after={"id": 7}),
        e("app.tmp", None, "t", 160, 1),  # truncate: everything before it goes
        e("app.tmp", {"id": 8}, "c", 170, 1, after={"id": 8}),
        e("app.users", {"id": 1}, "u", 180, 1, after={"id": 1, "name": "ann-final", "vip": True}),
    ]
    produce(broker.bootstrap, changes_topic, events, partition_of=lambda ev: 0)
    out = tmp_path / "out"
    run_job(broker.bootstrap, changes_topic, str(tmp_path / "ck"), str(out), spark=spark, max_offsets_per_trigger=6)

    assert read_state(out) == reference(events)
    assert read_state(out)["app.users"] == {
        '{"id":1}': {"id": 1, "name": "ann-final", "vip": True},
        '{"id":3}': {"id": 3, "name": "cy", "score": 1.5, "pic": b"\x00\xff"},
    }
    assert read_state(out)["app.tmp"] == {'{"id":8}': {"id": 8}}


def test_duplicated_and_cross_partition_reordered_input_yields_the_source_tables(
    spark, broker, changes_topic, tmp_path
):
    events = workload(120, seed=7)
    rng = random.Random(1)
    # The newer half of the commits lands first, in a different partition from the older half, so
    # for many keys a later commit arrives (and is applied) before an earlier one.
    newer = [ev for ev in events if ev["source"]["commit_scn"] >= 1600]
    older = [ev for ev in events if ev["source"]["commit_scn"] < 1600]
    dups = rng.sample(events, 60)
    first = newer + rng.sample(dups, 20)
    rng.shuffle(first)
    produce(broker.bootstrap, changes_topic, first, partition_of=lambda ev: rng.randrange(TOPIC_PARTITIONS))
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    run_job(broker.bootstrap, changes_topic, ck, str(out), spark=spark)

    second = older[::-1] + dups  # newest-first within the late part, plus at-least-once redeliveries
    produce(broker.bootstrap, changes_topic, second, partition_of=lambda ev: rng.randrange(TOPIC_PARTITIONS))
    run_job(broker.bootstrap, changes_topic, ck, str(out), spark=spark, max_offsets_per_trigger=150)

    assert read_state(out) == reference(events)
    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    assert len(ids) == len(set(ids)) == len({ev["event_id"] for ev in events})


JOB_SCRIPT = textwrap.dedent("""
    import sys
    from processor.runtime.logs import configure_logging
    from processor.spark.job import run_job
    configure_logging("json", "INFO")
    run_job(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], max_offsets_per_trigger=int(sys.argv[5]))
""")


def test_change_log_has_each_event_id_once_after_the_driver_is_killed_mid_stream(
    spark, broker, changes_topic, tmp_path
):
    events = workload(400, seed=3)
    redelivered = random.Random(5).sample(events, 100)
    produce(broker.bootstrap, changes_topic, events + redelivered)
    out, ck = tmp_path / "out", tmp_path / "ck"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB_SCRIPT, broker.bootstrap, changes_topic, str(ck), str(out), "400"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Kill as soon as the first batch is in the change log: later batches are planned or running.
        deadline = time.monotonic() + 180
        while not (out / "changelog" / "_commits" / "0").exists():
            assert proc.poll() is None, "the job exited before its first batch"
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.2)
        time.sleep(1.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    partial = read_changelog(out, ["event_id"]).num_rows
    assert 0 < partial < len({ev["event_id"] for ev in events}), "the kill did not land mid-stream"

    run_job(broker.bootstrap, changes_topic, str(ck), str(out), spark=spark, max_offsets_per_trigger=400)

    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    assert sorted(ids) == sorted({ev["event_id"] for ev in events})
    # Spark's own reader (no commit filtering) sees the same: nothing uncommitted was left behind.
    assert set(out.glob("changelog/table=*/*.parquet")) == set(committed_changelog_files(out))
    assert spark.read.parquet(str(out / "changelog")).select("event_id").count() == len(ids)
    assert read_state(out) == reference(events)
