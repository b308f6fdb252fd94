"""An in-memory Store with the RocksDB store's semantics, for tests and tools."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from processor.core.store import Batch, Store


class MemoryBatch(Batch):
    def __init__(self) -> None:
        self.ops: list[tuple[str, bytes, bytes]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append(("put", key, value))

    def delete(self, key: bytes) -> None:
        self.ops.append(("del", key, b""))

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.ops.append(("range", begin, end))

    def __len__(self) -> int:
        return len(self.ops)


class MemoryStore(Store):
    """A sorted dict with the same semantics as the RocksDB store; for fast engine tests."""

    def __init__(self) -> None:
        from sortedcontainers import SortedDict

        self.data: Any = SortedDict()  # sortedcontainers has no type hints

    def batch(self) -> MemoryBatch:
        return MemoryBatch()

    def write(self, batch: Batch) -> None:
        assert isinstance(batch, MemoryBatch)
        for op in batch.ops:
            if op[0] == "put":
                self.data[op[1]] = op[2]
            elif op[0] == "del":
                self.data.pop(op[1], None)
            else:
                for key in list(self.data.irange(op[1], op[2], inclusive=(True, False))):
                    del self.data[key]
        batch.ops = []

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.data.get(key)
        return value

    def scan(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        # Snapshot the keys so callers may write while iterating, as with a RocksDB iterator.
        for key in list(self.data.irange(begin, end, inclusive=(True, False))):
            value = self.data.get(key)
            if value is not None:
                yield key, value

    def scan_reverse(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in list(self.data.irange(begin, end, inclusive=(True, False), reverse=True)):
            value = self.data.get(key)
            if value is not None:
                yield key, value

    def last_before(self, begin: bytes, end: bytes) -> bytes | None:
        key: bytes | None = next(iter(self.data.irange(begin, end, inclusive=(True, False), reverse=True)), None)
        return key

    def close(self) -> None:
        pass
