"""What the engine decides and the runtime does: the actions PartitionEngine returns.

The engine never touches Kafka, disk or clocks; it returns these and the runtime turns them into
I/O. A transaction's end is an action too (Finished), so the runtime learns every outcome from
return values, never from state it has to poll.

They are plain slotted dataclasses, not frozen ones: a frozen dataclass's __init__ sets each field
through object.__setattr__ (~370 ns against ~100 here), and two are built per transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from processor.core.txn import COMMITTED, Txn


@dataclass(slots=True)
class DeadLetter:
    """Send this raw record to the DLQ with the reason; the input never stops on it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


@dataclass(slots=True)
class Committed:
    """This transaction committed: release its changes (BEGIN, changes, END) to the outputs."""

    txn: Txn


@dataclass(slots=True)
class Finished:
    """This transaction is done and entered the completed-transaction index.

    `outcome` is committed, rolled back, filtered or abandoned; `offset` is where it finished.
    Committed ones are recorded by their END record; the others emit nothing, so the runtime
    publishes an outcome record (needs_record), and the low watermark may pass the transaction's
    events only once that record is durable: a rebuild on an empty disk reads it to drop the tail.
    """

    partition: int
    xid: str
    offset: int
    outcome: str

    @property
    def needs_record(self) -> bool:
        return self.outcome != COMMITTED


Action = DeadLetter | Committed | Finished
