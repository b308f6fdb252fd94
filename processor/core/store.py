"""The store contract the engine needs: atomic batches over an ordered byte key-value map.

Writes go through a Batch, written atomically with Store.write(). Reads see only written data;
the engine flushes its pending batch before a read that depends on it (undo, fragments, commit).
Implementations live in processor.store (RocksDB for running, memory for tests).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

from processor.core.keys import upper_bound


class Batch(ABC):
    @abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    @abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abstractmethod
    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key k with begin <= k < end (begin <= end: RocksDB rejects a reversed range)."""

    @abstractmethod
    def __len__(self) -> int: ...


class Store(ABC):
    @abstractmethod
    def batch(self) -> Batch: ...

    @abstractmethod
    def write(self, batch: Batch) -> None:
        """Apply a batch atomically; the batch is consumed."""

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def scan(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Ascending (key, value) with begin <= key < end, streamed (never materialised)."""

    @abstractmethod
    def scan_reverse(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Descending (key, value) with begin <= key < end, streamed."""

    @abstractmethod
    def last_before(self, begin: bytes, end: bytes) -> bytes | None:
        """The greatest key k with begin <= k < end, in O(log n)."""

    @abstractmethod
    def close(self) -> None: ...

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.scan(prefix, upper_bound(prefix))

    def has_prefix(self, prefix: bytes) -> bool:
        return next(iter(self.scan_prefix(prefix)), None) is not None
