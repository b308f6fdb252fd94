"""The RocksDB (rocksdict) Store that the processor runs on."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from processor.core.store import Batch, Store


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
        wopts.disable_wal = False  # type: ignore[method-assign,assignment]  # the WAL is what makes a write survive SIGKILL
        self.db.set_write_options(wopts)

    def batch(self) -> RocksBatch:
        return RocksBatch()

    def write(self, batch: Batch) -> None:
        assert isinstance(batch, RocksBatch)
        if batch.n:
            self.db.write(batch.wb)
        batch.wb = None  # type: ignore[assignment]  # consumed: a reuse fails loudly
        batch.n = 0

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.db.get(key)
        return value

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
            key: bytes = it.key()
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
