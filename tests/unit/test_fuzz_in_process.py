"""bench.fuzz without a broker: the fuzz input fed to the engines (in-memory store) and the emitter
as the runner drives them, checked against the reference model. Seconds per seed, so the suite
covers seeds the broker run (tests/integration/test_fuzz.py, seed 21) does not."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.fuzz import fuzz_in_process, table
from bench.fuzz_input import MUTATIONS, PARTITIONS, fuzzed_records, partition_of_key
from processor.core import events as ev
from processor.core.partitioning import partition_of


@pytest.mark.parametrize("seed", [1, 5])
def test_engine_and_reference_agree_on_fuzzed_input(seed):
    report = fuzz_in_process(records=4_000, seed=seed, bad_rate=0.2)
    text = table(report) + f"\nsamples: {report.samples}"
    assert set(report.mutated) == set(MUTATIONS), text
    assert report.expected_dlq > 200 and report.expected_changes > 500, text
    assert report.dlq_records == report.expected_dlq, text
    assert report.changes_read >= report.expected_changes, text
    assert report.ok, text


def test_fuzz_records_are_placed_as_the_producer_places_them():
    # The broker run passes these partitions to the producer; they must be murmur2 of the key, as
    # for every other XID-keyed record (processor.core.partitioning).
    placed = Counter()
    for key, value, _headers, partition, _injected in fuzzed_records(600, seed=2, bad_rate=0.2, counts=Counter()):
        if key == b"":
            assert ev.decode_raw(value)["op"] == ev.HEARTBEAT
            continue
        assert partition == partition_of_key(key)
        try:
            assert partition == partition_of(key.decode(), PARTITIONS)
        except UnicodeDecodeError:
            pass  # a non-UTF-8 key: no XID to compare with
        placed[partition] += 1
    assert len(placed) == PARTITIONS
