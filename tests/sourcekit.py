"""Shared by the source-replay tests: the tables a replayed source log leaves behind."""

from __future__ import annotations

import json
from pathlib import Path

from processor.testing.reference import ReferenceModel

# The sample source logs and their expected output.
DATA = Path(__file__).resolve().parent / "data"
# The RawEvent fields the replay tests compare (the rest are source-specific or defaulted).
KEEP = (
    "xid",
    "op",
    "seq",
    "scn",
    "thread",
    "table",
    "key",
    "before",
    "after",
    "ddl",
    "undo",
    "row_id",
    "lob_column",
    "lob_offset",
    "lob_data",
    "lob_length",
)


def table_state(model: ReferenceModel) -> dict:
    """Apply the reference model's committed changes in commit order: what current-state tables hold.

    Keys are json.dumps(key, sort_keys=True), the form the expected files in tests/data use."""
    tables: dict[str, dict] = {}
    for txn in model.all_committed():
        for ch in txn.changes:
            t = tables.setdefault(ch["source"]["table"], {})
            k = json.dumps(ch["key"], sort_keys=True)
            if ch["op"] in ("c", "u"):
                t[k] = ch["after"]
            elif ch["op"] == "d":
                t.pop(k, None)
            elif ch["op"] == "t":
                t.clear()
    return tables
