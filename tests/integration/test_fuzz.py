"""Fuzzed input in the suite: a few thousand records, a fifth of them mutated (bench/fuzz_input.py has
the mutations, bench/fuzz.py the run and the checks; `make fuzz` runs 100k). The processor never
crashes, the DLQ holds exactly the records the reference model rejects (with reason, partition and
offset), and the output equals the reference model's."""

from __future__ import annotations

import pytest

from bench.fuzz import fuzz, table
from bench.fuzz_input import MUTATIONS

pytestmark = pytest.mark.integration


def test_fuzzed_input_never_crashes_and_matches_the_reference(broker, tmp_path):
    # Seed 21 found a stale row index (undo and fragments of a seq another row reused) and an XID
    # committed on two partitions (a record keyed by another key): tests/unit/test_fuzz_regressions.py.
    report = fuzz(broker.bootstrap, records=8_000, seed=21, bad_rate=0.2, workdir=tmp_path, timeout_s=600)
    text = table(report) + f"\nsamples: {report.samples}"
    assert set(report.mutated) == set(MUTATIONS), text  # every kind of mutation was exercised
    assert report.exit_code == 0 and report.tracebacks == 0, text + (tmp_path / "processor.log").read_text()[-3000:]
    assert report.expected_dlq > 500 and report.expected_changes > 1_000, text
    assert report.dlq_records == report.expected_dlq, text
    assert (report.dlq_missing, report.dlq_unexpected) == (0, 0), text
    assert (report.dlq_without_reason, report.dlq_without_position) == (0, 0), text
    assert report.changes_read >= report.expected_changes, text
    assert (report.changes_missing, report.changes_unexpected, report.changes_different) == (0, 0, 0), text
    assert report.end_count_mismatches == 0, text
    assert report.ok, text
