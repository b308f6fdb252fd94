"""The workload generator: deterministic by seed, rich enough, memory-bounded, and its by-construction
expected output agrees with the reference model."""

from __future__ import annotations

import collections
import filecmp

import pytest

from processor.core import events
from processor.core.partitioning import fan_out, murmur2, partition_of
from processor.testing import expected
from processor.testing.generator import WorkloadGenerator, generate
from processor.testing.reference import ReferenceModel
from processor.testing.tables import BULK_TABLE

PARTITIONS = 4


def expected_from_reference(model: ReferenceModel) -> list[dict]:
    """The reference model's committed changes, flattened to expected-file lines, in global commit order."""
    return [
        {
            "event_id": c["event_id"],
            "xid": c["source"]["xid"],
            "seq": c["source"]["seq"],
            "commit_scn": c["source"]["commit_scn"],
            "table": c["source"]["table"],
            "op": c["op"],
            "key": c["key"],
            "before": c["before"],
            "after": c["after"],
            "ddl": c["ddl"],
        }
        for txn in model.all_committed()
        for c in txn.changes
    ]


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    directory = tmp_path_factory.mktemp("expected")
    evs = list(
        generate(20_000, seed=11, open_txns=60, expected_dir=directory, heartbeat_every=500, duplicate_rate=0.01)
    )
    model = ReferenceModel().feed_all(fan_out(evs, PARTITIONS))
    return evs, directory, model


def test_expected_output_equals_the_reference_model(workload):
    _evs, directory, model = workload
    want = list(expected.read_changes(directory))
    assert len(want) > 5000
    assert expected_from_reference(model) == want
    assert model.dlq == []
    assert all(not per for per in model.open.values())  # every transaction ended


def test_per_partition_commit_order_is_the_global_order_filtered(workload):
    _, directory, model = workload
    global_order = [t["xid"] for t in expected.read_transactions(directory)]
    for p in range(PARTITIONS):
        mine = [xid for xid in global_order if partition_of(xid, PARTITIONS) == p]
        assert [t.xid for t in model.committed[p]] == mine


def test_expected_transactions_match_the_reference_end_records(workload):
    _, directory, model = workload
    want = list(expected.read_transactions(directory))
    got = [
        {
            "xid": t.xid,
            "commit_scn": t.commit_scn,
            "commit_ts_ms": t.commit_ts_ms,
            "event_count": t.end_record()["event_count"],
            "data_collections": t.end_record()["data_collections"],
        }
        for t in model.all_committed()
    ]
    assert got == want
    assert any(t["event_count"] == 0 for t in want)  # empty committed transactions exist too


def test_final_state_is_the_committed_changes_applied_in_commit_order(workload):
    _, directory, model = workload
    summary = expected.read_summary(directory)
    assert expected.apply_changes(expected_from_reference(model)) == summary["final_state"]
    assert summary["committed"] == sum(len(v) for v in model.committed.values())
    assert summary["rolled_back"] == sum(
        1 for per in model.completed.values() for o in per.values() if o == "rolled_back"
    )
    assert summary["changes"] == len(expected_from_reference(model))


