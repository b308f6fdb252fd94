"""A short kill campaign inside the suite: ~100k events, 5 SIGKILLs over 2 instances, at least one
state-dir wipe, a 5 s broker SIGSTOP. The long one is `python -m bench.chaos` (1M events, 20 kills,
3 instances, 30 s pause)."""

from __future__ import annotations

import pytest

from bench.chaos import Campaign, Chaos, table

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_short_kill_campaign_loses_nothing(tmp_path):
    campaign = Campaign(
        events=100_000,
        kills=5,
        instances=2,
        seed=11,
        rate=4000,
        pause=5.0,
        partitions=4,
        open_txns=100,
        wipe_prob=0.2,
        min_wipes=1,
        settle_timeout=150,
        workdir=tmp_path,
    )
    out = Chaos(campaign, log=lambda *_: None).run()
    f = out.figures
    report = table(f) + f"\nsamples: {out.samples}\nunplanned exits: {out.unplanned_exits}"
    assert f["kills"] == 5 and f["wipes"] >= 1, report
    assert f["reached_end"], report
    assert f["expected_changes"] > 30_000, report
    assert (f["lost"], f["unexpected"], f["mismatches"]) == (0, 0, 0), report
    assert f["duplicates_after_dedup"] == 0, report
    assert f["order_violations"] == 0 and not f["order_violations_per_input_partition"], report
    assert (f["missing_ends"], f["unexpected_ends"], f["end_count_mismatches"]) == (0, 0, 0), report
    assert (f["leaked_txn_keys"], f["leaked_meta_keys"]) == (0, 0), report
    assert f["resync_records"] == 0, report
    assert f["final_exit_codes"] and all(code == 0 for code in f["final_exit_codes"].values()), report
