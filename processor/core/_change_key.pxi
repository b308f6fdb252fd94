# Included by _avro_fast.pyx: the Kafka key of a ChangeEvent, compiled.
#
# events.change_key is the reference: f"{table or ''}|" + json.dumps(key or {}, sort_keys=True,
# separators=(",", ":"), bytes as hex). The values of a RawEvent key map are null, boolean, long,
# double, string or bytes; anything else (a dict a caller built by hand) goes to the reference.
# tests/unit/test_codec_properties.py checks both agree on random keys.

from cpython.dict cimport PyDict_Items
from cpython.list cimport PyList_Sort
from libc.math cimport isinf, isnan

cdef object CHANGE_KEY_FALLBACK = None   # events.change_key
cdef const char* HEX = "0123456789abcdef"


cdef inline void w_u4(Writer* w, unsigned int cp) noexcept:
    # "\\uXXXX", lowercase hex as json writes it; room was reserved by the caller
    w.buf[w.len] = 92
    w.buf[w.len + 1] = 117
    w.buf[w.len + 2] = HEX[(cp >> 12) & 15]
    w.buf[w.len + 3] = HEX[(cp >> 8) & 15]
    w.buf[w.len + 4] = HEX[(cp >> 4) & 15]
    w.buf[w.len + 5] = HEX[cp & 15]
    w.len += 6


cdef int w_json_str(Writer* w, object s) except -1:
    """A JSON string as json.dumps(ensure_ascii=True) writes it; 1 when s is not an exact str."""
    cdef Py_ssize_t n
    cdef const char* p
    if not PyUnicode_CheckExact(s):
        return 1
    p = PyUnicode_AsUTF8AndSize(s, &n)
    if p == NULL:  # lone surrogates
        PyErr_Clear()
        return 1
    return w_json_utf8(w, <const unsigned char*>p, n)


cdef int w_json_utf8(Writer* w, const unsigned char* p, Py_ssize_t n) except -1:
    """w_json_str of a string given as well-formed UTF-8 (a str's, or one validated as strictly)."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c
    cdef unsigned int cp
    w_reserve(w, 6 * n + 2)  # at most 12 output bytes per 4-byte sequence, 6 per other byte
    w.buf[w.len] = 34
    w.len += 1
    while i < n:
        c = p[i]
        if c >= 0x20 and c < 0x7F and c != 34 and c != 92:
            w.buf[w.len] = c
            w.len += 1
            i += 1
            continue
        if c < 0x80:
            i += 1
            if c == 34 or c == 92:
                w.buf[w.len] = 92
                w.buf[w.len + 1] = c
                w.len += 2
            elif c == 10 or c == 13 or c == 9 or c == 8 or c == 12:
                w.buf[w.len] = 92
                w.buf[w.len + 1] = (110 if c == 10 else 114 if c == 13 else 116 if c == 9 else 98 if c == 8 else 102)
                w.len += 2
            else:
                w_u4(w, c)
            continue
        # a str's UTF-8 is well formed: decode one code point
        if c < 0xE0:
            cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F)
            i += 2
        elif c < 0xF0:
            cp = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F)
            i += 3
        else:
            cp = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F)
            i += 4
        if cp >= 0x10000:
            cp -= 0x10000
            w_u4(w, 0xD800 | (cp >> 10))
            w_u4(w, 0xDC00 | (cp & 0x3FF))
        else:
            w_u4(w, cp)
    w.buf[w.len] = 34
    w.len += 1
    return 0


cdef int w_json_hex(Writer* w, const unsigned char* p, Py_ssize_t n) except -1:
    """Bytes as a JSON string of lowercase hex, as events.change_key's json default hook writes them."""
    cdef Py_ssize_t k
    w_reserve(w, 2 * n + 2)
    w.buf[w.len] = 34
    w.len += 1
    for k in range(n):
        w.buf[w.len] = HEX[p[k] >> 4]
        w.buf[w.len + 1] = HEX[p[k] & 15]
        w.len += 2
    w.buf[w.len] = 34
    w.len += 1
    return 0


