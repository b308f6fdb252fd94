"""The Delta sinks of the Spark stage on a real SparkSession and broker, read back with delta-rs:
current-state tables equal the source tables whatever the arrival order, the change log holds each
event_id once, new columns arrive by schema evolution, and older table versions stay readable."""

from __future__ import annotations

import random

import pytest

from processor.kafka.client_config import make_producer
from processor.kafka.produce import produce_all
from processor.spark.delta_sink import DeltaSinks, state_uri
from processor.spark.job import run_job
from processor.spark.readback import read_changelog, read_state, read_table_rows, state_tables
from processor.testing.expected import apply_changes
from processor.testing.lake_checks import compare_state
from processor.testing.spark_synth import change_event, kafka_record

# Spark on a shared 2-core machine: micro-batches of a few rows can take minutes.
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1500)]

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
    run_job(broker.bootstrap, changes_topic, str(tmp_path / "ck"), out.as_uri(), spark=spark, max_offsets_per_trigger=6)

    assert compare_state(out, reference(events)) == {}
    assert read_state(out)["app.users"] == {
        '{"id":1}': {"id": 1, "name": "ann-final", "vip": True},
        '{"id":3}': {"id": 3, "name": "cy", "score": 1.5, "pic": b"\x00\xff"},
    }
    assert read_state(out)["app.tmp"] == {'{"id":8}': {"id": 8}}


def test_typed_columns_follow_the_value_types(spark, broker, changes_topic, tmp_path):
    from deltalake import DeltaTable

    events = [
        change_event(
            "app.t", {"id": 1}, "c", 10, 1, after={"id": 1, "n": 5, "x": 2, "s": "a", "b": True, "y": b"\x01"}
        ),
        change_event("app.t", {"id": 2}, "c", 11, 1, after={"id": 2, "n": 6, "x": 2.5, "s": "b", "b": False}),
    ]
    produce(broker.bootstrap, changes_topic, events)
    out = tmp_path / "out"
    run_job(broker.bootstrap, changes_topic, str(tmp_path / "ck"), out.as_uri(), spark=spark)
    schema = DeltaTable(str(state_tables(out)["app.t"])).to_pyarrow_table().schema
    types = {f.name: str(f.type) for f in schema}
    assert {k: types[k] for k in ("id", "n", "x", "s", "b", "y")} == {
        "id": "int64",
        "n": "int64",
        "x": "double",  # long and double values in one column make a double
        "s": "string",
        "b": "bool",
        "y": "binary",
    }
    assert read_state(out)["app.t"]['{"id":1}'] == {"id": 1, "n": 5, "x": 2.0, "s": "a", "b": True, "y": b"\x01"}


def test_newer_commits_arriving_first_and_redeliveries_never_lose_to_older_changes(
    spark, broker, changes_topic, tmp_path
):
    events = workload(120, seed=7)
    rng = random.Random(1)
    # The newer half of the commits lands first, so for many keys a later commit (update or delete)
    # is applied before an earlier one arrives; the earlier one must then change nothing.
    newer = [ev for ev in events if ev["source"]["commit_scn"] >= 1600]
    older = [ev for ev in events if ev["source"]["commit_scn"] < 1600]
    dups = rng.sample(events, 60)
    first = newer + rng.sample(dups, 20)
    rng.shuffle(first)
    produce(broker.bootstrap, changes_topic, first, partition_of=lambda ev: rng.randrange(TOPIC_PARTITIONS))
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    run_job(broker.bootstrap, changes_topic, ck, out.as_uri(), spark=spark, dedup_horizon="1000 days")

    second = older[::-1] + dups  # newest-first within the late part, plus at-least-once redeliveries
    produce(broker.bootstrap, changes_topic, second, partition_of=lambda ev: rng.randrange(TOPIC_PARTITIONS))
    summary = run_job(
        broker.bootstrap,
        changes_topic,
        ck,
        out.as_uri(),
        spark=spark,
        max_offsets_per_trigger=150,
        dedup_horizon="1000 days",
    )
    assert summary["dropped_by_watermark"] == 0

    assert compare_state(out, reference(events)) == {}
    ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
    assert len(ids) == len(set(ids)) == len({ev["event_id"] for ev in events})


