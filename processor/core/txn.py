"""In-memory metadata of one transaction: small and fixed-size, whatever the transaction's size.

The changes themselves live in the store; this holds what the engine needs to route events and
what the emitter needs to resume (the emit cursor). A transaction that began in the current poll
batch keeps its changes in `staged` until the batch's checkpoint spills them to the store: one
that also ends in that batch never touches the store (PartitionEngine, "staging").
"""

from __future__ import annotations

import builtins
import json
import operator
from dataclasses import dataclass, field, fields
from typing import Any

from processor.core import keys

COMMITTED = "committed"
ROLLED_BACK = "rolled_back"
FILTERED = "filtered"
ABANDONED = "abandoned"


@dataclass(slots=True)
class Commit:
    scn: int
    ts_ms: int
    thread: int
    offset: int


@dataclass(slots=True)
class Txn:
    partition: int
    xid: str
    first_offset: int
    prefix: bytes = b""
    first_ts_ms: int = 0
    user: str | None = None
    client: str | None = None
    identity_seen: bool = False
    filtered: bool = False
    savepoints: list[tuple[str, int]] = field(default_factory=list)  # [(name, seq)], innermost last
    events: int = 0
    bytes: int = 0
    fragments: int = 0  # > 0: assembly must look for fragments to merge
    commit: Commit | None = None
    # Emit cursor: everything up to acked_seq is acknowledged by the broker (Debezium's txSeq).
    acked_seq: int = -1
    acked_count: int = 0
    acked_tables: dict[str, int] = field(default_factory=dict)
    # Store writes of a transaction begun in this batch, key -> value, not yet spilled; never persisted.
    staged: dict[builtins.bytes, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.prefix:
            self.prefix = keys.txn_prefix(self.partition, self.xid)

    def require_commit(self) -> Commit:
        """The commit of a committed transaction (assembly and emission only ever see those)."""
        if self.commit is None:
            raise ValueError(f"transaction {self.xid!r} has no commit")
        return self.commit

    def to_bytes(self) -> builtins.bytes:  # builtins: the `bytes` field shadows the type here
        # A JSON array in _PERSISTED order, commit last: a third of the cost of an object with names.
        c = self.commit
        doc = [*_persisted_values(self), None if c is None else [c.scn, c.ts_ms, c.thread, c.offset]]
        return _encode(doc).encode()

    @classmethod
    def from_bytes(cls, raw: builtins.bytes) -> Txn:
        doc = json.loads(raw)
        commit = doc.pop()
        txn = cls(**dict(zip(_PERSISTED, doc, strict=True)))
        txn.savepoints = [(str(s[0]), int(s[1])) for s in txn.savepoints]
        txn.commit = Commit(*commit) if commit else None
        return txn


_PERSISTED = tuple(f.name for f in fields(Txn) if f.name not in ("prefix", "commit", "staged"))
_persisted_values = operator.attrgetter(*_PERSISTED)  # one C call, not a getattr per field
_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