cdef int w_decimal(Writer* w, int64_t i) except -1:
    """An int64 as json writes an int."""
    cdef char digits[24]
    cdef Py_ssize_t nd = 0
    cdef uint64_t u = <uint64_t>i if i >= 0 else 0 - <uint64_t>i
    while True:
        digits[23 - nd] = <char>(48 + u % 10)
        nd += 1
        u //= 10
        if u == 0:
            break
    if i < 0:
        digits[23 - nd] = 45
        nd += 1
    return w_raw(w, digits + 24 - nd, nd)


cdef int w_json_value(Writer* w, object v) except -1:
    cdef int64_t i
    cdef double d
    cdef Py_ssize_t n, k
    cdef const char* p
    if v is None:
        return w_raw(w, "null", 4)
    if v is True:
        return w_raw(w, "true", 4)
    if v is False:
        return w_raw(w, "false", 5)
    if PyLong_CheckExact(v):
        if not exact_int64(v, &i):
            return 1
        return w_decimal(w, i)
    if PyFloat_CheckExact(v):
        d = PyFloat_AS_DOUBLE(v)
        if isnan(d):
            return w_raw(w, "NaN", 3)
        if isinf(d):
            return w_raw(w, "Infinity", 8) if d > 0 else w_raw(w, "-Infinity", 9)
        r = float.__repr__(v)  # what json writes
        p = PyUnicode_AsUTF8AndSize(r, &n)
        return w_raw(w, p, n)
    if PyUnicode_CheckExact(v):
        return w_json_str(w, v)
    if PyBytes_CheckExact(v):
        return w_json_hex(w, <const unsigned char*>PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v))
    return 1


cdef object change_key_c(object table, object key):
    """events.change_key(table, key), written in C for the value types a RawEvent key holds."""
    cdef Writer w
    cdef list items
    cdef Py_ssize_t i, n
    cdef const char* p
    cdef tuple kv
    if (table is not None and not PyUnicode_CheckExact(table)) or (key is not None and not PyDict_CheckExact(key)):
        return CHANGE_KEY_FALLBACK(table, key)
    items = PyDict_Items(key) if key else []
    for kv in items:
        if not PyUnicode_CheckExact(kv[0]):
            return CHANGE_KEY_FALLBACK(table, key)
    PyList_Sort(items)  # keys are distinct strs: values are never compared
    w_init(&w)
    try:
        if table:
            p = PyUnicode_AsUTF8AndSize(table, &n)
            if p == NULL:
                PyErr_Clear()
                return CHANGE_KEY_FALLBACK(table, key)
            w_raw(&w, p, n)
        w_raw(&w, "|{", 2)
        n = len(items)
        for i in range(n):
            kv = <tuple>items[i]
            if i:
                w_raw(&w, ",", 1)
            if w_json_str(&w, kv[0]):
                return CHANGE_KEY_FALLBACK(table, key)
            w_raw(&w, ":", 1)
            if w_json_value(&w, kv[1]):
                return CHANGE_KEY_FALLBACK(table, key)
        w_raw(&w, "}", 1)
        return w_result(&w)
    finally:
        w_free(&w)


# The key map read straight from a buffered RawEvent's bytes (ChangeStream._next_in_place): no
# dict, str or int objects per change. Up to KEY_FIELDS_MAX entries, written in the reference's
# order (sort_keys: code point order, which is UTF-8 byte order); a duplicate name, a double
# (json's float repr) or more entries return 1, and the caller decodes the map and takes
# change_key_c instead.
DEF KEY_FIELDS_MAX = 16

cdef struct KeyField:
    const unsigned char* name
    Py_ssize_t name_n
    int kind                        # the value's branch: 0 null, 1 boolean, 2 long, 4 string, 5 bytes
    int64_t number                  # boolean or long
    const unsigned char* data       # string or bytes
    Py_ssize_t data_n


cdef inline int _name_cmp(KeyField* a, KeyField* b) noexcept:
    cdef Py_ssize_t n = a.name_n if a.name_n < b.name_n else b.name_n
    cdef int c = memcmp(a.name, b.name, n) if n else 0
    if c:
        return c
    return (a.name_n > b.name_n) - (a.name_n < b.name_n)