def test_an_older_insert_arriving_after_a_delete_does_not_bring_the_row_back(spark, broker, changes_topic, tmp_path):
    e = change_event
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    produce(
        broker.bootstrap,
        changes_topic,
        [e("app.k", {"id": 1}, "d", 300, 1), e("app.k", {"id": 2}, "c", 300, 2, after={"id": 2, "v": "new"})],
    )
    run_job(broker.bootstrap, changes_topic, ck, out.as_uri(), spark=spark)
    late = [
        e("app.k", {"id": 1}, "c", 100, 1, after={"id": 1, "v": "old"}),  # committed before the delete
        e("app.k", {"id": 2}, "u", 200, 1, after={"id": 2, "v": "older"}),  # before the row's insert
        e("app.k", {"id": 1}, "u", 400, 1, after={"id": 1, "v": "after-delete"}),  # really newer
    ]
    produce(broker.bootstrap, changes_topic, late[:2])
    run_job(broker.bootstrap, changes_topic, ck, out.as_uri(), spark=spark, dedup_horizon="1000 days")
    assert read_state(out)["app.k"] == {'{"id":2}': {"id": 2, "v": "new"}}
    produce(broker.bootstrap, changes_topic, late[2:])
    run_job(broker.bootstrap, changes_topic, ck, out.as_uri(), spark=spark, dedup_horizon="1000 days")
    assert read_state(out)["app.k"] == {'{"id":1}': {"id": 1, "v": "after-delete"}, '{"id":2}': {"id": 2, "v": "new"}}


def test_a_new_column_arrives_by_schema_evolution_and_time_travel_reads_the_earlier_state(
    spark, broker, changes_topic, tmp_path
):
    e = change_event
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    produce(broker.bootstrap, changes_topic, [e("app.p", {"id": i}, "c", 10 + i, 1, after={"id": i}) for i in range(3)])
    run_job(broker.bootstrap, changes_topic, ck, out.as_uri(), spark=spark)
    path = state_tables(out)["app.p"]
    from deltalake import DeltaTable

    before = DeltaTable(str(path)).version()
    produce(
        broker.bootstrap,
        changes_topic,
        [e("app.p", {"id": 1}, "u", 20, 1, after={"id": 1, "email": "a@x"}), e("app.p", {"id": 2}, "d", 21, 1)],
    )
    run_job(broker.bootstrap, changes_topic, ck, out.as_uri(), spark=spark)

    assert read_state(out)["app.p"] == {'{"id":0}': {"id": 0}, '{"id":1}': {"id": 1, "email": "a@x"}}
    assert "email" in DeltaTable(str(path)).to_pyarrow_table().schema.names
    # Time travel with the second reader: the version before the new column had all three rows.
    assert read_table_rows(path, version=before) == {f'{{"id":{i}}}': {"id": i} for i in range(3)}
    # And with Spark itself.
    old = spark.read.format("delta").option("versionAsOf", before).load(state_uri(out.as_uri(), "app.p"))
    assert sorted(r["id"] for r in old.collect()) == [0, 1, 2] and "email" not in old.columns


def test_a_replayed_micro_batch_is_skipped_by_the_delta_transaction_ids(spark, tmp_path):
    from deltalake import DeltaTable

    from processor.testing.spark_synth import decoded_change, decoded_frame

    df = decoded_frame(spark, [decoded_change("app.r", 1, "c", 10, "a"), decoded_change("app.r", 2, "c", 10, "b")])
    sinks = DeltaSinks((tmp_path / "out").as_uri(), "test-app")
    sinks(df, 0)
    versions = {"changelog": DeltaTable(str(tmp_path / "out" / "changelog")).version()}
    sinks(df, 0)  # Spark replays batch 0 after a crash
    assert DeltaTable(str(tmp_path / "out" / "changelog")).version() == versions["changelog"]
    assert read_changelog(tmp_path / "out", ["event_id"]).num_rows == 2
    history = DeltaTable(str(state_tables(tmp_path / "out")["app.r"])).history()
    assert [h["operation"] for h in history].count("MERGE") == 1


