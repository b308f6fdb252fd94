"""Checks of what the Spark stage landed against expected rows (tests, demo and bench only)."""

from __future__ import annotations

import os
from typing import Any

from processor.spark.readback import key_string, read_state


def canonical_key(key: dict) -> str:
    """The state tables' key identity for a primary-key dict (readback.key_string)."""
    return key_string(key)


def _without_nulls(row: dict | None) -> dict | None:
    # A typed table holds every column of every row; a null column and an absent one are the same row.
    return None if row is None else {k: v for k, v in row.items() if v is not None}


def compare_state(output: str | os.PathLike, expected: dict[str, list[tuple[dict, dict]] | dict]) -> dict[str, Any]:
    """Diff current state against expected rows.

    `expected` maps table -> either {canonical key JSON: row} or a list of (key dict, row dict).
    Returns {table: {"missing": [...], "unexpected": [...], "different": [...]}} for tables that
    differ; an empty dict means equal. Values compare with Python equality, so types count
    (a string "1" is not the number 1).
    """
    actual = read_state(output)
    diffs: dict[str, Any] = {}
    for table in sorted(set(actual) | set(expected)):
        want = expected.get(table, {})
        if isinstance(want, list):
            want = {canonical_key(k): row for k, row in want}
        want = {k: _without_nulls(v) for k, v in want.items()}
        have = actual.get(table, {})
        d = {
            "missing": sorted(set(want) - set(have)),
            "unexpected": sorted(set(have) - set(want)),
            "different": sorted(k for k in set(want) & set(have) if not same_row(want[k], have[k])),
        }
        if any(d.values()):
            diffs[table] = d
    return diffs


def same_row(want: dict, have: dict) -> bool:
    """Equal columns and values, with the value types (bool is not int, bytes are bytes)."""
    if set(want) != set(have):
        return False
    for k, v in want.items():
        h = have[k]
        if isinstance(v, bool) != isinstance(h, bool) or isinstance(v, str) != isinstance(h, str):
            return False
        if isinstance(v, (bytes, bytearray)) != isinstance(h, (bytes, bytearray)) or v != h:
            return False
    return True


def compare_with_summary(output: str | os.PathLike, expected_dir: str | os.PathLike) -> dict[str, Any]:
    """Diff current state against a generator's summary.json `final_state` (empty dict: equal)."""
    from processor.testing.expected import read_summary

    return compare_state(output, read_summary(expected_dir)["final_state"])
