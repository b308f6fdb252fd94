"""The expected-output files a workload generator writes and `processor.verify` reads.

A directory holds three files:
- `expected_changes.jsonl`: one surviving change per line, in commit order then seq order:
  {event_id, xid, seq, commit_scn, table, op (c/u/d/t/ddl), key, before, after, ddl}
- `expected_transactions.jsonl`: one committed transaction per line, in commit order:
  {xid, commit_scn, commit_ts_ms, event_count, data_collections: [{name, event_count}]}
- `summary.json`: counts, the generator parameters and `final_state`
  {table: {key_string(key): row}}: what each table holds after applying every committed change.

JSON cannot hold bytes, so a bytes value is written as {"$bytes": "<hex>"}.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

CHANGES_FILE = "expected_changes.jsonl"
TRANSACTIONS_FILE = "expected_transactions.jsonl"
SUMMARY_FILE = "summary.json"


def _bytes_to_json(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any) -> str:
    """Compact JSON with bytes as {"$bytes": hex}."""
    return json.dumps(value, separators=(",", ":"), default=_bytes_to_json)


def _json_to_bytes(obj: dict) -> Any:
    if len(obj) == 1 and "$bytes" in obj:
        return bytes.fromhex(obj["$bytes"])
    return obj


def loads(text: str) -> Any:
    return json.loads(text, object_hook=_json_to_bytes)


def key_string(key: dict | None) -> str:
    """Canonical text of a primary key: the final-state map is keyed by it."""
    return json.dumps(key or {}, sort_keys=True, separators=(",", ":"), default=_bytes_to_json)


class ExpectedWriter:
    """Streams expected changes and transactions to `directory` as they commit."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._changes = open(self.directory / CHANGES_FILE, "w", encoding="utf-8")
        self._transactions = open(self.directory / TRANSACTIONS_FILE, "w", encoding="utf-8")

    def write_transaction(
        self,
        xid: str,
        commit_scn: int,
        commit_ts_ms: int,
        thread: int,
        change_bodies: Iterable[tuple[int, str]],
        table_counts: dict[str, int],
    ) -> None:
        """change_bodies: (seq, JSON object text without event_id and commit_scn), in seq order."""
        n = 0
        prefix_scn = f',"commit_scn":{commit_scn},'
        for seq, body in change_bodies:
            event_id = f"{thread}:{commit_scn}:{xid}:{seq}"
            self._changes.write('{"event_id":' + json.dumps(event_id) + prefix_scn + body[1:] + "\n")
            n += 1
        collections = [{"name": name, "event_count": c} for name, c in sorted(table_counts.items()) if c]
        self._transactions.write(
            dumps(
                {
                    "xid": xid,
                    "commit_scn": commit_scn,
                    "commit_ts_ms": commit_ts_ms,
                    "event_count": n,
                    "data_collections": collections,
                }
            )
            + "\n"
        )

    def write_committed(self, txn: Any) -> None:
        """Write a committed transaction of the reference model (processor.reference.CommittedTransaction)."""
        bodies = [
            (
                c["source"]["seq"],
                dumps(
                    {
                        "xid": txn.xid,
                        "seq": c["source"]["seq"],
                        "table": c["source"]["table"],
                        "op": c["op"],
                        "key": c["key"],
                        "before": c["before"],
                        "after": c["after"],
                        "ddl": c["ddl"],
                    }
                ),
            )
            for c in txn.changes
        ]
        counts: dict[str, int] = {}
        for c in txn.changes:
            counts[c["source"]["table"] or ""] = counts.get(c["source"]["table"] or "", 0) + 1
        self.write_transaction(txn.xid, txn.commit_scn, txn.commit_ts_ms, txn.thread, bodies, counts)

    def close(self, summary: dict) -> None:
        self._changes.close()
        self._transactions.close()
        (self.directory / SUMMARY_FILE).write_text(dumps(summary) + "\n", encoding="utf-8")


def read_changes(directory: str | Path) -> Iterator[dict]:
    with open(Path(directory) / CHANGES_FILE, encoding="utf-8") as f:
        for line in f:
            yield loads(line)


def read_transactions(directory: str | Path) -> Iterator[dict]:
    with open(Path(directory) / TRANSACTIONS_FILE, encoding="utf-8") as f:
        for line in f:
            yield loads(line)


def read_summary(directory: str | Path) -> dict:
    return loads((Path(directory) / SUMMARY_FILE).read_text(encoding="utf-8"))


def apply_changes(changes: Iterable[dict]) -> dict[str, dict[str, dict]]:
    """The tables after applying changes in the given (commit) order, as in summary["final_state"].

    Each change is a dict with table, op (c/u/d/t/ddl), key and after, e.g. an expected line or a
    ChangeEvent flattened with its source.table.
    """
    state: dict[str, dict[str, dict]] = {}
    for change in changes:
        table, op = change["table"], change["op"]
        if op == "ddl":
            continue
        rows = state.setdefault(table, {})
        if op == "t":
            rows.clear()
        elif op == "d":
            rows.pop(key_string(change["key"]), None)
        else:
            rows[key_string(change["key"])] = change["after"]
    return {table: rows for table, rows in state.items() if rows}
