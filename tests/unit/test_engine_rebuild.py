"""A rebuild from the committed low watermark must behave like the engine that committed it.

After a failover to an empty (or stale) disk, a partition is re-read from the committed low
watermark, and the completed-transaction index is rebuilt from END and outcome records of what had
finished by then. Valid input re-read that way must never reach the DLQ: found by the kill campaign
(false "ROLLBACK_TO_SAVEPOINT: unknown savepoint" records after failovers).
"""

from __future__ import annotations

from collections import defaultdict

from processor.core import events as ev
from processor.core.engine import Committed, DeadLetter, PartitionEngine
from processor.core.partitioning import fan_out
from processor.store.memory import MemoryStore
from processor.testing.generator import WorkloadGenerator

from ..enginekit import R, ins, new_run


def _replay(engine: PartitionEngine, records, start: int, every: int = 25):
    """Apply records from `start`; returns dead letters and (low watermark, next offset) per checkpoint."""
    dead, checkpoints = [], []
    for i, (offset, key, value) in enumerate(r for r in records if r[0] >= start):
        for action in engine.apply(offset, key, value):
            if isinstance(action, DeadLetter):
                dead.append((offset, action.reason))
            elif isinstance(action, Committed):
                engine.flush_data()
                engine.acknowledged(action.txn)
        if i % every == every - 1:
            engine.checkpoint()
            checkpoints.append((engine.low_watermark(), engine.next_offset))
    return dead, checkpoints


def test_rebuild_from_any_committed_low_watermark_dead_letters_nothing():
    """Generated workloads with frequent restarts (repeated BEGINs) and savepoints: for sampled
    committed low watermarks, a fresh engine that knows what had finished by then (END and outcome
    records) re-reads from there without a single dead letter."""
    workload = WorkloadGenerator(12_000, seed=13, open_txns=40, restart_rate=0.02, savepoint_rate=0.1)
    by_partition: dict[int, list] = defaultdict(list)
    for p, offset, e in fan_out(workload, 3):
        by_partition[p].append((offset, e["xid"].encode(), ev.encode_raw(e)))
    rebuilds = 0
    for p, records in by_partition.items():
        first = PartitionEngine(p, MemoryStore())
        dead, checkpoints = _replay(first, records, 0)
        assert dead == []
        finished = sorted(first.completed.items(), key=lambda kv: kv[1][0])
        for low, upto in sorted(set(checkpoints))[::5]:
            engine = PartitionEngine(p, MemoryStore())
            engine.next_offset = low
            for xid, (offset, outcome) in finished:
                if offset < upto:  # finished, with its END or outcome record, when `low` was committed
                    engine.mark_completed(xid, offset, outcome)
            dead, _ = _replay(engine, records, low)
            assert dead == [], f"partition {p}, rebuilt from {low} (committed at {upto}): {dead[:3]}"
            rebuilds += 1
    assert rebuilds > 50


def test_restart_keeps_the_low_watermark_at_the_first_begin():
    """A repeated BEGIN restarts the transaction, but its earlier events stay in the log: the low
    watermark must not pass them, or a rebuild re-reads the first attempt's tail without its start."""
    run = new_run(MemoryStore())
    run.feed(
        R("t", ev.BEGIN, 0),  # 0
        R("t", ev.SAVEPOINT, 1, savepoint="sp0"),  # 1
        R("u", ev.BEGIN, 0),  # 2
        R("t", ev.ROLLBACK_TO_SAVEPOINT, 2, savepoint="sp0"),  # 3
        R("t", ev.BEGIN, 0),  # 4: the source re-sent t from its start
        ins("t", 1, 1),  # 5
    )
    assert run.engine.stats.restarts == 1
    assert run.engine.low_watermark() == 0
