"""The RocksDB (rocksdict) Store that the processor runs on."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from processor.core.store import Batch, Store


class StoreWriteError(OSError):
    """RocksDB refused a write (a full disk, an I/O error). The store is unusable from then on:
    the processor must stop without committing input offsets past what the store holds."""

    def __init__(self, path: Path, cause: BaseException):
        self.path = path
        self.free_bytes = free_bytes(path)
        self.no_space = self.free_bytes is not None and self.free_bytes < 1 << 20
        what = "disk full" if self.no_space else "write failed"
        super().__init__(f"state store {path}: {what} ({self.free_bytes} bytes free): {cause}")


def free_bytes(path: Path) -> int | None:
    """Bytes available to this process on the filesystem holding `path` (None if unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class RocksBatch(Batch):
    """A rocksdict WriteBatch. put/delete/delete_range are the WriteBatch's own methods (no Python
    frame per call on the hot path); after the store consumed the batch they raise."""

    def __init__(self) -> None:
        from rocksdict import WriteBatch

        self.wb = wb = WriteBatch(raw_mode=True)
        self.put = wb.put  # type: ignore[method-assign]
        self.delete = wb.delete  # type: ignore[method-assign]
        self.delete_range = wb.delete_range  # type: ignore[method-assign]

    def put(self, key: bytes, value: bytes) -> None:  # replaced per instance in __init__
        self.wb.put(key, value)

    def delete(self, key: bytes) -> None:
        self.wb.delete(key)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.wb.delete_range(begin, end)

    def consumed(self) -> None:
        self.wb = None  # type: ignore[assignment]
        self.put = self.delete = self.delete_range = _consumed  # type: ignore[method-assign,assignment]

    def __len__(self) -> int:
        return 0 if self.wb is None else int(self.wb.len())


def _consumed(*_: object) -> None:
    raise RuntimeError("this batch was written already: take a new one from store.batch()")


# L0 files before RocksDB compacts them into a lower level (its default: 4), and the counts at which
# it slows and stops writes (20 and 36 by default), kept as far above it as the defaults are.
L0_COMPACTION_TRIGGER = 16
L0_SLOWDOWN_WRITES = 48
L0_STOP_WRITES = 64


class RocksStore(Store):
    """rocksdict in raw mode: keys and values are bytes, ordered bytewise."""

    def __init__(self, path: str | Path, write_buffer_mb: int = 16, block_cache_mb: int = 16) -> None:
        from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict, ReadOptions, WriteOptions

        self._read_options = ReadOptions

        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        # Bounded memory: memtables and block cache are fixed-size, whatever the transaction size.
        opts.set_write_buffer_size(write_buffer_mb << 20)
        opts.set_max_write_buffer_number(2)
        opts.set_compression_type(DBCompressionType.lz4())
        # A buffered transaction is written once, read once at its commit, then deleted: compacting
        # it before that is wasted work, and a large one was compacted (a 16 MB memtable holds ~75k
        # changes: 500k are 6 L0 files, 1M 13). Its flushed files overlap, as each also holds the
        # partition's write-ahead marker (keys.ahead_key, before every event key), so a compaction
        # rewrote them whole. At the default trigger a 1M-change transaction took 7.8-8.3 CPU us per
        # change to buffer and emit (the compaction's threads included), at 16 5.6-5.7
        # (bench.huge_inproc; docs/benchmarks.md, session 35).
        opts.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER)
        opts.set_level_zero_slowdown_writes_trigger(L0_SLOWDOWN_WRITES)
        opts.set_level_zero_stop_writes_trigger(L0_STOP_WRITES)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(block_cache_mb << 20))
        opts.set_block_based_table_factory(table)
        self.db = Rdict(str(self.path), opts)
        wopts = WriteOptions()
        wopts.disable_wal = False  # type: ignore[method-assign,assignment]  # the WAL is what makes a write survive SIGKILL
        self.db.set_write_options(wopts)
        self.failed: StoreWriteError | None = None

    def batch(self) -> RocksBatch:
        return RocksBatch()

    def write(self, batch: Batch) -> None:
        assert isinstance(batch, RocksBatch)
        if self.failed is not None:
            raise self.failed  # RocksDB keeps its background error: no later write may look durable
        if len(batch):
            try:
                self.db.write(batch.wb)
            except Exception as exc:  # rocksdict raises a bare Exception for RocksDB's IOError
                self.failed = StoreWriteError(self.path, exc)
                batch.__init__()  # type: ignore[misc]  # rocksdict consumed it; later puts must reach this error
                raise self.failed from exc
        batch.consumed()  # a reuse fails loudly

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.db.get(key)
        return value

    def scan(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        # One native call per item: RocksDB stops at the upper bound itself. The iterator does not
        # own the bound: this generator keeps the options alive until the scan ends.
        opts = self._read_options()
        opts.set_iterate_upper_bound(end)
        yield from self.db.items(from_key=begin, read_opt=opts)

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
        try:
            self.db.close()
        except Exception:
            if self.failed is None:
                raise  # after a failed write, closing reports the same error again: keep the first

    @staticmethod
    def wipe(path: str | Path) -> None:
        shutil.rmtree(path, ignore_errors=True)
