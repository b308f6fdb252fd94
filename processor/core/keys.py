"""Key layout of the state store. Big-endian fixed-width integers, so RocksDB order is numeric order.

Everything a transaction buffers lives under one prefix, ``TXN | partition | xid``, so a single
``delete_range`` drops a whole transaction, its events and its secondary indexes alike:

    TXN  p(4) xidlen(2) xid  EVENT     seq(8)                  -> raw RawEvent bytes
    TXN  p(4) xidlen(2) xid  ROW       rowlen(2) row seq(8)     -> b""  (undo / fragment lookup)
    TXN  p(4) xidlen(2) xid  FRAGMENT  target_seq(8) seq(8)     -> b""  (fragments of a change)
    TXN  p(4) xidlen(2) xid  SUBXID    sublen(2) subxid seq(8)  -> b""  (subtransaction abort)

Per-partition metadata lives under other prefixes, so it survives transaction range deletes:

    META p(4) xidlen(2) xid   -> transaction metadata (open or committed-not-yet-acknowledged)
    FIFO p(4) offset(8) xid   -> outcome (the completed index, in completion order, for pruning)
    DONE p(4) xidlen(2) xid   -> (format 4 and older only; wiped with the rest when a partition is rebuilt)
    POS  p(4)                 -> partition position (applied offset, watermark, format version)
    AHEAD p(4)                -> b"": data of records past the position was written (engine.flush_data)
"""

from __future__ import annotations

import struct

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
_FIFO_PQ = struct.Struct(">cIQ")  # FIFO, partition, offset
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


def fifo_key(partition: int, offset: int, xid: str) -> bytes:
    return _FIFO_PQ.pack(FIFO, partition, offset) + xid.encode()  # one per finished transaction


def fifo_key_bound(partition: int, offset: int) -> bytes:
    """The smallest FIFO key of the partition at `offset`: every key below it is at a lower offset."""
    return FIFO + _PQ.pack(partition, offset)


def fifo_decode(key: bytes) -> tuple[int, str]:
    offset = _Q.unpack_from(key, 5)[0]
    return offset, key[13:].decode()


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
