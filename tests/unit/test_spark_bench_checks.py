"""bench.spark_bench's correctness checks (no JVM): the generator's model of the current state agrees
with the records it yields, and a phase whose figures disagree with what was produced is reported."""

from __future__ import annotations

import itertools

from bench.spark_bench import phase_failures, synthetic_changes
from processor.core.events import decode_change


def newest_per_key(records) -> set[tuple[str, str]]:
    """The keys whose newest change (by commit scn; a redelivery repeats an older one) is not a delete."""
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    for _key, value in records:
        ev = decode_change(value)
        k = (ev["source"]["table"], str(ev["key"]))
        scn = ev["source"]["commit_scn"]
        if k not in newest or scn > newest[k][0]:
            newest[k] = (scn, ev["op"])
    return {k for k, (_, op) in newest.items() if op != "d"}


def test_the_state_model_matches_the_records_phase_by_phase():
    counts: dict[str, int] = {}
    present = bytearray(3 * 50)
    gen = synthetic_changes(3000, tables=3, keys=50, counts=counts, present=present)
    first = list(itertools.islice(gen, 1000))
    assert present.count(1) == len(newest_per_key(first))
    rest = list(gen)
    assert len(rest) == 2000 and counts["redeliveries"] > 0
    assert present.count(1) == len(newest_per_key(first + rest))
    # One generator across the phases: event ids never repeat except as redeliveries.
    ids = [decode_change(v)["event_id"] for _, v in first + rest]
    assert len(set(ids)) == len(ids) - counts["redeliveries"]


def good() -> dict:
    return {
        "source_records": 1000,
        "distinct_events": 980,
        "changelog_rows": 980,
        "changelog_distinct_events": 980,
        "current_state_rows": 400,
        "expected_state_rows": 400,
    }


def test_a_phase_with_right_figures_passes():
    assert phase_failures(good(), produced=1000, phase_records=600, input_rows=600, stage="full") == []


def test_each_wrong_figure_is_reported():
    cases = [
        ({"source_records": 999}, {}, "the topic holds"),
        ({}, {"input_rows": 599}, "the query read"),
        ({"changelog_rows": 979, "changelog_distinct_events": 979}, {}, "distinct events were produced"),
        ({"changelog_distinct_events": 979}, {}, "distinct event ids"),
        ({"current_state_rows": 401}, {}, "the current state holds"),
    ]
    for figures, kw, message in cases:
        args = {"produced": 1000, "phase_records": 600, "input_rows": 600, "stage": "full", **kw}
        failed = phase_failures({**good(), **figures}, **args)
        assert len(failed) == 1 and message in failed[0], (figures, kw, failed)


def test_the_cut_stages_check_only_what_they_write():
    wrong_lake = {**good(), "changelog_rows": 0, "changelog_distinct_events": 0, "current_state_rows": 0}
    assert phase_failures(wrong_lake, produced=1000, phase_records=600, input_rows=600, stage="dedup") == []
    assert len(phase_failures(wrong_lake, produced=1000, phase_records=600, input_rows=600, stage="changelog")) == 1
