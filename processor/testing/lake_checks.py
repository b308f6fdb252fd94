"""Checks of what the Spark stage landed against expected rows (tests, demo and bench only)."""

from __future__ import annotations

import os
from typing import Any

from processor.spark.readback import read_state


def canonical_key(key: dict) -> str:
    """The state tables' key identity for a primary-key dict (same encoding as decode.row_to_json)."""
    from processor.spark.decode import row_to_json

    return row_to_json(key)


def compare_state(output: str | os.PathLike, expected: dict[str, list[tuple[dict, dict]] | dict]) -> dict[str, Any]:
    """Diff current state against expected rows.

    `expected` maps table -> either {canonical key JSON: row} or a list of (key dict, row dict).
    Returns {table: {"missing": [...], "unexpected": [...], "different": [...]}} for tables that
    differ; an empty dict means equal.
    """
    actual = read_state(output)
    diffs: dict[str, Any] = {}
    for table in sorted(set(actual) | set(expected)):
        want = expected.get(table, {})
        if isinstance(want, list):
            want = {canonical_key(k): row for k, row in want}
        have = actual.get(table, {})
        d = {
            "missing": sorted(set(want) - set(have)),
            "unexpected": sorted(set(have) - set(want)),
            "different": sorted(k for k in set(want) & set(have) if want[k] != have[k]),
        }
        if any(d.values()):
            diffs[table] = d
    return diffs


def compare_with_summary(output: str | os.PathLike, expected_dir: str | os.PathLike) -> dict[str, Any]:
    """Diff current state against a generator's summary.json `final_state` (empty dict: equal)."""
    from processor.testing.expected import read_summary

    return compare_state(output, read_summary(expected_dir)["final_state"])
