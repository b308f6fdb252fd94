"""The state store: one interface, a RocksDB implementation that runs and a memory one for tests.

Writes go through a Batch, written atomically with Store.write(). Reads see only written data;
the engine flushes its pending batch before a read that depends on it (undo, fragments, commit).
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Iterator

from .keys import upper_bound


class Batch(ABC):
    @abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    @abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abstractmethod
    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key k with begin <= k < end."""

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


# --------------------------------------------------------------------------- memory

class MemoryBatch(Batch):
    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append(("put", key, value))

    def delete(self, key: bytes) -> None:
        self.ops.append(("del", key))

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.ops.append(("range", begin, end))

    def __len__(self) -> int:
        return len(self.ops)


class MemoryStore(Store):
    """A sorted dict with the same semantics as the RocksDB store; for fast engine tests."""

    def __init__(self) -> None:
        from sortedcontainers import SortedDict

        self.data = SortedDict()

    def batch(self) -> MemoryBatch:
        return MemoryBatch()

    def write(self, batch: MemoryBatch) -> None:
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
        return self.data.get(key)

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
        for key in self.data.irange(begin, end, inclusive=(True, False), reverse=True):
            return key
        return None

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- rocksdb

class RocksBatch(Batch):
    def __init__(self) -> None:
        from rocksdict import WriteBatch

        self.wb = WriteBatch(raw_mode=True)
        self.n = 0

    def put(self, key: bytes, value: bytes) -> None:
        self.wb.put(key, value)
        self.n += 1

    def delete(self, key: bytes) -> None:
        self.wb.delete(key)
        self.n += 1

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.wb.delete_range(begin, end)
        self.n += 1

    def __len__(self) -> int:
        return self.n


class RocksStore(Store):
    """rocksdict in raw mode: keys and values are bytes, ordered bytewise."""

    def __init__(self, path: str | Path, write_buffer_mb: int = 16, block_cache_mb: int = 16) -> None:
        from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict, WriteOptions

        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        # Bounded memory: memtables and block cache are fixed-size, whatever the transaction size.
        opts.set_write_buffer_size(write_buffer_mb << 20)
        opts.set_max_write_buffer_number(2)
        opts.set_compression_type(DBCompressionType.lz4())
        table = BlockBasedOptions()
        table.set_block_cache(Cache(block_cache_mb << 20))
        opts.set_block_based_table_factory(table)
        self.db = Rdict(str(self.path), opts)
        wopts = WriteOptions()
        wopts.disable_wal = False  # the WAL is what makes a write survive SIGKILL
        self.db.set_write_options(wopts)

    def batch(self) -> RocksBatch:
        return RocksBatch()

    def write(self, batch: RocksBatch) -> None:
        if batch.n:
            self.db.write(batch.wb)
        batch.wb = None
        batch.n = 0

    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def scan(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self.db.iter()
        it.seek(begin)
        while it.valid():
            key = it.key()
            if key >= end:
                break
            yield key, it.value()
            it.next()

    def scan_reverse(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self.db.iter()
        it.seek_for_prev(end)
        while it.valid():
            key = it.key()
            if key < begin:
                break
            if key < end:
                yield key, it.value()
            it.prev()

    def last_before(self, begin: bytes, end: bytes) -> bytes | None:
        it = self.db.iter()
        it.seek_for_prev(end)
        while it.valid():
            key = it.key()
            if key < begin:
                return None
            if key < end:
                return key
            it.prev()
        return None

    def approximate_bytes(self) -> int:
        try:
            return int(self.db.property_int_value("rocksdb.estimate-live-data-size") or 0)
        except Exception:
            return 0

    def close(self) -> None:
        self.db.close()

    @staticmethod
    def wipe(path: str | Path) -> None:
        shutil.rmtree(path, ignore_errors=True)