def test_concurrent_merges_keep_newest_wins_tombstones_and_exactly_once(spark, tmp_path):
    """Batches over six tables, newer commits first, MERGEd one table after another and four at a
    time from the thread pool: both lakes equal the source tables, and a batch replayed after a
    crash (a new DeltaSinks, as after a driver restart) adds no Delta version to any table."""
    from deltalake import DeltaTable

    from processor.spark.decode import decode_native

    rng = random.Random(11)
    events = []
    for t in range(3):  # three copies of the two-table workload: six tables
        for ev in workload(40, seed=20 + t):  # commit_scn + t: the event_ids of the copies differ
            table = f"c{t}.{ev['source']['table'].split('.')[1]}"
            scn, seq = ev["source"]["commit_scn"] + t, ev["source"]["seq"]
            events.append(change_event(table, ev["key"], ev["op"], scn, seq, after=ev["after"]))
    newer = [ev for ev in events if ev["source"]["commit_scn"] >= 1200]
    older = [ev for ev in events if ev["source"]["commit_scn"] < 1200]
    rng.shuffle(newer)
    batches = [newer, older[::-1]]  # later deletes land before the inserts they delete

    def frame(batch: list[dict]):
        records = [(bytearray(kafka_record(ev)[1]), 0, i, None) for i, ev in enumerate(batch)]
        schema = "value binary, partition int, offset long, timestamp timestamp"
        return decode_native(spark.createDataFrame(records, schema))

    def versions(out) -> dict:
        paths = {"changelog": out / "changelog", "_deletes": out / "_deletes", **state_tables(out)}
        return {name: DeltaTable(str(p)).version() for name, p in paths.items()}

    class Sinks(DeltaSinks):
        """Keeps the plan the MERGEs read."""

        def merge_state(self, df, *args, **kwargs):
            self.read_plans.append(df._jdf.queryExecution().logical().nodeName())
            return super().merge_state(df, *args, **kwargs)

    def held() -> list[str]:  # persisted RDDs, less Delta's own snapshot caches ("Delta Table State #v")
        rdds = spark.sparkContext._jsc.getPersistentRDDs().values()
        return sorted(str(r) for r in rdds if not (r.name() or "").startswith("Delta Table State"))

    held_before = held()
    lakes = {}
    for threads in (1, 4):
        out = tmp_path / f"lake-{threads}"
        sinks = Sinks(out.as_uri(), "concurrent-test", merge_threads=threads)
        sinks.read_plans = []
        for batch_id, batch in enumerate(batches):
            sinks(frame(batch), batch_id)
            assert held() == held_before  # the batch's cache and checkpoints are freed
        if threads > 1:
            # Concurrent MERGEs share no expression object of the batch's plan (from_avro's
            # options map is not thread-safe): they read a checkpoint of its rows.
            assert sinks.read_plans == ["LogicalRDD"] * len(batches)
        assert set(sinks.written[-1]["merge_s"]) == {f"c{t}.{n}" for t in range(3) for n in ("orders", "items")}
        before = versions(out)
        DeltaSinks(out.as_uri(), "concurrent-test", merge_threads=threads)(frame(batches[0]), 0)  # a replay
        assert versions(out) == before
        assert compare_state(out, reference(events)) == {}
        ids = read_changelog(out, ["event_id"]).column("event_id").to_pylist()
        assert sorted(ids) == sorted(ev["event_id"] for ev in events)
        lakes[threads] = read_state(out)
    assert lakes[1] == lakes[4]
