"""Global commit order (ordering: global): per-key order in the changes topic holds across input
partitions, where partition ordering lets a later commit overtake an earlier one."""

from __future__ import annotations

import pytest

from processor.runtime.runner import Runner
from processor.testing.verify import verify

from .processor_kit import Topics, config, write_workload

pytestmark = pytest.mark.integration

# Few keys and many open transactions: transactions on different partitions keep changing the
# same rows, so commits alternate across partitions on the same keys.
HOT_KEYS = dict(events=25_000, open_txns=40, keys_per_table=40, heartbeat_every=200, seed=17)


def _run(broker, tmp_path, ordering: str):
    topics = Topics.fresh()
    expected = tmp_path / f"expected-{ordering}"
    write_workload(broker.bootstrap, topics.raw, expected, partitions=4, **HOT_KEYS)
    cfg = config(
        broker.bootstrap, topics, tmp_path / f"state-{ordering}", available_now=True, ordering=ordering, max_batch=500
    )
    summary = Runner(cfg).run()
    # Judge both runs by the strict rule: every key's changes in commit_scn order.
    return summary, verify(broker.bootstrap, expected, topics.changes, topics.transactions, ordering="global")


def test_partition_ordering_shows_the_cross_partition_violations(broker, tmp_path):
    _, report = _run(broker, tmp_path, "partition")
    assert (report.lost, report.unexpected, report.mismatches) == (0, 0, 0), report.summary()
    assert report.order_violations > 0, "the workload must provoke cross-partition reordering"


def test_global_ordering_keeps_every_key_in_commit_scn_order(broker, tmp_path):
    _summary, report = _run(broker, tmp_path, "global")
    assert (report.lost, report.unexpected, report.mismatches) == (0, 0, 0), report.summary()
    assert report.order_violations == 0, report.summary()
    assert (report.missing_ends, report.end_count_mismatches) == (0, 0)
