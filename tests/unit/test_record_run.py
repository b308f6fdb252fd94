"""The native fetch's RecordRun: one partition's records copied into one block, a sequence of
RawRecord for the Python path and a buffer of fixed-size records for the engine's compiled lane."""

from __future__ import annotations

import struct

import pytest

try:
    from processor.kafka._rdkafka_fetch import RecordRun  # type: ignore[import-not-found]
except ImportError:
    RecordRun = None

pytestmark = pytest.mark.skipif(RecordRun is None, reason="the native fetch is not built")

RECORDS = [(5, b"xid-1", b"\x00value"), (6, None, b""), (7, b"", None), (9, b"k" * 40_000, b"v" * 70_000)]


def test_a_run_is_a_sequence_of_raw_records_with_their_bytes():
    run = RecordRun.of(3, RECORDS)
    assert len(run) == 4 and run.partition == 3
    assert [(r.partition(), r.offset(), r.key(), r.value(), r.error()) for r in run] == [
        (3, o, k, v, None) for o, k, v in RECORDS
    ]
    assert run[-1].offset() == 9 and run[1].key() is None and run[2].value() is None and run[2].key() == b""
    with pytest.raises(IndexError):
        run[4]
    with pytest.raises(IndexError):
        run[-5]
    assert len(RecordRun.of(0, [])) == 0


def test_its_buffer_is_the_layout_the_lane_reads():
    """format qPnPn: offset, key pointer and length, value pointer and length; -1 for null."""
    view = memoryview(RecordRun.of(1, RECORDS))
    assert (view.format, view.itemsize, view.shape, view.readonly) == ("qPnPn", struct.calcsize("qPnPn"), (4,), True)
    fields = [struct.unpack_from("qPnPn", view, i * view.itemsize) for i in range(4)]
    assert [(f[0], f[2], f[4]) for f in fields] == [(5, 5, 6), (6, -1, 0), (7, 0, -1), (9, 40_000, 70_000)]
    assert fields[1][1] == 0 and fields[2][3] == 0  # a null key or value has no pointer either


def test_only_bytes_go_in():
    with pytest.raises(TypeError):
        RecordRun.of(0, [(1, "xid", b"v")])
    with pytest.raises(TypeError):
        RecordRun.of(0, [(1, b"xid", bytearray(b"v"))])
