"""Transaction semantics of processor/engine.py, each case on both stores (memory and RocksDB)."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from processor.core import events as ev
from processor.core import keys
from processor.core.engine import DeadLetter, Filters, Finished, PartitionEngine
from processor.core.txn import ABANDONED, COMMITTED, FILTERED, ROLLED_BACK
from processor.store.memory import MemoryStore
from processor.store.rocks import RocksStore

from ..enginekit import R, dele, ins, new_run, upd


def seqs(run, xid=None):
    return [c["source"]["seq"] for c in run.changes if xid is None or c["source"]["xid"] == xid]


def buffered_keys(store):
    return [k for k, _ in store.scan_prefix(keys.TXN)]


def test_commit_emits_changes_in_seq_order_with_commit_position(store):
    run = new_run(store)
    run.feed(
        R("a", ev.BEGIN, 0, 1),
        ins("a", 2, 1),
        ins("b", 1, 5),
        ins("a", 1, 2),
        upd("a", 3, 1),
        R("a", ev.COMMIT, 4, 50, ts_ms=777, thread=2),
    )
    assert seqs(run) == [1, 2, 3]
    first = run.changes[0]
    assert first["source"]["commit_scn"] == 50 and first["source"]["commit_ts_ms"] == 777
    assert first["event_id"] == "2:50:a:1"
    assert [c["op"] for c in run.changes] == ["c", "c", "u"]
    assert [c["transaction"]["total_order"] for c in run.changes] == [1, 2, 3]


def test_transaction_records_begin_then_end_with_counts_per_table(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, table="s.x"), ins("a", 2, 2, table="s.y"), ins("a", 3, 3, table="s.x"), R("a", ev.COMMIT, 4, 9)
    )
    begin, end = run.transactions
    assert begin["status"] == "BEGIN" and begin["event_count"] is None
    assert end["status"] == "END" and end["event_count"] == 3
    assert end["data_collections"] == [{"name": "s.x", "event_count": 2}, {"name": "s.y", "event_count": 1}]
    assert end["input_partition"] == 0 and end["commit_offset"] == 3
    assert [c["transaction"]["data_collection_order"] for c in run.changes] == [1, 1, 2]


def test_rollback_drops_transaction_and_its_keys(store):
    run = new_run(store)
    run.feed(R("a", ev.BEGIN, 0), ins("a", 1, 1), ins("a", 2, 2), R("a", ev.ROLLBACK, 3))
    assert run.changes == [] and run.transactions == []
    assert buffered_keys(store) == []
    assert run.engine.stats.rolled_back == 1


def test_committed_transaction_keys_are_deleted_after_acknowledgement(store):
    run = new_run(store)
    run.sink.auto_ack = False
    run.feed(ins("a", 1, 1), R("a", ev.COMMIT, 2))
    # Its events stay until the broker acknowledged the outputs: in memory (staged; the checkpoint
    # leaves a transaction in flight there, and a restart re-reads it), or in the store once spilled.
    txn = run.engine.pending["a"]
    assert txn.staged and buffered_keys(store) == []
    run.engine.checkpoint(spill_all=True)
    assert txn.staged is None and buffered_keys(store)
    assert [t["status"] for t in run.transactions] == ["BEGIN"]
    run.sink.ack_all()
    run.emitter.advance()  # changes acked -> END sent
    assert [t["status"] for t in run.transactions] == ["BEGIN", "END"]
    run.sink.ack_all()
    run.emitter.advance()
    run.engine.checkpoint()
    assert buffered_keys(store) == []


def test_repeated_begin_restarts_the_transaction(store):
    run = new_run(store)
    run.feed(
        R("a", ev.BEGIN, 0), ins("a", 1, 1), ins("a", 2, 2), R("a", ev.BEGIN, 0), ins("a", 1, 3), R("a", ev.COMMIT, 2)
    )
    assert [c["key"]["id"] for c in run.changes] == [3]
    assert run.engine.stats.restarts == 1


def test_a_re_sent_transaction_keeps_its_first_attempts_place_and_the_low_watermark(store):
    run = new_run(store)
    run.feed(R("a", ev.BEGIN, 0), R("b", ev.BEGIN, 0), ins("a", 1, 1), R("a", ev.BEGIN, 0), ins("a", 1, 2))
    engine = run.engine
    engine.checkpoint()
    oldest = engine.oldest_open()
    assert oldest is not None and (oldest.xid, engine.low_watermark()) == ("a", 0)
    assert list(engine.open) == ["a", "b"]
    run.feed(R("b", ev.COMMIT, 1))
    assert engine.low_watermark() == 0
    run.feed(R("a", ev.COMMIT, 2))
    assert engine.low_watermark() == engine.next_offset


def test_rollback_to_savepoint_drops_changes_after_it(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1),
        R("a", ev.SAVEPOINT, 2, savepoint="s1"),
        ins("a", 3, 2),
        ins("a", 4, 3),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 5, savepoint="s1"),
        ins("a", 6, 4),
        R("a", ev.COMMIT, 7),
    )
    assert seqs(run) == [1, 6]


def test_rollback_to_outer_savepoint_drops_inner_changes(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1),
        R("a", ev.SAVEPOINT, 2, savepoint="outer"),
        ins("a", 3, 2),
        R("a", ev.SAVEPOINT, 4, savepoint="inner"),
        ins("a", 5, 3),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 6, savepoint="inner"),
        ins("a", 7, 4),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 8, savepoint="outer"),
        ins("a", 9, 5),
        R("a", ev.COMMIT, 10),
    )
    assert seqs(run) == [1, 9]


def test_savepoint_stays_after_rollback_to_it(store):
    run = new_run(store)
    run.feed(
        R("a", ev.SAVEPOINT, 1, savepoint="s"),
        ins("a", 2, 1),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 3, savepoint="s"),
        ins("a", 4, 2),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 5, savepoint="s"),
        ins("a", 6, 3),
        R("a", ev.COMMIT, 7),
    )
    assert seqs(run) == [6]


def test_rollback_to_unknown_savepoint_is_dead_lettered_and_drops_nothing(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), R("a", ev.ROLLBACK_TO_SAVEPOINT, 2, savepoint="nope"), R("a", ev.COMMIT, 3))
    assert seqs(run) == [1]
    assert "unknown savepoint" in run.dead[0].reason


def test_subtransaction_abort_drops_only_that_subtransaction(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1),
        ins("a", 2, 2, subxid="s1"),
        ins("a", 3, 3, subxid="s2"),
        ins("a", 4, 4, subxid="s1"),
        R("a", ev.SUBTXN_ABORT, 5, subxid="s1"),
        ins("a", 6, 5, subxid="s1"),
        R("a", ev.COMMIT, 7),
    )
    assert seqs(run) == [1, 3, 6]


def test_subtransaction_abort_of_the_top_xid_is_a_rollback(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1, subxid="a"), R("a", ev.SUBTXN_ABORT, 2, subxid="a"), R("a", ev.COMMIT, 3))
    assert run.changes == [] and run.engine.stats.rolled_back == 1
    assert run.engine.stats.late_events == 1  # the COMMIT after the abort


def test_undo_row_removes_newest_earlier_change_with_that_row_id(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, row_id="AAA"),
        upd("a", 2, 1, row_id="AAA"),
        ins("a", 3, 2, row_id="BBB"),
        R("a", ev.UPDATE, 4, table="s.t", key={"id": 1}, undo=True, row_id="AAA"),
        R("a", ev.COMMIT, 5),
    )
    assert seqs(run) == [1, 3]
    assert run.engine.stats.undone == 1


def test_two_undo_rows_remove_two_changes_newest_first(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, row_id="AAA"),
        upd("a", 2, 1, row_id="AAA"),
        R("a", ev.UPDATE, 3, undo=True, row_id="AAA"),
        R("a", ev.DELETE, 4, undo=True, row_id="AAA"),
        R("a", ev.COMMIT, 5),
    )
    assert run.changes == []


def test_undo_skips_changes_already_rolled_back_to_a_savepoint(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, row_id="AAA"),
        R("a", ev.SAVEPOINT, 2, savepoint="s"),
        upd("a", 3, 1, row_id="AAA"),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 4, savepoint="s"),
        R("a", ev.UPDATE, 5, undo=True, row_id="AAA"),
        ins("a", 6, 2),
        R("a", ev.COMMIT, 7),
    )
    assert seqs(run) == [6]


def test_undo_without_target_is_dead_lettered(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), R("a", ev.UPDATE, 2, undo=True, row_id="ZZZ"), R("a", ev.COMMIT, 3))
    assert seqs(run) == [1]
    assert "no earlier change" in run.dead[0].reason


def _lob(op, xid, seq, pk, **fields):
    return R(xid, op, seq, table="s.t", key={"id": pk}, lob_column="doc", **fields)


def test_lob_write_appends_and_writes_at_offsets_with_padding(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, after={"id": 1, "doc": None}),
        _lob(ev.LOB_WRITE, "a", 2, 1, lob_data="hello"),
        _lob(ev.LOB_WRITE, "a", 3, 1, lob_offset=0, lob_data="J"),
        _lob(ev.LOB_WRITE, "a", 4, 1, lob_offset=8, lob_data="!"),
        R("a", ev.COMMIT, 5),
    )
    assert len(run.changes) == 1
    assert run.changes[0]["after"]["doc"] == "Jello   !"


def test_lob_erase_and_trim_follow_oracle_semantics(store):
    run = new_run(store)
    run.feed(
        upd("a", 1, 1, after={"id": 1, "doc": "abcdefgh"}),
        _lob(ev.LOB_ERASE, "a", 2, 1, lob_offset=2, lob_length=3),
        _lob(ev.LOB_TRIM, "a", 3, 1, lob_length=6),
        R("a", ev.COMMIT, 4),
    )
    assert run.changes[0]["after"]["doc"] == "ab   f"


def test_blob_fragments_pad_with_zero_bytes(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, after={"id": 1}),
        _lob(ev.LOB_WRITE, "a", 2, 1, lob_offset=2, lob_data=b"\x01\x02"),
        R("a", ev.COMMIT, 3),
    )
    assert run.changes[0]["after"]["doc"] == b"\x00\x00\x01\x02"


def test_xml_and_long_string_fragments_append(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, after={"id": 1}),
        R("a", ev.XML_WRITE, 2, table="s.t", key={"id": 1}, lob_column="x", lob_data="<a>"),
        R("a", ev.XML_WRITE, 3, table="s.t", key={"id": 1}, lob_column="x", lob_data="</a>"),
        R("a", ev.LONG_STRING_WRITE, 4, table="s.t", key={"id": 1}, lob_column="l", lob_data="long"),
        R("a", ev.COMMIT, 5),
    )
    assert run.changes[0]["after"] == {"id": 1, "x": "<a></a>", "l": "long"}


def test_fragment_targets_the_newest_change_of_its_row_not_of_the_transaction(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, row_id="R1", after={"id": 1}),
        ins("a", 2, 2, row_id="R2", after={"id": 2}),
        R("a", ev.LOB_WRITE, 3, table="s.t", row_id="R1", lob_column="doc", lob_data="one"),
        R("a", ev.COMMIT, 4),
    )
    assert [c["after"] for c in run.changes] == [{"id": 1, "doc": "one"}, {"id": 2}]


def test_fragment_rolled_back_with_its_savepoint_is_not_merged(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1, after={"id": 1}),
        R("a", ev.SAVEPOINT, 2, savepoint="s"),
        _lob(ev.LOB_WRITE, "a", 3, 1, lob_data="gone"),
        R("a", ev.ROLLBACK_TO_SAVEPOINT, 4, savepoint="s"),
        R("a", ev.COMMIT, 5),
    )
    assert run.changes[0]["after"] == {"id": 1}


def test_fragment_without_preceding_change_is_dead_lettered(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 2),
        _lob(ev.LOB_WRITE, "a", 2, 1, lob_data="x"),
        dele("a", 3, 3),
        _lob(ev.LOB_WRITE, "a", 4, 3, lob_data="x"),
        R("a", ev.COMMIT, 5),
    )
    assert len(run.dead) == 2 and all("no preceding" in d.reason for d in run.dead)
    assert seqs(run) == [1, 3]


def test_excluded_user_filters_the_whole_transaction_without_buffering(store):
    run = new_run(store, Filters(exclude_users=frozenset({"batch"})))
    run.feed(
        R("a", ev.BEGIN, 0, user="batch"),
        ins("a", 1, 1),
        ins("b", 1, 2, user="app"),
        R("a", ev.COMMIT, 2),
        R("b", ev.COMMIT, 2),
    )
    assert [c["source"]["xid"] for c in run.changes] == ["b"]
    assert [t["id"] for t in run.transactions] == ["b", "b"]
    assert run.engine.stats.filtered_txns == 1 and run.engine.stats.filtered_changes == 1


def test_include_clients_filters_other_clients(store):
    run = new_run(store, Filters(include_clients=frozenset({"web"})))
    run.feed(ins("a", 1, 1, client="cron"), ins("b", 1, 2, client="web"), R("a", ev.COMMIT, 2), R("b", ev.COMMIT, 2))
    assert [c["source"]["xid"] for c in run.changes] == ["b"]


def test_excluded_table_changes_are_not_buffered(store):
    run = new_run(store, Filters(exclude_tables=frozenset({"s.audit"})))
    run.feed(ins("a", 1, 1, table="s.audit"), ins("a", 2, 2), R("a", ev.COMMIT, 3))
    assert [c["source"]["table"] for c in run.changes] == ["s.t"]


def test_events_of_finished_transactions_are_dropped_and_counted(store):
    run = new_run(store)
    run.feed(
        ins("a", 1, 1),
        R("a", ev.COMMIT, 2),
        ins("a", 3, 9),
        R("a", ev.COMMIT, 2),
        R("b", ev.ROLLBACK, 1),
        ins("b", 2, 3),
        R("b", ev.BEGIN, 0),
    )
    assert seqs(run) == [1]
    assert run.engine.stats.late_events == 4
    assert [t["status"] for t in run.transactions] == ["BEGIN", "END"]


def test_commit_without_begin_or_changes_is_an_empty_transaction(store):
    run = new_run(store)
    run.feed(R("a", ev.COMMIT, 1, 5))
    assert run.changes == []
    assert [(t["status"], t["event_count"]) for t in run.transactions] == [("BEGIN", None), ("END", 0)]


def test_truncate_and_ddl_are_emitted_as_t_and_ddl(store):
    run = new_run(store)
    run.feed(
        R("a", ev.DDL, 1, ddl="ALTER TABLE s.t ADD c INT", table="s.t"),
        R("a", ev.TRUNCATE, 2, table="s.t"),
        R("a", ev.COMMIT, 3),
    )
    assert [c["op"] for c in run.changes] == ["ddl", "t"]
    assert run.changes[0]["ddl"] == "ALTER TABLE s.t ADD c INT"


def test_redelivered_change_with_same_seq_is_idempotent(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), ins("a", 1, 1), R("a", ev.COMMIT, 2))
    assert seqs(run) == [1]


@pytest.mark.parametrize(
    "bad, reason",
    [
        (b"\xff\xff\xff\xff", "undecodable"),
        (b"", "empty"),
        (ev.encode_raw(ev.raw_event("a", ev.INSERT, 1, 1)) + b"\x00", "trailing"),
        (ev.encode_raw(ev.raw_event("a", ev.INSERT, 1, 1, key={"id": 1})), "without table"),
        (ev.encode_raw(ev.raw_event("a", ev.INSERT, -3, 1, table="s.t", key={"id": 1})), "negative seq"),
        (ev.encode_raw(ev.raw_event("a", ev.SUBTXN_ABORT, 1, 1)), "without subxid"),
        (ev.encode_raw(ev.raw_event("a", ev.LOB_TRIM, 1, 1, table="s.t", key={"id": 1}, lob_column="c")), "lob_length"),
        # Clamped to 0, these would change the column silently (found by test_decoder_fuzz).
        (
            ev.encode_raw(_lob(ev.LOB_ERASE, "a", 1, 1, lob_offset=-16, lob_length=3)),
            "negative lob_offset or lob_length",
        ),
        (
            ev.encode_raw(_lob(ev.LOB_WRITE, "a", 1, 1, lob_offset=-1, lob_data="x")),
            "negative lob_offset or lob_length",
        ),
        (ev.encode_raw(_lob(ev.LOB_TRIM, "a", 1, 1, lob_length=-2)), "negative lob_offset or lob_length"),
        # thread is an Avro int: a wider varint decodes but no change_event can carry it (found by
        # test_decoder_fuzz); a change goes through the compiled lane, a BEGIN and a COMMIT too.
        (ev.encode_raw(ev.raw_event("a", ev.INSERT, 5, 1, table="s.t", key={"id": 1}, thread=2**35)), "Avro int"),
        (ev.encode_raw(ev.raw_event("b", ev.BEGIN, 0, 1, thread=2**31)), "Avro int"),
        (ev.encode_raw(ev.raw_event("a", ev.COMMIT, 9, 1, thread=-(2**31) - 1)), "Avro int"),
    ],
)
def test_malformed_events_are_dead_lettered_and_processing_continues(store, bad, reason):
    run = new_run(store)
    run.feed(ins("a", 1, 1), bad, ins("a", 2, 2), R("a", ev.COMMIT, 3))
    assert len(run.dead) == 1 and reason in run.dead[0].reason
    assert run.dead[0].value == bad and run.dead[0].offset == 1
    assert seqs(run) == [1, 2]


def test_low_watermark_is_first_offset_of_oldest_open_transaction(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), ins("b", 1, 2), ins("a", 2, 3), R("a", ev.COMMIT, 3))
    assert run.engine.low_watermark() == 1  # b opened at offset 1
    run.feed(R("b", ev.COMMIT, 2))
    assert run.engine.low_watermark() == run.engine.next_offset == 5


def test_heartbeat_advances_the_watermark_only(store):
    run = new_run(store)
    run.feed(ins("a", 1, 1), R("", ev.HEARTBEAT, 0, 40), R("a", ev.COMMIT, 2, 30))
    assert run.engine.watermark == 40 and seqs(run) == [1]


def test_restore_resumes_open_and_unacknowledged_transactions(store):
    run = new_run(store)
    run.sink.auto_ack = False
    send_change = run.sink.send_change

    def cut_short(key, value, on_ack):  # e.g. a SIGTERM stops the emission after the first change
        if len(run.sink.changes) == 1:
            raise KeyboardInterrupt
        send_change(key, value, on_ack)

    run.sink.send_change = cut_short
    with pytest.raises(KeyboardInterrupt):
        run.feed(
            ins("a", 1, 1),
            ins("a", 2, 2),
            ins("b", 1, 3),
            R("b", ev.SAVEPOINT, 2, savepoint="s"),
            ins("a", 3, 4),
            R("a", ev.COMMIT, 4, 99),
        )
    # The closing drain settles what was sent (BEGIN and change seq 1) and checkpoints; the process dies.
    run.sink.ack_all()
    run.emitter.advance()
    assert [t["status"] for t in run.transactions] == ["BEGIN"]
    run.engine.checkpoint(spill_all=True)  # as the runner's close does: staged transactions go to the store

    from processor.core.engine import PartitionEngine
    from processor.runtime.emitter import Emitter
    from processor.testing.memsink import MemorySink

    restored = PartitionEngine.restore(0, store)
    assert restored.next_offset == run.engine.next_offset
    assert set(restored.open) == {"b"} and restored.open["b"].savepoints == [("s", 2)]
    txn = restored.pending["a"]
    assert txn.acked_seq == 1 and txn.acked_count == 1
    sink = MemorySink()
    emitter = Emitter(sink)
    emitter.release(restored, txn)
    emitter.advance()
    emitter.advance()
    changes = sink.change_events()
    assert [c["source"]["seq"] for c in changes] == [2, 3]
    assert [c["transaction"]["total_order"] for c in changes] == [2, 3]
    end = sink.transaction_events()[-1]
    assert end["status"] == "END" and end["event_count"] == 3


def test_completed_index_is_pruned_below_the_low_watermark(store):
    from processor.core.engine import PartitionEngine

    run = new_run(store)
    run.engine.min_completed = 2
    for i in range(6):
        run.feed(ins(f"t{i}", 1, i), R(f"t{i}", ev.COMMIT, 2))
    assert len(run.engine.completed) == 2
    restored = PartitionEngine.restore(0, store, min_completed=2)
    assert set(restored.completed) == {"t4", "t5"}


def _settle_all(run) -> None:
    for _ in range(2):  # the changes, then the ENDs
        run.sink.ack_all()
        run.emitter.advance()
    run.engine.checkpoint()


@given(st.lists(st.sampled_from(["commit", "commit_acked_later", "rollback", "ack"]), max_size=60), st.integers(0, 12))
# a kept entry below the front one's offset: the range delete must end at the smallest kept
@example(["commit", "commit", "commit_acked_later", "rollback", "ack"], 2)
@settings(max_examples=60, deadline=None)
def test_the_stored_completed_index_is_the_one_in_memory_whatever_the_completion_order(steps, keep):
    """Pruned a chunk at a time by a range delete of FIFO batches (engine._prune_completed), the FIFO
    batches in the store stay exactly the entries of the index in memory, in order, though completion
    order is not offset order: a commit whose outputs are acknowledged later finishes after rollbacks
    at higher offsets, and a prune may end inside a batch. Once nothing holds the low watermark back,
    at most a chunk more than the minimum is kept."""
    chunk = max(1, keep // 10)
    with tempfile.TemporaryDirectory() as state:
        for store in (MemoryStore(), RocksStore(state)):
            run = new_run(store)
            run.engine.min_completed = keep
            run.sink.auto_ack = False
            fifo_prefix = keys.partition_prefix(keys.FIFO, 0)

            for i, step in enumerate(steps):
                xid = f"t{i}"
                if step == "ack":
                    _settle_all(run)
                elif step == "rollback":
                    run.feed(ins(xid, 1, i), R(xid, ev.ROLLBACK, 2))
                else:
                    run.feed(ins(xid, 1, i), R(xid, ev.COMMIT, 2))
                    if step == "commit":
                        _settle_all(run)
                stored = [
                    entry
                    for key, value in store.scan_prefix(fifo_prefix)
                    for entry in keys.fifo_batch_entries(value, keys.fifo_batch_of(key))
                ]
                assert stored == list(run.engine.fifo)
                if run.engine.completed:  # a checkpoint wrote them, and the position with them
                    restored = PartitionEngine.restore(0, store, min_completed=keep)
                    assert restored is not None and restored.completed == run.engine.completed
            _settle_all(run)
            finished = len(steps) - steps.count("ack")
            assert min(keep, finished) <= len(run.engine.completed) <= keep + chunk
            store.close()


def test_abandoned_transaction_is_dropped_and_its_late_commit_reported(store):
    run = new_run(store)
    run.feed(ins("old", 1, 1, ts_ms=1_000), ins("new", 1, 2, ts_ms=50_000))
    actions = run.engine.abandon_older_than(10_000)
    dead, finished = actions
    assert isinstance(dead, DeadLetter) and "abandoned: transaction old" in dead.reason and dead.offset == 0
    assert finished == Finished(0, "old", 1, ABANDONED) and finished.needs_record
    run.engine.checkpoint()
    assert run.engine.low_watermark() == 1  # no longer held back by "old"
    run.feed(R("old", ev.COMMIT, 2), R("new", ev.COMMIT, 2))
    assert [c["source"]["xid"] for c in run.changes] == ["new"]
    assert "abandoned" in run.dead[-1].reason and run.dead[-1].offset == 2
    assert run.engine.stats.abandoned == 1


def test_every_end_of_a_transaction_is_a_finished_action(store):
    """Outcomes come back as actions: rolled back, filtered (no output, so needs_record) and
    committed (recorded by its END, once the outputs are acknowledged)."""
    engine = PartitionEngine(0, store, Filters(exclude_users=frozenset({"batch"})))

    def apply(offset, e):
        return engine.apply(offset, e["xid"].encode(), ev.encode_raw(e))

    assert apply(0, ins("r", 1, 1)) == []
    assert apply(1, R("r", ev.ROLLBACK, 2)) == [Finished(0, "r", 1, ROLLED_BACK)]
    assert apply(2, R("u", ev.ROLLBACK, 1)) == [Finished(0, "u", 2, ROLLED_BACK)]  # never seen open
    assert apply(3, ins("f", 1, 2, user="batch")) == []
    assert apply(4, R("f", ev.COMMIT, 2)) == [Finished(0, "f", 4, FILTERED)]
    assert apply(5, ins("c", 1, 3)) == []
    (committed,) = apply(6, R("c", ev.COMMIT, 2))
    engine.flush_data()
    finished = engine.acknowledged(committed.txn)
    assert finished == Finished(0, "c", 6, COMMITTED) and not finished.needs_record
    assert {xid: o for xid, (_, o) in engine.completed.items()} == {
        "r": ROLLED_BACK,
        "u": ROLLED_BACK,
        "f": FILTERED,
        "c": COMMITTED,
    }
