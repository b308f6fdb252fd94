"""Last known row images for unchanged TOAST values, kept by the PostgreSQL capture on its own disk.

pgoutput does not send a TOASTed column that an UPDATE left unchanged. The capture fills it from the
last image of that row it saw committed, so the raw topic (and every consumer after it) holds the
full row. The images live here, in a rocksdict store under the capture's state directory:

- `c|row` -> the committed versions of a row, [(commit end LSN, image or None for deleted)];
- images written by a transaction not yet committed (streamed transactions arrive before their
  commit, and their savepoints may still be rolled back) wait in memory, and beyond MEMORY_ROWS
  writes of one transaction under `p|xid\\0row\\0seq`;
- `j|lsn|row` -> a journal of commits the slot has not confirmed yet.

A commit moves a transaction's newest image of each row into `c|` under its end LSN. On start, the
versions newer than the slot's confirmed flush LSN are dropped: PostgreSQL sends those transactions
again, and they must see the images as they were before them.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path
from typing import Any

from processor.store.rocks import RocksStore

COMMITTED, PENDING, JOURNAL = b"c|", b"p|", b"j|"
_LSN = struct.Struct(">Q")
_SEQ = struct.Struct(">Q")
_BATCH = 5000
MEMORY_ROWS = 2000  # writes of one transaction kept in memory before they spill to disk


def row_key(table: str, key: dict[str, Any]) -> bytes:
    """table + primary key, canonical (sorted columns; bytes as hex)."""
    text = json.dumps(sorted(key.items()), default=lambda v: v.hex() if isinstance(v, bytes) else str(v))
    return table.encode() + b"\x00" + text.encode()


def _upper(prefix: bytes) -> bytes:
    return prefix + b"\xff" * 9


class RowImages:
    """Committed and in-flight row images, versioned by commit end LSN (see the module doc)."""

    def __init__(self, path: str | Path) -> None:
        self.store = RocksStore(path, write_buffer_mb=8, block_cache_mb=8)
        self.acked_lsn = 0
        self._seq: dict[str, int] = {}
        self._memory: dict[str, dict[bytes, list[tuple[str | None, dict | None]]]] = {}
        self._aborted: dict[str, set[str]] = {}

    def close(self) -> None:
        self.store.close()

    # ---- lifecycle against the slot ------------------------------------------------------------

    def rewind_to(self, confirmed_lsn: int) -> int:
        """Forget what PostgreSQL will send again: commits after `confirmed_lsn` and all pending images.
        Returns how many row versions were dropped."""
        self.acked_lsn = confirmed_lsn
        dropped = 0
        batch = self.store.batch()
        begin = JOURNAL + _LSN.pack(confirmed_lsn + 1)
        for jkey, _ in self.store.scan(begin, _upper(JOURNAL)):
            row = jkey[len(JOURNAL) + _LSN.size :]
            versions = self._versions(row)
            kept = [v for v in versions if v[0] <= confirmed_lsn]
            dropped += len(versions) - len(kept)
            self._put_versions(batch, row, kept)
            batch.delete(jkey)
        batch.delete_range(PENDING, _upper(PENDING))
        self.store.write(batch)
        self._seq.clear()
        self._memory.clear()
        self._aborted.clear()
        return dropped

    def acknowledge(self, lsn: int) -> None:
        """The slot confirmed `lsn`: those commits will never be sent again."""
        if lsn <= self.acked_lsn:
            return
        self.acked_lsn = lsn
        batch = self.store.batch()
        batch.delete_range(JOURNAL, JOURNAL + _LSN.pack(lsn + 1))
        self.store.write(batch)

    # ---- transactions ---------------------------------------------------------------------------
    # A transaction's writes stay in memory up to MEMORY_ROWS; beyond that they spill to the store
    # (so a huge transaction costs disk, not heap). Spilled entries are newer than the in-memory ones.

    def begin(self, xid: str) -> None:
        """A transaction starts (or is sent again from its start): drop what it wrote before."""
        self.abort(xid)

    def record(self, xid: str, subxid: str | None, row: bytes, image: dict | None) -> None:
        """The transaction wrote this full image of the row (None: deleted it)."""
        seq = self._seq.get(xid, 0)
        self._seq[xid] = seq + 1
        if seq < MEMORY_ROWS:
            self._memory.setdefault(xid, {}).setdefault(row, []).append((subxid, image))
            return
        batch = self.store.batch()
        batch.put(self._pending_prefix(xid, row) + _SEQ.pack(seq), pickle.dumps((subxid, image)))
        self.store.write(batch)

    def subtransaction_aborted(self, xid: str, subxid: str) -> None:
        self._aborted.setdefault(xid, set()).add(subxid)

    def abort(self, xid: str) -> None:
        if self._seq.get(xid, 0) > MEMORY_ROWS:  # range tombstones slow reads: only when something spilled
            prefix = PENDING + xid.encode() + b"\x00"
            batch = self.store.batch()
            batch.delete_range(prefix, _upper(prefix))
            self.store.write(batch)
        self._seq.pop(xid, None)
        self._memory.pop(xid, None)
        self._aborted.pop(xid, None)

    def commit(self, xid: str, end_lsn: int) -> int:
        """Make the transaction's newest image of each row the row's committed version. Returns rows."""
        aborted = self._aborted.get(xid, set())
        newest: dict[bytes, dict | None] = {}
        for row, writes in self._memory.get(xid, {}).items():
            live = [image for subxid, image in writes if subxid is None or subxid not in aborted]
            if live:
                newest[row] = live[-1]
        batch = self.store.batch()
        if self._seq.get(xid, 0) > MEMORY_ROWS:
            prefix = PENDING + xid.encode() + b"\x00"
            for key, value in self.store.scan(prefix, _upper(prefix)):
                subxid, image = pickle.loads(value)
                if subxid is None or subxid not in aborted:
                    newest[key[len(prefix) : -_SEQ.size - 1]] = image
            batch.delete_range(prefix, _upper(prefix))
        for row, image in newest.items():
            self._commit_row(batch, row, end_lsn, image)
            if len(batch) >= _BATCH:
                self.store.write(batch)
                batch = self.store.batch()
        self.store.write(batch)
        self._seq.pop(xid, None)
        self._memory.pop(xid, None)
        self._aborted.pop(xid, None)
        return len(newest)

    def snapshot_image(self, row: bytes, image: dict, lsn: int) -> None:
        """A row read by the initial snapshot, as of `lsn` (before every streamed commit)."""
        batch = self.store.batch()
        self._put_versions(batch, row, [(lsn, image)])
        self.store.write(batch)

    # ---- lookup ---------------------------------------------------------------------------------

    def lookup(self, xid: str | None, row: bytes) -> dict | None:
        """The row as the transaction sees it: its own newest live image, else the committed one."""
        if xid is not None and self._seq.get(xid):
            aborted = self._aborted.get(xid, set())
            if self._seq[xid] > MEMORY_ROWS:
                newest: Any = _NONE
                for _, value in self.store.scan(*self._row_range(xid, row)):
                    subxid, image = pickle.loads(value)
                    if subxid is None or subxid not in aborted:
                        newest = image
                if newest is not _NONE:
                    return newest
            for subxid, image in reversed(self._memory.get(xid, {}).get(row, [])):
                if subxid is None or subxid not in aborted:
                    return image
        versions = self._versions(row)
        return versions[-1][1] if versions else None

    # ---- pieces ---------------------------------------------------------------------------------

    @staticmethod
    def _pending_prefix(xid: str, row: bytes) -> bytes:
        return PENDING + xid.encode() + b"\x00" + row + b"\x00"

    def _row_range(self, xid: str, row: bytes) -> tuple[bytes, bytes]:
        prefix = self._pending_prefix(xid, row)
        return prefix, _upper(prefix)

    def _versions(self, row: bytes) -> list[tuple[int, dict | None]]:
        raw = self.store.get(COMMITTED + row)
        return pickle.loads(raw) if raw is not None else []

    def _put_versions(self, batch: Any, row: bytes, versions: list) -> None:
        if versions:
            batch.put(COMMITTED + row, pickle.dumps(versions))
        else:
            batch.delete(COMMITTED + row)

    def _commit_row(self, batch: Any, row: bytes, end_lsn: int, image: dict | None) -> None:
        versions = [v for v in self._versions(row) if v[0] < end_lsn] + [(end_lsn, image)]
        # Keep the newest version the slot has confirmed, and every newer one (a restart may drop them).
        confirmed = [v for v in versions if v[0] <= self.acked_lsn]
        versions = confirmed[-1:] + [v for v in versions if v[0] > self.acked_lsn]
        self._put_versions(batch, row, versions)
        batch.put(JOURNAL + _LSN.pack(end_lsn) + row, b"")


_NONE = object()
