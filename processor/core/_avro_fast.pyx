# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled Avro codec for the project's own schemas; processor.core.codec is its only user.

A schema is compiled once into a tree of Nodes that the C functions below walk. fastavro stays
the reference:
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
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

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


# ------------------------------------------------------------------------------------ schema tree

cdef enum Kind:
    K_NULL
    K_BOOLEAN
    K_INT
    K_LONG
    K_FLOAT
    K_DOUBLE
    K_BYTES
    K_STRING
    K_ENUM
    K_UNION
    K_MAP
    K_ARRAY
    K_RECORD

_KIND_NAMES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string",
               "enum", "union", "map", "array", "record")
_PRIMITIVES = {"null": K_NULL, "boolean": K_BOOLEAN, "int": K_INT, "long": K_LONG, "float": K_FLOAT,
               "double": K_DOUBLE, "bytes": K_BYTES, "string": K_STRING}

cdef enum:
    MAX_FIELDS = 64
    MAX_LAZY = 8
    SMALL = 512

cdef int64_t INT32_MIN = -2147483648
cdef int64_t INT32_MAX = 2147483647


cdef class Node:
    cdef int kind
    cdef tuple children        # union branches, record field types, (values,) or (items,)
    cdef Node child            # map values, array items
    cdef tuple names           # record field names
    cdef tuple symbols         # enum symbols
    cdef dict symbol_index     # enum symbol -> index
    cdef Py_ssize_t n          # len(children) or len(symbols)
    # Union branch chosen by fastavro for a datum of each exact type, -1 when unsure (fall back).
    cdef int pick_none, pick_bool, pick_int32, pick_int64, pick_float, pick_str, pick_bytes
    cdef int pick_dict, pick_list


class Malformed(ValueError):
    """Bytes that fastavro would not decode either."""


def _compile(schema, dict names, str namespace, set compiling):
    cdef Node node
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            node = Node.__new__(Node)
            node.kind = _PRIMITIVES[schema]
            return node
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        for name in (full, schema):
            if name in compiling:
                raise NotImplementedError(f"recursive type {name}")
            if name in names:
                return names[name]
        raise ValueError(f"unknown type {schema!r}")
    if isinstance(schema, list):
        node = Node.__new__(Node)
        node.kind = K_UNION
        node.children = tuple(_compile(s, names, namespace, compiling) for s in schema)
        node.n = len(node.children)
        _plan_union(node)
        return node
    if not isinstance(schema, dict):
        raise ValueError(f"not a schema: {schema!r}")
    if "logicalType" in schema:
        raise NotImplementedError("logical types")
    t = schema["type"]
    if isinstance(t, str) and t in _PRIMITIVES:
        return _compile(t, names, namespace, compiling)
    if t in ("record", "error", "enum"):
        name = schema["name"]
        ns = schema.get("namespace", namespace) if "." not in name else name.rpartition(".")[0]
        full = name if "." in name or not ns else f"{ns}.{name}"
        node = Node.__new__(Node)
        if t == "enum":
            node.kind = K_ENUM
            node.symbols = tuple(schema["symbols"])
            node.symbol_index = {s: i for i, s in enumerate(node.symbols)}
            node.n = len(node.symbols)
        else:
            node.kind = K_RECORD
            compiling.add(full)
            fields = schema["fields"]
            node.names = tuple(f["name"] for f in fields)
            node.children = tuple(_compile(f["type"], names, ns, compiling) for f in fields)
            node.n = len(fields)
            compiling.discard(full)
        names[full] = node
        names[name.rpartition(".")[2]] = node
        return node
    if t == "map":
        node = Node.__new__(Node)
        node.kind = K_MAP
        node.child = _compile(schema["values"], names, namespace, compiling)
        node.children = (node.child,)
        return node
    if t == "array":
        node = Node.__new__(Node)
        node.kind = K_ARRAY
        node.child = _compile(schema["items"], names, namespace, compiling)
        node.children = (node.child,)
        return node
    if t == "fixed":
        raise NotImplementedError("fixed")
    return _compile(t, names, namespace, compiling)


# What fastavro's union writer does with a datum of an exact type, per branch kind: 1 = the
# branch validates, 0 = it does not, -1 = it may (left to fastavro). The writer takes the first
# validating branch; records and floats make it look further, so those are left to it too.
cdef int _verdict(str datum_type, Node branch, int dict_branches, int list_branches):
    cdef int k = branch.kind
    if datum_type == "none":
        return 1 if k == K_NULL else 0
    if datum_type == "bool":
        if k == K_BOOLEAN:
            return 1
        return -1 if k in (K_INT, K_LONG, K_FLOAT, K_DOUBLE) else 0
    if datum_type in ("int32", "int64"):
        if k == K_LONG or (k == K_INT and datum_type == "int32"):
            return 1
        return -1 if k in (K_INT, K_FLOAT, K_DOUBLE) else 0
    if datum_type == "float":
        if k == K_DOUBLE:
            return 1
        return -1 if k == K_FLOAT else 0
    if datum_type == "str":
        if k == K_STRING:
            return 1
        return -1 if k == K_ENUM else 0
    if datum_type == "bytes":
        return 1 if k == K_BYTES else 0
    if datum_type == "dict":
        if k in (K_MAP, K_RECORD):
            return 1 if dict_branches == 1 else -1
        return 0
    if datum_type == "list":
        if k == K_ARRAY:
            return 1 if list_branches == 1 else -1
        return 0
    return -1


