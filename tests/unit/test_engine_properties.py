"""Property tests: the engine (with the emitter, on both stores) equals the reference model.

Random interleavings of many transactions with rollbacks, savepoints, subtransaction aborts, undo
rows, fragments, restarts, late duplicates and implicit begins come from two sources: hypothesis
drawing small adversarial op sequences directly, and the workload generator with drawn rates.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st

from processor.core import events as ev
from processor.core.engine import Committed, DeadLetter, Filters, Finished, PartitionEngine
from processor.core.ordering import GlobalOrder
from processor.core.partitioning import fan_out
from processor.runtime.emitter import Emitter
from processor.runtime.partitions import restore_partition
from processor.store.memory import MemoryStore
from processor.store.rocks import RocksStore
from processor.testing.generator import WorkloadGenerator
from processor.testing.memsink import MemorySink
from processor.testing.reference import ReferenceModel

from ..enginekit import Record

SLOW = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def run_engine(feed: list[tuple[int, int, dict]], store_factory, filters=Filters(), batch: int = 7):
    """Feed (partition, offset, event) through per-partition engines and one emitter."""
    sink = MemorySink()
    emitter = Emitter(sink)
    engines: dict[int, PartitionEngine] = {}
    dead = []
    for i in range(0, len(feed), batch):
        committed = []
        for p, offset, event in feed[i : i + batch]:
            engine = engines.get(p) or engines.setdefault(p, PartitionEngine(p, store_factory(), filters))
            for action in engine.apply(offset, event["xid"].encode(), ev.encode_raw(event)):
                if isinstance(action, Committed):
                    committed.append((engine, action.txn))
                elif isinstance(action, DeadLetter):
                    dead.append((p, offset))
        for engine in engines.values():
            engine.flush_data()
        for engine, txn in committed:
            emitter.release(engine, txn)
        emitter.advance()
        for engine in engines.values():
            engine.checkpoint()
    return sink, dead


def generated_feed(events: int, seed: int, open_txns: int, rates: tuple[float, ...]) -> list:
    """(partition, offset, event) of a generated workload over 3 partitions; rates are those of
    rollbacks, savepoints, subtransaction aborts, undo rows and LOB fragments."""
    rollback, savepoint, subtxn, undo, lob = rates
    workload = WorkloadGenerator(
        events,
        seed=seed,
        open_txns=open_txns,
        rollback_rate=rollback,
        savepoint_rate=savepoint,
        subtxn_abort_rate=subtxn,
        undo_rate=undo,
        lob_rate=lob,
    )
    return list(fan_out(workload, 3))


def reference_of(feed, filters=Filters()) -> ReferenceModel:
    model = ReferenceModel(**{f: tuple(getattr(filters, f)) for f in Filters.__dataclass_fields__})
    for p, offset, event in feed:
        model.feed(p, offset, event)
    return model


def by_partition(changes: list[dict], xid_partition: dict[str, int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for c in changes:
        out.setdefault(xid_partition[c["source"]["xid"]], []).append(c["event_id"])
    return out


def assert_same_output(sink: MemorySink, model: ReferenceModel, feed) -> None:
    expected = [c for p in sorted(model.committed) for t in model.committed[p] for c in t.changes]
    got = sink.change_events()
    note(f"changes compared: {'0' if not expected else '1-9' if len(expected) < 10 else '10+'}")
    note(f"dead letters: {'0' if not model.dlq else '1+'}")
    xid_partition = {e["xid"]: p for p, _, e in feed if e["op"] != ev.HEARTBEAT}
    # Per input partition the order is exact: commit order, then seq.
    assert by_partition(got, xid_partition) == by_partition(expected, xid_partition)
    # And every emitted change is exactly the reference's (fragments merged, orders, positions).
    assert sorted(got, key=lambda c: c["event_id"]) == sorted(expected, key=lambda c: c["event_id"])
    ends = [t for t in sink.transaction_events() if t["status"] == "END"]
    expected_ends = [t.end_record() for p in sorted(model.committed) for t in model.committed[p]]
    assert sorted((e["id"], e["event_count"], str(e["data_collections"])) for e in ends) == sorted(
        (e["id"], e["event_count"], str(e["data_collections"])) for e in expected_ends
    )


# --------------------------------------------------------------------------- adversarial sequences

XIDS = ["a", "b", "c", "d"]
ROWS = ["R1", "R2", "R3"]


@st.composite
def op_sequences(draw):
    """Small interleavings where ops collide on the same rows, savepoints and subtransactions."""
    n = draw(st.integers(5, 60))
    seqs = {x: 0 for x in XIDS}
    out = []
    scn = 0
    for _ in range(n):
        xid = draw(st.sampled_from(XIDS))
        seqs[xid] += 1
        scn += 1
        seq = seqs[xid]
        kind = draw(
            st.sampled_from(
                [
                    "ins",
                    "upd",
                    "del",
                    "ins",
                    "upd",
                    "sp",
                    "rbsp",
                    "sub",
                    "abort",
                    "undo",
                    "lob",
                    "commit",
                    "rollback",
                    "begin",
                    "hb",
                ]
            )
        )
        pk = draw(st.integers(1, 3))
        row = {"row_id": ROWS[pk - 1], "table": "s.t", "key": {"id": pk}}
        sub = draw(st.sampled_from([None, None, "s1", "s2"]))
        if kind == "ins":
            e = ev.raw_event(xid, ev.INSERT, seq, scn, after={"id": pk, "v": seq}, subxid=sub, **row)
        elif kind == "upd":
            e = ev.raw_event(xid, ev.UPDATE, seq, scn, before={"id": pk}, after={"id": pk, "v": seq}, subxid=sub, **row)
        elif kind == "del":
            e = ev.raw_event(xid, ev.DELETE, seq, scn, before={"id": pk}, subxid=sub, **row)
        elif kind == "sp":
            e = ev.raw_event(xid, ev.SAVEPOINT, seq, scn, savepoint=draw(st.sampled_from(["p", "q"])))
        elif kind == "rbsp":
            e = ev.raw_event(xid, ev.ROLLBACK_TO_SAVEPOINT, seq, scn, savepoint=draw(st.sampled_from(["p", "q"])))
        elif kind == "sub":
            e = ev.raw_event(xid, ev.INSERT, seq, scn, after={"id": pk}, subxid="s1", **row)
        elif kind == "abort":
            e = ev.raw_event(xid, ev.SUBTXN_ABORT, seq, scn, subxid=draw(st.sampled_from(["s1", "s2", xid])))
        elif kind == "undo":
            e = ev.raw_event(xid, ev.UPDATE, seq, scn, undo=True, **row)
        elif kind == "lob":
            op = draw(st.sampled_from([ev.LOB_WRITE, ev.LOB_ERASE, ev.LOB_TRIM, ev.XML_WRITE]))
            e = ev.raw_event(
                xid,
                op,
                seq,
                scn,
                lob_column="doc",
                lob_data=draw(st.sampled_from(["ab", "xyz"])),
                lob_offset=draw(st.sampled_from([None, 0, 3])) if op != ev.LOB_ERASE else 1,
                lob_length=draw(st.integers(0, 4)),
                **row,
            )
        elif kind == "commit":
            e = ev.raw_event(xid, ev.COMMIT, seq, scn, ts_ms=scn)
        elif kind == "rollback":
            e = ev.raw_event(xid, ev.ROLLBACK, seq, scn)
        elif kind == "begin":
            e = ev.raw_event(xid, ev.BEGIN, 0, scn, user=draw(st.sampled_from([None, "app", "batch"])))
        else:
            e = ev.raw_event("", ev.HEARTBEAT, 0, scn)
        out.append(e)
    out.extend(ev.raw_event(x, ev.COMMIT, seqs[x] + 1, scn + 1 + i) for i, x in enumerate(XIDS))
    return out


@SLOW
@given(events=op_sequences(), filtered=st.booleans())
def test_adversarial_interleavings_match_the_reference(events, filtered, tmp_path_factory):
    feed = [(0, i, e) for i, e in enumerate(events)]
    filters = Filters(exclude_users=frozenset({"batch"})) if filtered else Filters()
    model = reference_of(feed, filters)
    sink, dead = run_engine(feed, MemoryStore, filters)
    assert_same_output(sink, model, feed)
    assert sorted(dead) == sorted((p, o) for p, o, _ in model.dlq)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    open_txns=st.integers(1, 60),
    rollback=st.floats(0, 0.4),
    savepoint=st.floats(0, 0.2),
    subtxn=st.floats(0, 0.1),
    undo=st.floats(0, 0.2),
    lob=st.floats(0, 0.5),
)
def test_generated_workloads_match_the_reference_on_rocksdb(
    tmp_path_factory, seed, open_txns, rollback, savepoint, subtxn, undo, lob
):
    feed = generated_feed(3000, seed, open_txns, (rollback, savepoint, subtxn, undo, lob))
    model = reference_of(feed)
    base = tmp_path_factory.mktemp("rocks")
    counter = iter(range(100))
    sink, dead = run_engine(feed, lambda: RocksStore(base / f"p{next(counter)}"), batch=500)
    assert_same_output(sink, model, feed)
    assert dead == []


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    partitions=st.integers(2, 4),
    heartbeat_every=st.integers(5, 200),
    batch=st.integers(1, 300),
)
def test_global_order_releases_in_commit_scn_order_across_partitions(seed, partitions, heartbeat_every, batch):
    """Multi-partition interleavings with heartbeats: the global-order output equals the reference's
    committed transactions sorted by commit_scn."""
    workload = WorkloadGenerator(2000, seed=seed, open_txns=20, keys_per_table=20, heartbeat_every=heartbeat_every)
    feed = list(fan_out(workload, partitions))
    model = reference_of(feed)
    # Interleave partitions the way a consumer might: whole runs of one partition at a time.
    by_p: dict[int, list] = {}
    for item in feed:
        by_p.setdefault(item[0], []).append(item)
    interleaved = []
    cursors = {p: 0 for p in by_p}
    turn = 0
    while any(cursors[p] < len(by_p[p]) for p in by_p):
        p = sorted(by_p)[turn % len(by_p)]
        interleaved.extend(by_p[p][cursors[p] : cursors[p] + batch])
        cursors[p] += batch
        turn += 1

    sink = MemorySink()
    emitter = Emitter(sink, ordering="global")
    order = GlobalOrder()
    engines = {p: PartitionEngine(p, MemoryStore()) for p in by_p}
    for p, offset, event in interleaved:
        for action in engines[p].apply(offset, None, ev.encode_raw(event)):
            if isinstance(action, Committed):
                engines[p].flush_data()
                order.hold(engines[p], action.txn, 0)
        for engine, txn in order.ready({q: e.watermark for q, e in engines.items()}, 0):
            emitter.release(engine, txn)
    for engine, txn in order.release_all():
        emitter.release(engine, txn)
    emitter.advance()

    got = [c["event_id"] for c in sink.change_events()]
    expected_txns = sorted(
        (t for p in model.committed for t in model.committed[p]), key=lambda t: (t.commit_scn, t.thread, t.xid)
    )
    assert got == [c["event_id"] for t in expected_txns for c in t.changes]


# --------------------------------------------------------------------------- crashes and restarts


class QueueLostAtCrash(MemorySink):
    """Outputs reach the topics once acknowledged; a crash loses the rest (the producer's queue)."""

    def __init__(self) -> None:
        super().__init__(auto_ack=False)
        self.queued: list[tuple[list, tuple]] = []

    def send_change(self, key, value, on_ack) -> None:
        self.queued.append((self.changes, (key, value)))
        self.unacked.append(on_ack)

    def send_transaction(self, key, value, on_ack) -> None:
        self.queued.append((self.transactions, (key, value)))
        self.unacked.append(on_ack)

    def ack_all(self) -> None:
        for topic, record in self.queued:
            topic.append(record)
        self.queued.clear()
        super().ack_all()

    def crash(self) -> None:
        self.queued.clear()
        self.unacked.clear()


def lowest_first_offset(engine: PartitionEngine) -> int:
    """low_watermark by its definition, scanning every unfinished transaction (the engine keeps them
    in order instead); never past next_offset (a re-read after a restore starts there)."""
    return min([engine.next_offset] + [t.first_offset for t in [*engine.open.values(), *engine.pending.values()]])


def run_with_crashes(
    feed, batch: int, crashes: dict[int, str], stage_horizon: int, ends_in_flight: bool = False
) -> tuple[MemorySink, set[str]]:
    """Feed (partition, offset, event) in poll batches as the runner does, and at the batch numbers in
    `crashes` lose every engine's memory: "before" the batch's checkpoint (its outputs were sent, the
    store does not know) or "after" it. Each partition then comes back as the runner decides
    (runtime.partitions.restore_partition): from its store, or, when the store is marked as written
    past its checkpoint, rebuilt from the committed offset (the low watermark at the last checkpoint)
    with the completed index of the transactions finished from there (their END or outcome records).
    The feed is re-read from the earliest offset one of them asks for; pending transactions go out
    first.

    ends_in_flight: outputs are acknowledged once per batch, before its ENDs go out, so every
    checkpoint finds the batch's committed transactions unfinished (spilled, with their emit
    cursors), and a crash loses the ENDs in flight: the restart must send them again.

    Returns the sink and the transactions committed but unfinished at a crash: those a restart may
    send again whole (a checkpoint leaves one in flight staged, and the restart re-reads it)."""
    sink = QueueLostAtCrash() if ends_in_flight else MemorySink()
    stores = {p: MemoryStore() for p, _, _ in feed}
    engines = {p: PartitionEngine(p, stores[p], stage_horizon=stage_horizon) for p in stores}
    committed_offsets = {p: 0 for p in stores}
    finished: list[tuple[int, str, int, str]] = []  # (partition, xid, offset, outcome) as the topics hold them
    unfinished_at_crash: set[str] = set()

    def new_emitter() -> Emitter:
        emitter = Emitter(sink)
        emitter.on_complete = lambda em: finished.append(
            (em.engine.partition, em.txn.xid, em.txn.require_commit().offset, "committed")
        )
        return emitter

    emitter = new_emitter()
    i = step = 0
    while i < len(feed):
        runs: dict[int, list] = {}
        for p, offset, event in feed[i : i + batch]:
            runs.setdefault(p, []).append(Record(offset, event["xid"].encode() or None, ev.encode_raw(event)))
        i += batch
        committed = []
        for p, run in runs.items():
            for a in engines[p].apply_records(run):
                if isinstance(a, Committed):
                    committed.append((engines[p], a.txn))
                elif isinstance(a, Finished) and a.needs_record:
                    finished.append((p, a.xid, a.offset, a.outcome))
        for engine in {id(e): e for e, txn in committed if txn.staged is None}.values():
            engine.flush_data()  # as Dispatcher.release_committed: a stored transaction is read from the store
        for engine, txn in committed:
            emitter.release(engine, txn)
        sink.ack_all()
        emitter.advance()
        crash = crashes.get(step)
        step += 1
        if crash != "before":
            for p, engine in engines.items():
                engine.checkpoint()
                committed_offsets[p] = engine.low_watermark()
                assert committed_offsets[p] == lowest_first_offset(engine)
                # the count that lets a checkpoint skip the commit-order pass is the real one
                assert engine._stored_pending == sum(t.staged is None for t in engine.pending.values())
        if crash is None:
            continue
        unfinished_at_crash.update(xid for engine in engines.values() for xid in engine.pending)
        if isinstance(sink, QueueLostAtCrash):
            sink.crash()
        engines = {}
        for p, store in stores.items():
            restored = restore_partition(p, store, Filters(), 10_000, committed_offsets[p], 0)
            engine = restored.engine
            if restored.source == "local":  # a restore_partition engine has the default horizon
                engine = PartitionEngine.restore(p, store, stage_horizon=stage_horizon)
            else:
                engine.stage_horizon = stage_horizon
                for q, xid, offset, outcome in finished:
                    if q == p and offset >= restored.start_offset:
                        engine.mark_completed(xid, offset, outcome)
            engine.next_offset = restored.start_offset
            assert engine.low_watermark() == lowest_first_offset(engine)
            engines[p] = engine
        emitter = new_emitter()
        for engine in engines.values():
            for txn in list(engine.pending.values()):
                emitter.release(engine, txn)
        sink.ack_all()
        emitter.advance()
        i = next((j for j, (p, offset, _) in enumerate(feed) if offset >= engines[p].next_offset), len(feed))
    for _ in range(2):  # the last ENDs
        sink.ack_all()
        emitter.advance()
    return sink, unfinished_at_crash


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    open_txns=st.integers(1, 30),
    batch=st.integers(5, 400),
    stage_horizon=st.sampled_from([0, 40, 20_000]),
    crashes=st.dictionaries(st.integers(0, 30), st.sampled_from(["before", "after"]), max_size=4),
    rates=st.tuples(st.floats(0, 0.3), st.floats(0, 0.2), st.floats(0, 0.1), st.floats(0, 0.2), st.floats(0, 0.3)),
    ends_in_flight=st.booleans(),
)
def test_crashes_at_any_checkpoint_lose_and_reorder_nothing(
    seed, open_txns, batch, stage_horizon, crashes, rates, ends_in_flight
):
    """Staged transactions are re-read after a restart, stored ones are not applied twice: the output,
    deduplicated by event_id, is the reference's; a crash right after a checkpoint sends again only
    transactions that were unfinished at it (committed, outputs in flight); an END a crash lost in
    flight is sent again."""
    feed = generated_feed(1500, seed, open_txns, rates)
    model = reference_of(feed)
    sink, unfinished_at_crash = run_with_crashes(feed, batch, crashes, stage_horizon, ends_in_flight)
    note(f"crashes: {sorted(set(crashes.values()))}")
    got, seen, again = [], set(), set()
    for c in sink.change_events():
        if c["event_id"] not in seen:
            seen.add(c["event_id"])
            got.append(c)
        else:
            again.add(c["source"]["xid"])
    if "before" not in crashes.values():
        assert again <= unfinished_at_crash  # what finished before a checkpoint was not sent twice
    xid_partition = {e["xid"]: p for p, _, e in feed if e["op"] != ev.HEARTBEAT}
    expected = [c for p in sorted(model.committed) for t in model.committed[p] for c in t.changes]
    assert by_partition(got, xid_partition) == by_partition(expected, xid_partition)
    assert sorted(got, key=lambda c: c["event_id"]) == sorted(expected, key=lambda c: c["event_id"])
    # every committed transaction's END reached the topic, whatever a crash lost in flight
    ends = {t["id"] for t in sink.transaction_events() if t["status"] == "END"}
    assert ends == {t.xid for p in model.committed for t in model.committed[p]}
    # and in commit order per input partition, each at its first appearance (a restart must not send
    # a stored transaction's END before that of one committed earlier that it re-reads)
    first_ends: dict[int, list[int]] = {}
    for t in sink.transaction_events():
        if t["status"] == "END" and t["id"] in ends:
            ends.discard(t["id"])
            first_ends.setdefault(t["input_partition"], []).append(t["commit_offset"])
    assert all(offsets == sorted(offsets) for offsets in first_ends.values()), first_ends
