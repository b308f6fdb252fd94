# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled Avro codec for the project's own schemas; processor.core.codec is its only user.

A schema is compiled once into a tree of Nodes (_schema_tree.pxi) that the C functions of
_read.pxi and _write.pxi walk. The included files form one extension, so they share its C types.
fastavro stays the reference:
  * decode follows fastavro's reader to the byte, including its leniencies (negative enum and
    union indexes count from the end, any non-zero boolean byte is true, varints longer than ten
    bytes wrap their shift at 64 like fastavro's C code), so a record decodes here exactly when
    fastavro decodes it, to the same value;
  * encode handles exact built-in types only (None, bool, int, float, str, bytes, dict, list)
    and hands any other record to fastavro whole, so its output (or its error) is fastavro's.
The property tests in tests/unit/test_codec_properties.py check both claims.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_FromLongLong
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy

import sys

cdef extern from "Python.h":
    # Declared without an exception clause: a NULL return is checked and cleared by hand.
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*)
    long long PyLong_AsLongLongAndOverflow(object, int*)
    void PyErr_Clear()
    bint PyUnicode_CheckExact(object)
    bint PyLong_CheckExact(object)
    bint PyFloat_CheckExact(object)
    bint PyBytes_CheckExact(object)
    bint PyDict_CheckExact(object)
    bint PyList_CheckExact(object)
    bint PyBool_Check(object)
    Py_ssize_t PyList_GET_SIZE(object)
    PyObject* PyList_GET_ITEM(object, Py_ssize_t)
    Py_ssize_t PyDict_Size(object)
    int PyUnicode_Compare(object, object) except? -1


include "_schema_tree.pxi"
include "_read.pxi"
include "_write.pxi"

# ------------------------------------------------------------------------------------ codecs

cdef class Codec:
    """One compiled schema: decode(bytes) -> dict and encode(dict) -> bytes, equal to fastavro's."""

    cdef readonly str name
    cdef Node root
    cdef object fallback_encode   # record -> bytes, fastavro's schemaless_writer
    cdef object decode_error      # the exception class decode raises

    def __init__(self, str name, schema, fallback_encode, decode_error):
        if sys.byteorder != "little":
            raise NotImplementedError("big-endian host")
        self.name = name
        self.root = _compile(schema, {}, "", set())
        self.fallback_encode = fallback_encode
        self.decode_error = decode_error

    def signature(self):
        return _signature(self.root)

    def decode(self, data):
        """The record, as fastavro.schemaless_reader returns it; DecodeError when it would raise,
        on empty input and on trailing bytes."""
        cdef Reader r
        if self.root is None:
            raise RuntimeError("Codec.__init__ was not called")
        if not data:
            raise self.decode_error("empty record")
        if type(data) is not bytes:
            data = bytes(data)
        r.buf = <const unsigned char*>PyBytes_AS_STRING(data)
        r.pos = 0
        r.end = PyBytes_GET_SIZE(data)
        try:
            record = decode_node(self.root, &r)
        except Exception as exc:
            raise self.decode_error(f"undecodable Avro: {type(exc).__name__}: {exc}") from exc
        if r.pos != r.end:
            raise self.decode_error(f"trailing bytes: decoded {r.pos} of {r.end}")
        return record

    def encode(self, record):
        """The bytes fastavro.schemaless_writer writes for this record (or its exception)."""
        cdef Writer w
        cdef int rc
        if self.root is None:
            raise RuntimeError("Codec.__init__ was not called")
        w_init(&w)
        try:
            rc = encode_node(self.root, record, &w)
            if rc == 0:
                return w_result(&w)
        finally:
            w_free(&w)
        return self.fallback_encode(record)


# The project's own schemas, and the hot path built on them.
include "_raw_view.pxi"
include "_change_writer.pxi"
include "_change_key.pxi"
include "_transaction_writer.pxi"
include "_emit.pxi"
include "_lane.pxi"
include "_slotted.pxi"