cdef int _pick(str datum_type, Node union):
    cdef Node b
    cdef int i, v
    cdef int dict_branches = 0, list_branches = 0
    for b in union.children:
        dict_branches += b.kind == K_MAP or b.kind == K_RECORD
        list_branches += b.kind == K_ARRAY
    for i in range(union.n):
        v = _verdict(datum_type, union.children[i], dict_branches, list_branches)
        if v == 1:
            return i
        if v == -1:
            return -1
    return -1


cdef _plan_union(Node u):
    u.pick_none = _pick("none", u)
    u.pick_bool = _pick("bool", u)
    u.pick_int32 = _pick("int32", u)
    u.pick_int64 = _pick("int64", u)
    u.pick_float = _pick("float", u)
    u.pick_str = _pick("str", u)
    u.pick_bytes = _pick("bytes", u)
    u.pick_dict = _pick("dict", u)
    u.pick_list = _pick("list", u)


def _signature(Node node):
    """The structure of a compiled schema as nested tuples (names, kinds, symbols)."""
    k = node.kind
    if k == K_ENUM:
        return ("enum", node.symbols)
    if k == K_UNION:
        return ("union", tuple(_signature(b) for b in node.children))
    if k == K_MAP or k == K_ARRAY:
        return (_KIND_NAMES[k], _signature(node.child))
    if k == K_RECORD:
        return ("record", tuple((n, _signature(c)) for n, c in zip(node.names, node.children)))
    return _KIND_NAMES[k]


# ------------------------------------------------------------------------------------ reading

cdef struct Reader:
    const unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t end


cdef int _eof(Reader* r, str what) except -1:
    raise Malformed(f"{what}: unexpected end of data at byte {r.pos}")


cdef inline int64_t read_long(Reader* r) except? -1:
    # As fastavro: the shift is taken modulo 64 (x86-64 and AArch64 shift semantics), bits past
    # 64 are lost, and a varint may be any length.
    cdef uint64_t b, n
    cdef int shift
    if r.pos >= r.end:
        _eof(r, "long")
    b = r.buf[r.pos]
    r.pos += 1
    if b < 0x80:
        return <int64_t>((b >> 1) ^ (0 - (b & 1)))
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if r.pos >= r.end:
            _eof(r, "long")
        b = r.buf[r.pos]
        r.pos += 1
        n |= (b & 0x7F) << (shift & 63)
        shift += 7
    return <int64_t>((n >> 1) ^ (0 - (n & 1)))


cdef inline Py_ssize_t read_size(Reader* r) except -1:
    cdef int64_t n = read_long(r)
    if n < 0 or n > r.end - r.pos:
        raise Malformed(f"length {n} at byte {r.pos} exceeds the {r.end - r.pos} bytes left")
    return <Py_ssize_t>n


cdef inline Py_ssize_t read_index(Reader* r, Py_ssize_t n, str what) except -1:
    # fastavro indexes a Python list, so -n..-1 count from the end.
    cdef int64_t i = read_long(r)
    if i < 0:
        i += n
    if i < 0 or i >= n:
        raise Malformed(f"{what} index out of range at byte {r.pos}")
    return <Py_ssize_t>i


cdef inline int64_t read_block_count(Reader* r) except? -1:
    # A negative count is followed by the block's byte size, which fastavro reads and ignores;
    # the count of -2**63 negates to itself and reads no items.
    cdef int64_t c = read_long(r)
    if c < 0:
        c = <int64_t>(0 - <uint64_t>c)
        read_long(r)
    return c


cdef inline str read_str(Reader* r):
    cdef Py_ssize_t n = read_size(r)
    cdef str s = PyUnicode_DecodeUTF8(<const char*>r.buf + r.pos, n, "strict")
    r.pos += n
    return s


