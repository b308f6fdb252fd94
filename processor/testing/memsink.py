"""An in-memory Sink for tests and the reference runs: records outputs, acknowledges on demand."""

from __future__ import annotations

from collections import deque

from processor.core import events as ev


class MemorySink:
    def __init__(self, auto_ack: bool = True):
        self.auto_ack = auto_ack
        self.changes: list[tuple[bytes, bytes | None]] = []
        self.transactions: list[tuple[bytes, bytes]] = []
        self.unacked: deque = deque()

    def send_change(self, key, value, on_ack) -> None:
        self.changes.append((key, value))
        self._ack(on_ack)

    def send_transaction(self, key, value, on_ack) -> None:
        self.transactions.append((key, value))
        self._ack(on_ack)

    def _ack(self, on_ack) -> None:
        if self.auto_ack:
            on_ack(None)
        else:
            self.unacked.append(on_ack)

    def settled(self) -> bool:
        """Every output taken so far is acknowledged (with auto_ack, always)."""
        return not self.unacked

    def ack_all(self) -> None:
        while self.unacked:
            self.unacked.popleft()(None)

    def change_events(self) -> list[dict]:
        return [ev.decode_change(v) for _, v in self.changes if v is not None]

    def transaction_events(self) -> list[dict]:
        return [ev.decode_transaction(v) for _, v in self.transactions]
