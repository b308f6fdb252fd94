"""A record's leading Avro string without decoding the record: the bench reads one field of
millions of records (a RawEvent's xid before its op, a ChangeEvent's event_id), where a full
decode (~2 µs) is what it cannot afford."""

from __future__ import annotations


def first_string(value: bytes) -> tuple[int, int]:
    """Where the record's first field, a string, lies in value: [start, end). Avro writes its
    length first, as a zigzag varint."""
    length = shift = i = 0
    while True:
        byte = value[i]
        i += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    return i, i + (length >> 1)
