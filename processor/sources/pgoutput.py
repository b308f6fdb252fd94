"""A decoder for PostgreSQL's pgoutput logical replication protocol (versions 1 and 2).

Pure: bytes in, dataclasses out. The layouts are those of the "Logical Replication Message Formats"
page of the PostgreSQL documentation. In protocol 2, messages inside a streamed block (between
Stream Start and Stream Stop) carry the XID of the (sub)transaction that made the change; `decode`
is told whether it is inside such a block because the bytes do not say.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PG_EPOCH_MS = 946_684_800_000  # 2000-01-01 in Unix milliseconds


class PgOutputError(ValueError):
    """Bytes that are not a pgoutput message."""


@dataclass
class Column:
    name: str
    type_oid: int
    typmod: int
    key: bool


@dataclass
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault) n(othing) f(ull) i(ndex)
    columns: list[Column]
    xid: int | None = None

    @property
    def table(self) -> str:
        return f"{self.namespace}.{self.name}"

    def shape(self) -> tuple:
        return (
            self.namespace,
            self.name,
            self.replica_identity,
            tuple((c.name, c.type_oid, c.typmod, c.key) for c in self.columns),
        )


# A tuple column: ("n", None) null, ("u", None) unchanged TOAST value, ("t", bytes) text, ("b", bytes) binary.
TupleData = list[tuple[str, bytes | None]]


@dataclass
class Begin:
    final_lsn: int
    commit_ts_us: int
    xid: int


@dataclass
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass
class Origin:
    commit_lsn: int
    name: str


@dataclass
class TypeMsg:
    type_oid: int
    namespace: str
    name: str
    xid: int | None = None


@dataclass
class Insert:
    relid: int
    new: TupleData
    xid: int | None = None


@dataclass
class Update:
    relid: int
    new: TupleData
    old: TupleData | None = None
    old_kind: str | None = None  # "K" key columns only, "O" the whole old row (REPLICA IDENTITY FULL)
    xid: int | None = None


@dataclass
class Delete:
    relid: int
    old: TupleData
    old_kind: str
    xid: int | None = None


@dataclass
class Truncate:
    relids: list[int]
    options: int
    xid: int | None = None


@dataclass
class Message:
    flags: int
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = None

    @property
    def transactional(self) -> bool:
        return bool(self.flags & 1)


@dataclass
class StreamStart:
    xid: int
    first_segment: bool


@dataclass
class StreamStop:
    pass


@dataclass
class StreamCommit:
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass
class StreamAbort:
    xid: int
    subxid: int
    abort_lsn: int | None = None  # protocol 4 only
    abort_ts_us: int | None = None


@dataclass
class _Reader:
    data: bytes
    pos: int = 0
    _fmt: dict = field(default_factory=dict)

    def _unpack(self, fmt: str, size: int):
        if self.pos + size > len(self.data):
            raise PgOutputError(f"message truncated at byte {self.pos} (need {size} more)")
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def int8(self) -> int:
        return self._unpack("!b", 1)

    def int16(self) -> int:
        return self._unpack("!h", 2)

    def int32(self) -> int:
        return self._unpack("!i", 4)

    def uint32(self) -> int:
        return self._unpack("!I", 4)

    def int64(self) -> int:
        return self._unpack("!q", 8)

    def uint64(self) -> int:
        return self._unpack("!Q", 8)

    def byte(self) -> str:
        if self.pos >= len(self.data):
            raise PgOutputError("message truncated")
        self.pos += 1
        return chr(self.data[self.pos - 1])

    def bytes(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise PgOutputError(f"message truncated: {n} bytes at {self.pos}")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def string(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise PgOutputError("unterminated string")
        text = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return text

    def tuple(self) -> TupleData:
        n = self.int16()
        cols: TupleData = []
        for _ in range(n):
            kind = self.byte()
            if kind in ("n", "u"):
                cols.append((kind, None))
            elif kind in ("t", "b"):
                cols.append((kind, self.bytes(self.int32())))
            else:
                raise PgOutputError(f"unknown tuple column kind {kind!r}")
        return cols

    def done(self) -> None:
        if self.pos != len(self.data):
            raise PgOutputError(f"{len(self.data) - self.pos} trailing bytes")


def decode(data: bytes, in_stream: bool = False, proto_version: int = 2):
    """One pgoutput message -> its dataclass. `in_stream`: inside Stream Start/Stop (a leading XID)."""
    if not data:
        raise PgOutputError("empty message")
    r = _Reader(bytes(data))
    tag = r.byte()
    xid = r.uint32() if in_stream and tag in "RYIUDTM" else None
    if tag == "B":
        msg = Begin(r.uint64(), r.int64(), r.uint32())
    elif tag == "C":
        msg = Commit(r.int8(), r.uint64(), r.uint64(), r.int64())
    elif tag == "O":
        msg = Origin(r.uint64(), r.string())
    elif tag == "R":
        relid, ns, name, ident = r.uint32(), r.string(), r.string(), chr(r.int8() & 0xFF)
        cols = []
        for _ in range(r.int16()):
            flags = r.int8()
            cols.append(Column(r.string(), r.uint32(), r.int32(), bool(flags & 1)))
        msg = Relation(relid, ns, name, ident, cols, xid)
    elif tag == "Y":
        msg = TypeMsg(r.uint32(), r.string(), r.string(), xid)
    elif tag == "I":
        relid = r.uint32()
        if r.byte() != "N":
            raise PgOutputError("INSERT without a new tuple")
        msg = Insert(relid, r.tuple(), xid)
    elif tag == "U":
        relid = r.uint32()
        kind = r.byte()
        old = old_kind = None
        if kind in ("K", "O"):
            old, old_kind = r.tuple(), kind
            kind = r.byte()
        if kind != "N":
            raise PgOutputError("UPDATE without a new tuple")
        msg = Update(relid, r.tuple(), old, old_kind, xid)
    elif tag == "D":
        relid = r.uint32()
        kind = r.byte()
        if kind not in ("K", "O"):
            raise PgOutputError("DELETE without an old tuple")
        msg = Delete(relid, r.tuple(), kind, xid)
    elif tag == "T":
        n, options = r.int32(), r.int8()
        msg = Truncate([r.uint32() for _ in range(n)], options, xid)
    elif tag == "M":
        flags, lsn, prefix = r.int8(), r.uint64(), r.string()
        msg = Message(flags, lsn, prefix, r.bytes(r.int32()), xid)
    elif tag == "S":
        msg = StreamStart(r.uint32(), r.int8() == 1)
    elif tag == "E":
        msg = StreamStop()
    elif tag == "c":
        msg = StreamCommit(r.uint32(), r.int8(), r.uint64(), r.uint64(), r.int64())
    elif tag == "A":
        msg = StreamAbort(r.uint32(), r.uint32())
        if proto_version >= 4 and r.pos < len(r.data):
            msg.abort_lsn, msg.abort_ts_us = r.uint64(), r.int64()
    else:
        raise PgOutputError(f"unknown message type {tag!r}")
    r.done()
    return msg


def ts_ms(pg_us: int) -> int:
    """PostgreSQL timestamps count microseconds since 2000-01-01."""
    return PG_EPOCH_MS + pg_us // 1000


def lsn_str(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
