"""Merging LOB, XML and long-string fragments into the value of a column (docs/semantics.md)."""

from __future__ import annotations

from typing import Any

from processor.core import events as ev


def _fill(like: str | bytes, n: int) -> str | bytes:
    return b"\x00" * n if isinstance(like, bytes) else " " * n


def apply_fragment(value: Any, fragment: dict[str, Any]) -> Any:
    """The column value (str, bytes or None) after one fragment: str for a CLOB, bytes for a BLOB.

    Offsets are 0-based characters (CLOB) or bytes (BLOB)."""
    data = fragment["lob_data"]
    if value is None:
        value = b"" if isinstance(data, bytes) else ""
    if data is not None and isinstance(data, bytes) != isinstance(value, bytes):
        # A BLOB written over a CLOB value (or the reverse): keep the fragment's type.
        value = value.encode() if isinstance(data, bytes) else value.decode(errors="replace")
    op = fragment["op"]
    if op == ev.LOB_TRIM:
        return value[: max(0, fragment["lob_length"])]
    offset = fragment["lob_offset"]
    if op == ev.LOB_ERASE:
        start = max(0, min(offset, len(value)))
        end = max(start, min(offset + fragment["lob_length"], len(value)))
        return value[:start] + _fill(value, end - start) + value[end:]
    # LOB_WRITE, XML_WRITE, LONG_STRING_WRITE
    if data is None:
        data = value[:0]
    if offset is None:
        offset = len(value)
    if offset > len(value):
        value = value + _fill(value, offset - len(value))
    return value[:offset] + data + value[offset + len(data) :]