cdef int change_key_raw(Reader* r, const char* table, Py_ssize_t table_n, Writer* w) except -1:
    """events.change_key(table, key) with the key read at r (the RawEvent's `key` union). 0 when
    written to w, 1 when the caller must decode the key and use change_key_c."""
    cdef KeyField fields[KEY_FIELDS_MAX]
    cdef KeyField tmp
    cdef Py_ssize_t n = 0, i, j
    cdef int64_t count, c
    cdef int kind
    if read_index(r, 2, "union"):
        count = read_block_count(r)
        while count != 0:
            c = 0
            while c < count:
                if n == KEY_FIELDS_MAX:
                    return 1
                fields[n].name_n = read_size(r)
                fields[n].name = r.buf + r.pos
                r.pos += fields[n].name_n
                kind = <int>read_index(r, 6, "union")
                fields[n].kind = kind
                if kind == 1:
                    if r.pos >= r.end:
                        _eof(r, "boolean")
                    fields[n].number = r.buf[r.pos] != 0
                    r.pos += 1
                elif kind == 2:
                    fields[n].number = read_long(r)
                elif kind == 3:
                    return 1  # a double: json's repr of the float, left to change_key_c
                elif kind >= 4:
                    fields[n].data_n = read_size(r)
                    fields[n].data = r.buf + r.pos
                    r.pos += fields[n].data_n
                n += 1
                c += 1
            count = read_block_count(r)
    for i in range(1, n):  # insertion sort: keys have a few fields
        tmp = fields[i]
        j = i - 1
        while j >= 0 and _name_cmp(&fields[j], &tmp) > 0:
            fields[j + 1] = fields[j]
            j -= 1
        fields[j + 1] = tmp
    for i in range(1, n):
        if _name_cmp(&fields[i - 1], &fields[i]) == 0:
            return 1  # a duplicate name: the dict keeps the last one, the reference path decides
    if table_n:
        w_raw(w, table, table_n)
    w_raw(w, "|{", 2)
    for i in range(n):
        if i:
            w_raw(w, ",", 1)
        w_json_utf8(w, fields[i].name, fields[i].name_n)
        w_raw(w, ":", 1)
        kind = fields[i].kind
        if kind == 0:
            w_raw(w, "null", 4)
        elif kind == 1:
            if fields[i].number:
                w_raw(w, "true", 4)
            else:
                w_raw(w, "false", 5)
        elif kind == 2:
            w_decimal(w, fields[i].number)
        elif kind == 4:
            w_json_utf8(w, fields[i].data, fields[i].data_n)
        else:
            w_json_hex(w, fields[i].data, fields[i].data_n)
    w_raw(w, "}", 1)
    return 0


def change_key_of_avro_key(table, bytes data):
    """change_key_raw over data, the bytes of a RawEvent's `key` union: the Kafka key, or None
    where it leaves the key to change_key_c (tests compare it with events.change_key)."""
    cdef Reader r
    cdef Writer w
    cdef const char* t = NULL
    cdef Py_ssize_t tn = 0
    if table:
        t = PyUnicode_AsUTF8AndSize(table, &tn)
    r.buf = <const unsigned char*>PyBytes_AS_STRING(data)
    r.pos = 0
    r.end = PyBytes_GET_SIZE(data)
    w_init(&w)
    try:
        if change_key_raw(&r, t, tn, &w) == 0:
            return w_result(&w)
        return None
    finally:
        w_free(&w)


def change_key(table, key):
    """The Kafka key of a ChangeEvent (events.change_key's bytes)."""
    if CHANGE_KEY_FALLBACK is None:
        raise RuntimeError("enable_change_writer was not called")
    return change_key_c(table, key)


def enable_change_key(fallback):
    """Arm change_key with events.change_key, the reference it hands unusual keys to."""
    global CHANGE_KEY_FALLBACK
    CHANGE_KEY_FALLBACK = fallback