cdef bint utf8_valid(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 as Python's strict decoder sees it (no surrogates, nothing past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint64_t w
    cdef unsigned char c, c1
    while i < n:
        while i + 8 <= n:
            memcpy(&w, s + i, 8)
            if w & 0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        c = s[i]
        if c < 0x80:
            i += 1
        elif c < 0xC2:
            return False
        elif c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if c == 0xE0:
                if c1 < 0xA0 or c1 > 0xBF:
                    return False
            elif c == 0xED:
                if c1 < 0x80 or c1 > 0x9F:
                    return False
            elif (c1 & 0xC0) != 0x80:
                return False
            if (s[i + 2] & 0xC0) != 0x80:
                return False
            i += 3
        elif c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if c == 0xF0:
                if c1 < 0x90 or c1 > 0xBF:
                    return False
            elif c == 0xF4:
                if c1 < 0x80 or c1 > 0x8F:
                    return False
            elif (c1 & 0xC0) != 0x80:
                return False
            if (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            i += 4
        else:
            return False
    return True


def utf8_valid_py(bytes data):
    """utf8_valid for the tests."""
    return utf8_valid(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef inline int skip_str(Reader* r) except -1:
    cdef Py_ssize_t n = read_size(r)
    if not utf8_valid(r.buf + r.pos, n):
        raise Malformed(f"invalid UTF-8 in the string at byte {r.pos}")
    r.pos += n
    return 0


cdef object decode_node(Node node, Reader* r):
    cdef int k = node.kind
    cdef Py_ssize_t n, i
    cdef int64_t count
    cdef double d
    cdef float f
    cdef dict out
    cdef list items
    if k == K_STRING:
        return read_str(r)
    if k == K_LONG or k == K_INT:
        return PyLong_FromLongLong(read_long(r))
    if k == K_UNION:
        return decode_node(<Node>node.children[read_index(r, node.n, "union")], r)
    if k == K_NULL:
        return None
    if k == K_BOOLEAN:
        if r.pos >= r.end:
            _eof(r, "boolean")
        r.pos += 1
        return r.buf[r.pos - 1] != 0
    if k == K_DOUBLE:
        if r.end - r.pos < 8:
            _eof(r, "double")
        memcpy(&d, r.buf + r.pos, 8)
        r.pos += 8
        return PyFloat_FromDouble(d)
    if k == K_FLOAT:
        if r.end - r.pos < 4:
            _eof(r, "float")
        memcpy(&f, r.buf + r.pos, 4)
        r.pos += 4
        return PyFloat_FromDouble(f)
    if k == K_BYTES:
        n = read_size(r)
        r.pos += n
        return PyBytes_FromStringAndSize(<const char*>r.buf + r.pos - n, n)
    if k == K_ENUM:
        return node.symbols[read_index(r, node.n, "enum")]
    if k == K_MAP:
        out = {}
        count = read_block_count(r)
        while count != 0:
            i = 0
            while i < count:
                key = read_str(r)
                PyDict_SetItem(out, key, decode_node(node.child, r))
                i += 1
            count = read_block_count(r)
        return out
    if k == K_ARRAY:
        items = []
        count = read_block_count(r)
        while count != 0:
            i = 0
            while i < count:
                PyList_Append(items, decode_node(node.child, r))
                i += 1
            count = read_block_count(r)
        return items
    if k == K_RECORD:
        out = {}
        for i in range(node.n):
            PyDict_SetItem(out, node.names[i], decode_node(<Node>node.children[i], r))
        return out
    raise AssertionError(k)


cdef int skip_node(Node node, Reader* r) except -1:
    """Validate one value as decode_node would, without building it."""
    cdef int k = node.kind
    cdef Py_ssize_t i
    cdef int64_t count
    if k == K_STRING:
        return skip_str(r)
    if k == K_LONG or k == K_INT:
        read_long(r)
        return 0
    if k == K_UNION:
        return skip_node(<Node>node.children[read_index(r, node.n, "union")], r)
    if k == K_NULL:
        return 0
    if k == K_BOOLEAN or k == K_DOUBLE or k == K_FLOAT:
        i = 1 if k == K_BOOLEAN else (8 if k == K_DOUBLE else 4)
        if r.end - r.pos < i:
            _eof(r, _KIND_NAMES[k])
        r.pos += i
        return 0
    if k == K_BYTES:
        i = read_size(r)
        r.pos += i
        return 0
    if k == K_ENUM:
        read_index(r, node.n, "enum")
        return 0
    if k == K_MAP or k == K_ARRAY:
        count = read_block_count(r)
        while count != 0:
            i = 0
            while i < count:
                if k == K_MAP:
                    skip_str(r)
                skip_node(node.child, r)
                i += 1
            count = read_block_count(r)
        return 0
    if k == K_RECORD:
        for i in range(node.n):
            skip_node(<Node>node.children[i], r)
        return 0
    raise AssertionError(k)


# ------------------------------------------------------------------------------------ writing

cdef struct Writer:
    unsigned char* buf
    Py_ssize_t len
    Py_ssize_t cap
    unsigned char small[SMALL]


cdef inline void w_init(Writer* w) noexcept:
    w.buf = w.small
    w.len = 0
    w.cap = SMALL


cdef inline void w_free(Writer* w) noexcept:
    if w.buf != w.small:
        free(w.buf)
    w.buf = w.small


cdef int w_grow(Writer* w, Py_ssize_t need) except -1:
    cdef Py_ssize_t cap = w.cap * 2
    cdef unsigned char* nb
    while cap < w.len + need:
        cap *= 2
    if w.buf == w.small:
        nb = <unsigned char*>malloc(cap)
        if nb != NULL:
            memcpy(nb, w.small, w.len)
    else:
        nb = <unsigned char*>realloc(w.buf, cap)
    if nb == NULL:
        raise MemoryError()
    w.buf = nb
    w.cap = cap
    return 0


cdef inline int w_reserve(Writer* w, Py_ssize_t need) except -1:
    if w.len + need > w.cap:
        w_grow(w, need)
    return 0


cdef inline int w_long(Writer* w, int64_t v) except -1:
    cdef uint64_t n = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    if w.len + 10 > w.cap:
        w_grow(w, 10)
    while n > 0x7F:
        w.buf[w.len] = <unsigned char>((n & 0x7F) | 0x80)
        w.len += 1
        n >>= 7
    w.buf[w.len] = <unsigned char>n
    w.len += 1
    return 0


cdef inline int w_raw(Writer* w, const char* p, Py_ssize_t n) except -1:
    if w.len + n > w.cap:
        w_grow(w, n)
    memcpy(w.buf + w.len, p, n)
    w.len += n
    return 0


cdef inline int w_bytes(Writer* w, const char* p, Py_ssize_t n) except -1:
    w_long(w, n)
    return w_raw(w, p, n)


cdef inline object w_result(Writer* w):
    return PyBytes_FromStringAndSize(<const char*>w.buf, w.len)


# encode_node returns 0 when it wrote the value, 1 when the datum is not of the exact types this
# codec handles (the caller then hands the whole record to fastavro), -1 on a Python error.

cdef inline int w_str(Writer* w, object s) except -1:
    cdef Py_ssize_t n
    cdef const char* p
    if not PyUnicode_CheckExact(s):
        return 1
    p = PyUnicode_AsUTF8AndSize(s, &n)
    if p == NULL:  # lone surrogates: fastavro raises its own error
        PyErr_Clear()
        return 1
    w_bytes(w, p, n)
    return 0


cdef inline int exact_int64(object v, int64_t* out) noexcept:
    """1 when v is an exact int within int64, its value in *out."""
    cdef int overflow = 0
    if not PyLong_CheckExact(v):
        return 0
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    return overflow == 0


cdef int encode_node(Node node, object datum, Writer* w) except -1:
    cdef int k = node.kind
    cdef int64_t v
    cdef double d
    cdef Py_ssize_t pos, i, n
    cdef PyObject* key
    cdef PyObject* val
    cdef int idx
    if k == K_STRING:
        return w_str(w, datum)
    if k == K_LONG or k == K_INT:
        if not exact_int64(datum, &v):
            return 1
        if k == K_INT and (v < INT32_MIN or v > INT32_MAX):
            return 1
        w_long(w, v)
        return 0
    if k == K_UNION:
        if datum is None:
            idx = node.pick_none
        elif PyUnicode_CheckExact(datum):
            idx = node.pick_str
        elif PyLong_CheckExact(datum):
            if not exact_int64(datum, &v):
                return 1
            idx = node.pick_int32 if INT32_MIN <= v <= INT32_MAX else node.pick_int64
        elif PyBool_Check(datum):
            idx = node.pick_bool
        elif PyFloat_CheckExact(datum):
            idx = node.pick_float
        elif PyBytes_CheckExact(datum):
            idx = node.pick_bytes
        elif PyDict_CheckExact(datum):
            idx = node.pick_dict
        elif PyList_CheckExact(datum):
            idx = node.pick_list
        else:
            return 1
        if idx < 0:
            return 1
        w_long(w, idx)
        return encode_node(<Node>node.children[idx], datum, w)
    if k == K_NULL:
        return 0 if datum is None else 1
    if k == K_BOOLEAN:
        if not PyBool_Check(datum):
            return 1
        w_reserve(w, 1)
        w.buf[w.len] = 1 if datum is True else 0
        w.len += 1
        return 0
    if k == K_DOUBLE:
        if not PyFloat_CheckExact(datum):
            return 1
        d = PyFloat_AS_DOUBLE(datum)
        w_raw(w, <const char*>&d, 8)
        return 0
    if k == K_BYTES:
        if not PyBytes_CheckExact(datum):
            return 1
        w_bytes(w, PyBytes_AS_STRING(datum), PyBytes_GET_SIZE(datum))
        return 0
    if k == K_ENUM:
        if not PyUnicode_CheckExact(datum):
            return 1
        val = PyDict_GetItem(node.symbol_index, datum)
        if val == NULL:
            return 1
        w_long(w, <object>val)
        return 0
    if k == K_MAP:
        if not PyDict_CheckExact(datum):
            return 1
        n = PyDict_Size(datum)
        if n:
            w_long(w, n)
            pos = 0
            while PyDict_Next(datum, &pos, &key, &val):
                if w_str(w, <object>key) or encode_node(node.child, <object>val, w):
                    return 1
        w_long(w, 0)
        return 0
    if k == K_ARRAY:
        if not PyList_CheckExact(datum):
            return 1
        n = PyList_GET_SIZE(datum)
        if n:
            w_long(w, n)
            for i in range(n):
                if encode_node(node.child, <object>PyList_GET_ITEM(datum, i), w):
                    return 1
                if PyList_GET_SIZE(datum) != n:
                    return 1
        w_long(w, 0)
        return 0
    if k == K_RECORD:
        # A record dict must carry every field (fastavro fills defaults) and no "-type" key
        # (fastavro's union writer reads it as a type tag).
        if not PyDict_CheckExact(datum) or PyDict_GetItem(datum, "-type") != NULL:
            return 1
        for i in range(node.n):
            val = PyDict_GetItem(datum, node.names[i])
            if val == NULL:
                return 1
            if encode_node(<Node>node.children[i], <object>val, w):
                return 1
        return 0
    if k == K_FLOAT:
        return 1  # float32 rounding is left to fastavro
    raise AssertionError(k)


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


# ------------------------------------------------------------------------------------ RawView

cdef object _UNSET = object()
cdef list _NO_VALUES = [None] * MAX_FIELDS

# Field positions in the RawEvent schema, resolved by RawCodec (one RawEvent schema per process).
cdef Py_ssize_t I_XID, I_OP, I_SEQ, I_SCN, I_THREAD, I_TS_MS, I_UNDO, I_ROW_ID, I_SUBXID, I_SAVEPOINT
cdef Py_ssize_t I_USER, I_CLIENT, I_TABLE, I_LOB_COLUMN, I_LOB_OFFSET, I_LOB_LENGTH, I_LOB_DATA, I_ATTRS
cdef Py_ssize_t I_KEY, I_BEFORE, I_AFTER, I_DDL
cdef Node RAW_ROOT = None
cdef dict RAW_INDEX = {}          # field name -> position
cdef tuple RAW_NAMES = ()
cdef Py_ssize_t RAW_LAZY_SLOT[MAX_FIELDS]   # position -> slot in RawView._lazy_at, or -1
cdef unsigned char EMIT_USES[MAX_FIELDS]     # position -> 1 if ChangeStream.next reads the field
cdef object DECODE_ERROR = ValueError

_RAW_FIELDS = ("xid", "op", "seq", "scn", "thread", "ts_ms", "undo", "row_id", "subxid", "savepoint",
               "user", "client", "table", "lob_column", "lob_offset", "lob_length", "lob_data", "attrs",
               "key", "before", "after", "ddl")
# Decoded on first access only: the row images, the DDL text and LOB pieces can be large and the
# buffering path rarely needs them. They are validated when the view is made all the same.
_RAW_LAZY = ("lob_data", "key", "before", "after", "ddl")
# The prefix fields a ChangeEvent is built from (the transaction's own fields come from its Txn);
# emission skips the others (xid, user, client, ...) instead of making objects it drops.
_EMIT_FIELDS = ("op", "seq", "scn", "ts_ms", "row_id", "table", "attrs")


cdef class RawView:
    """One RawEvent, validated to its last byte: the raw bytes, where `key` starts (the splice
    point), and every field as an attribute or view["name"]. lob_data, key, before, after and
    ddl are decoded on first access."""

    cdef readonly bytes raw
    cdef readonly Py_ssize_t body_at
    cdef list _vals
    cdef Py_ssize_t _lazy_at[MAX_LAZY]

    def __cinit__(self):
        self._vals = _NO_VALUES  # a view made by RawView.__new__ reads as all None, never crashes
        self.raw = b""

    def __init__(self):
        raise TypeError("RawView is made by decode_raw_batch / decode_raw_view")

    cdef object _lazy(self, Py_ssize_t i):
        cdef object v = self._vals[i]
        cdef Reader r
        if v is _UNSET:
            r.buf = <const unsigned char*>PyBytes_AS_STRING(self.raw)
            r.pos = self._lazy_at[RAW_LAZY_SLOT[i]]
            r.end = PyBytes_GET_SIZE(self.raw)
            v = decode_node(<Node>RAW_ROOT.children[i], &r)
            self._vals[i] = v
        return v

    def __getitem__(self, str name):
        cdef object i = RAW_INDEX.get(name)
        if i is None:
            raise KeyError(name)
        return self._lazy(i)

    def get(self, str name, default=None):
        cdef object i = RAW_INDEX.get(name)
        return default if i is None else self._lazy(i)

    def __contains__(self, name):
        return name in RAW_INDEX

    def keys(self):
        return RAW_NAMES

    def to_dict(self):
        """The whole record, equal to fastavro's decode of raw."""
        return {RAW_NAMES[i]: self._lazy(i) for i in range(len(RAW_NAMES))}

    def __repr__(self):
        return f"RawView({self.to_dict()!r}, body_at={self.body_at})"

    @property
    def xid(self):
        return self._vals[I_XID]

    @property
    def op(self):
        return self._vals[I_OP]

    @property
    def seq(self):
        return self._vals[I_SEQ]

    @property
    def scn(self):
        return self._vals[I_SCN]

    @property
    def thread(self):
        return self._vals[I_THREAD]

    @property
    def ts_ms(self):
        return self._vals[I_TS_MS]

    @property
    def undo(self):
        return self._vals[I_UNDO]

    @property
    def row_id(self):
        return self._vals[I_ROW_ID]

    @property
    def subxid(self):
        return self._vals[I_SUBXID]

    @property
    def savepoint(self):
        return self._vals[I_SAVEPOINT]

    @property
    def user(self):
        return self._vals[I_USER]

    @property
    def client(self):
        return self._vals[I_CLIENT]

    @property
    def table(self):
        return self._vals[I_TABLE]

    @property
    def lob_column(self):
        return self._vals[I_LOB_COLUMN]

    @property
    def lob_offset(self):
        return self._vals[I_LOB_OFFSET]

    @property
    def lob_length(self):
        return self._vals[I_LOB_LENGTH]

    @property
    def attrs(self):
        return self._vals[I_ATTRS]

    @property
    def lob_data(self):
        return self._lazy(I_LOB_DATA)

    @property
    def key(self):
        return self._lazy(I_KEY)

    @property
    def before(self):
        return self._lazy(I_BEFORE)

    @property
    def after(self):
        return self._lazy(I_AFTER)

    @property
    def ddl(self):
        return self._lazy(I_DDL)


cdef object make_view(object data):
    """A RawView of data, or the DecodeError describing why it is not a RawEvent."""
    cdef Reader r
    cdef RawView view
    cdef Node root = RAW_ROOT
    cdef Py_ssize_t i, n = root.n, slot
    cdef list vals
    if not data:
        return DECODE_ERROR("empty record")
    if type(data) is not bytes:
        data = bytes(data)
    r.buf = <const unsigned char*>PyBytes_AS_STRING(data)
    r.pos = 0
    r.end = PyBytes_GET_SIZE(data)
    view = RawView.__new__(RawView)
    vals = [_UNSET] * n
    try:
        for i in range(n):
            slot = RAW_LAZY_SLOT[i]
            if slot < 0:
                vals[i] = decode_node(<Node>root.children[i], &r)
            else:
                view._lazy_at[slot] = r.pos
                skip_node(<Node>root.children[i], &r)
    except Exception as exc:
        err = DECODE_ERROR(f"undecodable Avro: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err
    if r.pos != r.end:
        return DECODE_ERROR(f"trailing bytes: decoded {r.pos} of {r.end}")
    view.raw = data
    view._vals = vals
    view.body_at = view._lazy_at[RAW_LAZY_SLOT[I_KEY]]
    return view


cdef class RawCodec(Codec):
    """The RawEvent codec, plus views for the buffering path."""

    def __init__(self, str name, schema, fallback_encode, decode_error):
        global RAW_ROOT, RAW_INDEX, RAW_NAMES, DECODE_ERROR
        global I_XID, I_OP, I_SEQ, I_SCN, I_THREAD, I_TS_MS, I_UNDO, I_ROW_ID, I_SUBXID, I_SAVEPOINT
        global I_USER, I_CLIENT, I_TABLE, I_LOB_COLUMN, I_LOB_OFFSET, I_LOB_LENGTH, I_LOB_DATA, I_ATTRS
        global I_KEY, I_BEFORE, I_AFTER, I_DDL
        Codec.__init__(self, name, schema, fallback_encode, decode_error)
        root = self.root
        if root.kind != K_RECORD or root.n > MAX_FIELDS:
            raise NotImplementedError("RawEvent must be a record of at most 64 fields")
        index = {name: i for i, name in enumerate(root.names)}
        missing = [f for f in _RAW_FIELDS if f not in index]
        if missing:
            raise NotImplementedError(f"RawEvent schema lacks {missing}")
        (I_XID, I_OP, I_SEQ, I_SCN, I_THREAD, I_TS_MS, I_UNDO, I_ROW_ID, I_SUBXID, I_SAVEPOINT, I_USER, I_CLIENT,
         I_TABLE, I_LOB_COLUMN, I_LOB_OFFSET, I_LOB_LENGTH, I_LOB_DATA, I_ATTRS, I_KEY, I_BEFORE, I_AFTER,
         I_DDL) = [index[f] for f in _RAW_FIELDS]
        for i in range(MAX_FIELDS):
            RAW_LAZY_SLOT[i] = -1
        for slot, f in enumerate(_RAW_LAZY):
            RAW_LAZY_SLOT[index[f]] = slot
        for i in range(MAX_FIELDS):
            EMIT_USES[i] = 0
        for f in _EMIT_FIELDS:
            EMIT_USES[index[f]] = 1
        RAW_ROOT = root
        RAW_INDEX = index
        RAW_NAMES = root.names
        DECODE_ERROR = decode_error

    def view(self, data):
        """RawView of one record; raises DecodeError."""
        if RAW_ROOT is None:
            raise RuntimeError("RawCodec.__init__ was not called")
        v = make_view(data)
        if type(v) is not RawView:
            raise v
        return v

    def view_batch(self, values):
        """One RawView or DecodeError per value, in order."""
        if RAW_ROOT is None:
            raise RuntimeError("RawCodec.__init__ was not called")
        return [make_view(v) for v in values]


# ------------------------------------------------------------------------------------ ChangeEvent

_VALUE = ("union", ("null", "boolean", "long", "double", "string", "bytes"))
_ROW = ("union", ("null", ("map", _VALUE)))
_OPT_STR = ("union", ("null", "string"))
# The op enum's symbols are the schema's own (more may be appended); the rest must match.
CHANGE_SIGNATURE = ("record", (
    ("event_id", "string"),
    ("op", ("enum", "*")),
    ("ts_ms", "long"),
    ("key", _ROW),
    ("before", _ROW),
    ("after", _ROW),
    ("ddl", _OPT_STR),
    ("source", ("record", (
        ("table", _OPT_STR), ("xid", "string"), ("seq", "long"), ("scn", "long"), ("commit_scn", "long"),
        ("commit_ts_ms", "long"), ("thread", "int"), ("user", _OPT_STR), ("row_id", _OPT_STR),
        ("attrs", ("map", "string")),
    ))),
    ("transaction", ("union", ("null", ("record", (
        ("id", "string"), ("total_order", "long"), ("data_collection_order", "long"),
    ))))),
))
RAW_BODY_SIGNATURE = (("key", _ROW), ("before", _ROW), ("after", _ROW), ("ddl", _OPT_STR))

cdef dict CHANGE_OP_INDEX = None    # RawEvent op -> ChangeOp symbol index
cdef object SPLICED_FALLBACK = None  # (head, body, tail) -> bytes through fastavro
cdef dict ENVELOPE_OP = None


def enable_change_writer(Codec raw, Codec change, dict envelope_op, spliced_fallback):
    """Check that the schemas have the layout ChangeWriter writes, and arm it."""
    global CHANGE_OP_INDEX, SPLICED_FALLBACK, ENVELOPE_OP
    fields = list(_signature(change.root)[1])
    if len(fields) < 2 or fields[1][0] != "op" or fields[1][1][0] != "enum":
        raise NotImplementedError("ChangeEvent's second field is not the op enum")
    symbols = fields[1][1][1]
    fields[1] = ("op", ("enum", "*"))
    if ("record", tuple(fields)) != CHANGE_SIGNATURE:
        raise NotImplementedError("ChangeEvent schema differs from the layout ChangeWriter writes")
    missing = sorted(set(envelope_op.values()) - set(symbols))
    if missing:
        raise NotImplementedError(f"ChangeOp lacks {missing}")
    raw_sig = _signature(raw.root)[1]
    if tuple(raw_sig[len(raw_sig) - 4:]) != RAW_BODY_SIGNATURE:
        raise NotImplementedError("RawEvent does not end with key, before, after, ddl as ChangeEvent has them")
    CHANGE_OP_INDEX = {raw_op: symbols.index(env) for raw_op, env in envelope_op.items()}
    ENVELOPE_OP = dict(envelope_op)
    SPLICED_FALLBACK = spliced_fallback


cdef class ChangeWriter:
    """ChangeEvent bytes for the changes of one committed transaction.

    The per-transaction parts (xid, commit position, thread, user) are encoded once; encode()
    writes the head, copies raw[body_at:] (the RawEvent's key/before/after/ddl, laid out as in
    ChangeEvent) and writes the source and transaction blocks.
    """

    cdef readonly str xid
    cdef readonly object commit_scn, commit_ts_ms, thread, user
    cdef bytes _xid          # encoded string
    cdef bytes _commit       # commit_scn, commit_ts_ms, thread, user
    cdef bytes _id_prefix    # UTF-8 of "<thread>:<commit_scn>:<xid>:"
    cdef bint _fast

    def __init__(self, str xid, commit_scn, commit_ts_ms, thread, user):
        cdef Writer w
        if CHANGE_OP_INDEX is None:
            raise RuntimeError("enable_change_writer was not called")
        self.xid, self.commit_scn, self.commit_ts_ms, self.thread, self.user = xid, commit_scn, commit_ts_ms, thread, user
        self._id_prefix = f"{thread}:{commit_scn}:{xid}:".encode("utf-8", "surrogatepass")
        w_init(&w)
        try:
            self._fast = (w_str(&w, xid) == 0)
            if self._fast:
                self._xid = w_result(&w)
                w.len = 0
                self._fast = (encode_node(_LONG, commit_scn, &w) == 0 and encode_node(_LONG, commit_ts_ms, &w) == 0
                              and encode_node(_INT, thread, &w) == 0 and encode_node(_OPT_STRING, user, &w) == 0
                              and PyLong_CheckExact(thread) and PyLong_CheckExact(commit_scn))
                self._commit = w_result(&w)
        finally:
            w_free(&w)

    def encode(self, str op, seq, scn, ts_ms, table, row_id, attrs, bytes raw not None, Py_ssize_t body_at,
               total_order, collection_order):
        """The ChangeEvent of one change (op is the RawEvent op); equal to fastavro's encoding."""
        return self._encode(op, seq, scn, ts_ms, table, row_id, attrs, raw, body_at, total_order, collection_order)

    cdef object _encode(self, str op, seq, scn, ts_ms, table, row_id, attrs, bytes raw, Py_ssize_t body_at,
                        total_order, collection_order):
        cdef Writer w
        cdef int64_t s
        cdef char digits[24]
        cdef Py_ssize_t nd = 0, i
        cdef uint64_t u
        cdef object op_index = CHANGE_OP_INDEX.get(op)
        if op_index is None:
            raise KeyError(op)
        if body_at < 0 or body_at > PyBytes_GET_SIZE(raw):
            raise ValueError(f"body_at {body_at} outside the {PyBytes_GET_SIZE(raw)}-byte record")
        if self._fast and exact_int64(seq, &s):
            w_init(&w)
            try:
                # event_id: "<thread>:<commit_scn>:<xid>:<seq>"
                u = <uint64_t>s if s >= 0 else 0 - <uint64_t>s
                while True:
                    digits[23 - nd] = <char>(48 + u % 10)
                    nd += 1
                    u //= 10
                    if u == 0:
                        break
                if s < 0:
                    digits[23 - nd] = 45  # "-"
                    nd += 1
                w_long(&w, PyBytes_GET_SIZE(self._id_prefix) + nd)
                w_raw(&w, PyBytes_AS_STRING(self._id_prefix), PyBytes_GET_SIZE(self._id_prefix))
                w_raw(&w, digits + 24 - nd, nd)
                w_long(&w, <int64_t>op_index)
                if encode_node(_LONG, ts_ms, &w) == 0:
                    w_raw(&w, PyBytes_AS_STRING(raw) + body_at, PyBytes_GET_SIZE(raw) - body_at)
                    if (encode_node(_OPT_STRING, table, &w) == 0
                            and w_raw(&w, PyBytes_AS_STRING(self._xid), PyBytes_GET_SIZE(self._xid)) == 0
                            and encode_node(_LONG, seq, &w) == 0 and encode_node(_LONG, scn, &w) == 0
                            and w_raw(&w, PyBytes_AS_STRING(self._commit), PyBytes_GET_SIZE(self._commit)) == 0
                            and encode_node(_OPT_STRING, row_id, &w) == 0
                            and encode_node(_STRING_MAP, attrs, &w) == 0):
                        w_long(&w, 1)  # transaction: the record branch
                        w_raw(&w, PyBytes_AS_STRING(self._xid), PyBytes_GET_SIZE(self._xid))
                        if encode_node(_LONG, total_order, &w) == 0 and encode_node(_LONG, collection_order, &w) == 0:
                            return w_result(&w)
            finally:
                w_free(&w)
        head = {"event_id": f"{self.thread}:{self.commit_scn}:{self.xid}:{seq}", "op": ENVELOPE_OP[op],
                "ts_ms": ts_ms}
        tail = {
            "source": {"table": table, "xid": self.xid, "seq": seq, "scn": scn, "commit_scn": self.commit_scn,
                       "commit_ts_ms": self.commit_ts_ms, "thread": self.thread, "user": self.user,
                       "row_id": row_id, "attrs": attrs},
            "transaction": {"id": self.xid, "total_order": total_order, "data_collection_order": collection_order},
        }
        return SPLICED_FALLBACK(head, memoryview(raw)[body_at:], tail)


cdef Node _LONG = _compile("long", {}, "", set())
cdef Node _INT = _compile("int", {}, "", set())
cdef Node _OPT_STRING = _compile(["null", "string"], {}, "", set())
cdef Node _STRING_MAP = _compile({"type": "map", "values": "string"}, {}, "", set())


include "_change_key.pxi"
include "_emit.pxi"
include "_lane.pxi"
