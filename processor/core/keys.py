"""Key layout of the state store. Big-endian fixed-width integers, so RocksDB order is numeric order.

Everything a transaction buffers lives under one prefix, ``TXN | partition | xid``, so a single
``delete_range`` drops a whole transaction, its events and its secondary indexes alike:

    TXN  p(4) xidlen(2) xid  EVENT     seq(8)                  -> raw RawEvent bytes
    TXN  p(4) xidlen(2) xid  ROW       rowlen(2) row seq(8)     -> b""  (undo / fragment lookup)
    TXN  p(4) xidlen(2) xid  FRAGMENT  target_seq(8) seq(8)     -> b""  (fragments of a change)
    TXN  p(4) xidlen(2) xid  SUBXID    sublen(2) subxid seq(8)  -> b""  (subtransaction abort)

Per-partition metadata lives under other prefixes, so it survives transaction range deletes:

    META p(4) xidlen(2) xid   -> transaction metadata (open or committed-not-yet-acknowledged)
    FIFO p(4) batch(8)        -> the transactions finished between two checkpoints, in completion
                                 order, their offsets, xids and outcomes in columns (the completed
                                 index; batches numbered in the order written: fifo_batch_value)
    DONE p(4) xidlen(2) xid   -> (format 4 and older only; wiped with the rest when a partition is rebuilt)
    POS  p(4)                 -> partition position (applied offset, watermark, format version)
    AHEAD p(4)                -> b"": data of records past the position was written (engine.flush_data)
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

TXN = b"t"
META = b"m"
DONE = b"d"
FIFO = b"f"
POS = b"p"
AHEAD = b"a"

EVENT = b"\x00"
ROW = b"\x01"
FRAGMENT = b"\x02"
SUBXID = b"\x03"

_P = struct.Struct(">I")
_Q = struct.Struct(">Q")
_H = struct.Struct(">H")
# The per-transaction keys in one pack each: they are made for every transaction.
_PH = struct.Struct(">IH")
_PQ = struct.Struct(">IQ")
_FIFO_COUNT = struct.Struct("<I")  # a FIFO batch's entries
_BIG_ENDIAN = sys.byteorder == "big"  # a FIFO batch's columns are little-endian on any machine
SEQ_MAX = (1 << 64) - 1


def _part(partition: int) -> bytes:
    return _P.pack(partition)


def _str(value: str) -> bytes:
    raw = value.encode()
    return _H.pack(len(raw)) + raw


def seq_bytes(seq: int) -> bytes:
    return _Q.pack(seq)


def seq_of(key: bytes) -> int:
    """The trailing 8-byte integer of a key."""
    seq: int = _Q.unpack_from(key, len(key) - 8)[0]
    return seq


def txn_prefix(partition: int, xid: str) -> bytes:
    raw = xid.encode()
    return TXN + _PH.pack(partition, len(raw)) + raw


def event_key(txn: bytes, seq: int) -> bytes:
    return txn + EVENT + _Q.pack(seq)


_EVENTS_END = bytes([EVENT[0] + 1])


def events_end(txn: bytes) -> bytes:
    """The smallest key after every event key of a transaction (upper_bound(txn + EVENT))."""
    return txn + _EVENTS_END


def row_prefix(txn: bytes, row: str) -> bytes:
    return txn + ROW + _str(row)


def fragment_prefix(txn: bytes, target_seq: int) -> bytes:
    return txn + FRAGMENT + _Q.pack(target_seq)


def subxid_prefix(txn: bytes, subxid: str) -> bytes:
    return txn + SUBXID + _str(subxid)


def partition_prefix(kind: bytes, partition: int) -> bytes:
    return kind + _part(partition)


def meta_key(partition: int, xid: str) -> bytes:
    return meta_key_of(txn_prefix(partition, xid))


def meta_key_of(txn_prefix: bytes) -> bytes:
    """A transaction's metadata key: its txn_prefix (partition, length, xid) under META, not TXN."""
    return META + txn_prefix[1:]


def fifo_batch_key(partition: int, batch: int) -> bytes:
    """The key of a partition's FIFO batch; every batch written before it sorts below it."""
    return FIFO + _PQ.pack(partition, batch)


def fifo_batch_of(key: bytes) -> int:
    (batch,) = _Q.unpack_from(key, 5)
    return int(batch)


def fifo_batch_value(entries: Sequence[tuple[int, str, int, str]]) -> bytes:
    """A FIFO batch's value: its (offset, xid, _, outcome) entries (at least one), in completion
    order, in columns: count(4), offsets (8 each), xid lengths (2 each), the xids, the outcomes
    joined by newlines; integers little-endian. Built in a few C calls: packed entry by entry in
    Python (or as JSON) it cost about what a key each did."""
    offsets, xids, _, outcomes = zip(*entries)
    raw = list(map(str.encode, xids))
    offset_column, length_column = array("Q", offsets), array("H", map(len, raw))
    if _BIG_ENDIAN:
        offset_column.byteswap()
        length_column.byteswap()
    return b"".join(
        (
            _FIFO_COUNT.pack(len(raw)),
            offset_column.tobytes(),
            length_column.tobytes(),
            *raw,
            "\n".join(outcomes).encode(),
        )
    )


def fifo_batch_entries(value: bytes, batch: int) -> list[tuple[int, str, int, str]]:
    """The (offset, xid, batch, outcome) entries of FIFO batch number `batch`, in completion order."""
    (n,) = _FIFO_COUNT.unpack_from(value, 0)
    at = _FIFO_COUNT.size
    offsets, lengths = array("Q"), array("H")
    offsets.frombytes(value[at : at + 8 * n])
    at += 8 * n
    lengths.frombytes(value[at : at + 2 * n])
    at += 2 * n
    if _BIG_ENDIAN:
        offsets.byteswap()
        lengths.byteswap()
    xids = []
    for length in lengths:
        xids.append(value[at : at + length].decode())
        at += length
    outcomes = value[at:].decode().split("\n")
    return [(offset, xid, batch, outcome) for offset, xid, outcome in zip(offsets, xids, outcomes, strict=True)]


def pos_key(partition: int) -> bytes:
    return POS + _part(partition)


def ahead_key(partition: int) -> bytes:
    return AHEAD + _part(partition)


def upper_bound(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with prefix."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("prefix of only 0xff bytes has no upper bound")
    return stripped[:-1] + bytes([stripped[-1] + 1])