def test_workload_exercises_every_feature(workload):
    evs, _, model = workload
    ops = collections.Counter(e["op"] for e in evs)
    for op in events.ALL_OPS:
        if op != events.TRUNCATE:  # documented: the generator never truncates
            assert ops[op] > 0, op
    assert any(e["undo"] for e in evs)
    assert any(e["op"] == events.SUBTXN_ABORT and e["subxid"] == e["xid"] for e in evs)
    assert any(e["op"] == events.SUBTXN_ABORT and e["subxid"] != e["xid"] for e in evs)
    assert any(isinstance(e["lob_data"], bytes) for e in evs) and any(isinstance(e["lob_data"], str) for e in evs)
    assert sum(model.late_events.values()) > 0  # duplicate COMMITs after the end
    begins = collections.Counter(e["xid"] for e in evs if e["op"] == events.BEGIN)
    xids = {e["xid"] for e in evs if e["op"] != events.HEARTBEAT}
    assert any(n > 1 for n in begins.values())  # restarts
    assert len(xids - set(begins)) > 0  # implicit begins
    ops_per_key = collections.Counter((e["table"], str(e["key"]), e["op"]) for e in evs if e["op"] in events.ROW_OPS)
    assert any(op == events.INSERT and n > 1 for (_, _, op), n in ops_per_key.items())  # re-inserts
    sizes = collections.Counter(e["xid"] for e in evs if e["op"] in events.CHANGE_OPS)
    assert max(sizes.values()) >= 200 and sorted(sizes.values())[len(sizes) // 2] <= 20  # long tail


def test_scn_increases_with_the_log_and_heartbeats_never_run_ahead(workload):
    evs, _, _ = workload
    last = 0
    for e in evs:
        if e["op"] == events.HEARTBEAT:
            assert e["scn"] >= last
        else:
            assert e["scn"] >= last  # re-delivered events repeat their scn
        last = max(last, e["scn"])
    commits = [e["scn"] for e in evs if e["op"] == events.COMMIT]
    heartbeats = [e["scn"] for e in evs if e["op"] == events.HEARTBEAT]
    assert heartbeats and heartbeats[-1] >= max(commits)  # a final heartbeat releases everything


def test_same_seed_same_workload_and_files(tmp_path):
    a = list(generate(3000, seed=5, expected_dir=tmp_path / "a"))
    b = list(generate(3000, seed=5, expected_dir=tmp_path / "b"))
    c = list(generate(3000, seed=6))
    assert a == b and a != c
    for name in (expected.CHANGES_FILE, expected.TRANSACTIONS_FILE, expected.SUMMARY_FILE):
        assert filecmp.cmp(tmp_path / "a" / name, tmp_path / "b" / name, shallow=False)


def test_event_budget_is_honoured_roughly():
    gen = WorkloadGenerator(10_000, seed=3, open_txns=100)
    n = sum(1 for e in gen if e["op"] != events.HEARTBEAT)
    assert 10_000 <= n < 10_000 + 100 * 4
    assert not gen.open and not gen.locks


def test_huge_transaction_is_spilled_and_agrees_with_the_reference(tmp_path):
    evs = list(generate(6000, seed=4, open_txns=20, huge_txn_size=4000, expected_dir=tmp_path))
    model = ReferenceModel().feed_all(fan_out(evs, PARTITIONS))
    assert expected_from_reference(model) == list(expected.read_changes(tmp_path))
    sizes = collections.Counter(line["xid"] for line in expected.read_changes(tmp_path))
    assert max(sizes.values()) >= 4000
    assert BULK_TABLE.name in expected.read_summary(tmp_path)["final_state"]


def test_memory_is_bounded_by_open_transactions_and_key_space_not_run_length(tmp_path):
    gen = WorkloadGenerator(100_000, seed=9, open_txns=100, keys_per_table=500, expected_dir=tmp_path)
    largest_buffered = 0
    for n, _ in enumerate(gen):
        if n % 1000 == 0:
            assert len(gen.open) <= 100
            assert all(len(rows) <= 500 for rows in gen.rows.values())
            assert len(gen.locks) <= 4 * 500
            largest_buffered = max(largest_buffered, sum(len(t.changes) for t in gen.open))
    # what is held is the open transactions' surviving changes: a few thousand at most, never the run
    assert 0 < largest_buffered < 20_000
    assert gen.summary()["changes"] > 20_000


@pytest.mark.parametrize(
    "key, java_signed",
    [
        # Kafka's own test vectors (UtilsTest.testMurmur2)
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key, java_signed):
    assert murmur2(key) == java_signed & 0xFFFFFFFF


def test_fan_out_sends_heartbeats_to_every_partition_with_increasing_offsets():
    evs = list(generate(500, seed=1, heartbeat_every=100))
    routed = list(fan_out(evs, 3))
    heartbeats = sum(1 for e in evs if e["op"] == events.HEARTBEAT)
    assert sum(1 for _, _, e in routed if e["op"] == events.HEARTBEAT) == 3 * heartbeats
    for p in range(3):
        offsets = [o for q, o, _ in routed if q == p]
        assert offsets == list(range(len(offsets)))
