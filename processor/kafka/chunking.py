"""Chunked records (`oversized: chunk`): one value too big for its topic, written as n smaller records.

Writing: the value's bytes are cut into n pieces of at most `payload` bytes; piece i is written
with the original key (so to the same partition), in order, with two UTF-8 headers:

  txb.chunk     "i/n", i = 0..n-1
  txb.chunk_of  the change's event_id

Reassembly rule (docs/contracts.md): read a partition in offset order; chunk 0 of an id starts a
new assembly, chunk i joins it only when chunks 0..i-1 of the same id and n came right before it
(other ids may interleave); when chunk n-1 joins, the concatenated bytes are the original value
(a ChangeEvent in Avro), positioned at the offset of its last chunk. An assembly that never
completes is a write a crash interrupted (at least once: the whole change is written again later;
exactly once: the attempt was aborted) and is dropped. Records without the headers pass through.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import Message

CHUNK = "txb.chunk"
CHUNK_OF = "txb.chunk_of"

Headers = list[tuple[str, bytes]]


class ChunkError(ValueError):
    """Chunk headers that do not follow the format above."""


def split(value: bytes, payload: int) -> list[bytes]:
    """The value in pieces of at most `payload` bytes, the first ones full (at least one piece)."""
    if payload < 1:
        raise ValueError(f"chunk payload must be positive, not {payload}")
    return [value[i : i + payload] for i in range(0, len(value), payload)] or [b""]


def chunk_headers(index: int, count: int, chunk_of: str) -> Headers:
    return [(CHUNK, f"{index}/{count}".encode()), (CHUNK_OF, chunk_of.encode())]


def headers_size(count: int, chunk_of: str) -> int:
    """The largest header bytes any chunk of a `count`-piece value carries."""
    return sum(len(k) + len(v) for k, v in chunk_headers(count - 1, count, chunk_of))


def chunk_of(headers: Headers | None) -> tuple[int, int, str] | None:
    """(i, n, id) for a chunk record, None for a whole one. ChunkError for malformed headers."""
    if not headers:
        return None
    found = {k: v for k, v in headers if k in (CHUNK, CHUNK_OF)}
    if not found:
        return None
    try:
        position, ident = found[CHUNK].decode(), found[CHUNK_OF].decode()
        index, _, count = position.partition("/")
        i, n = int(index), int(count)
    except (KeyError, ValueError, AttributeError) as exc:
        raise ChunkError(f"malformed chunk headers {found!r}") from exc
    if not 0 <= i < n:
        raise ChunkError(f"chunk {i}/{n} out of range")
    return i, n, ident


@dataclass
class _Assembly:
    count: int
    pieces: list[bytes] = field(default_factory=list)


class Reassembler:
    """Applies the reassembly rule to records fed in offset order per partition."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, str], _Assembly] = {}
        self.dropped = 0  # assemblies abandoned: a later chunk 0 restarted them, or a gap

    def add(self, partition: int, headers: Headers | None, value: bytes | None) -> tuple[bool, bytes | None]:
        """(complete, value): (True, value) for a whole record or the last chunk of a complete set
        (then the reassembled value); (False, None) while a set is incomplete or was dropped."""
        info = chunk_of(headers)
        if info is None:
            return True, value
        i, n, ident = info
        slot = (partition, ident)
        current = self._open.get(slot)
        if i == 0:
            if current is not None:
                self.dropped += 1
            current = self._open[slot] = _Assembly(n)
        elif current is None or current.count != n or len(current.pieces) != i:
            if current is not None:
                self.dropped += 1
                del self._open[slot]
            return False, None
        current.pieces.append(value or b"")
        if len(current.pieces) < n:
            return False, None
        del self._open[slot]
        return True, b"".join(current.pieces)

    @property
    def incomplete(self) -> int:
        return len(self._open)


def reassembled(messages: Iterable[Message]) -> Iterator[Message]:
    """Messages as the reassembly rule gives them: whole records untouched, each complete chunk set
    as one Message (the last chunk's partition, offset and timestamp; headers without the chunk ones)."""
    assembler = Reassembler()
    for msg in messages:
        headers = msg.headers()
        if not headers or chunk_of(headers) is None:
            yield msg
            continue
        complete, value = assembler.add(msg.partition(), headers, msg.value())
        if complete:
            kept = [(k, v) for k, v in headers if k not in (CHUNK, CHUNK_OF)]
            stamp_type, stamp = msg.timestamp()
            yield Message(
                topic=msg.topic(),
                partition=msg.partition(),
                offset=msg.offset(),
                key=msg.key(),
                value=value,
                headers=kept or None,
                timestamp=(stamp_type, stamp),
            )
