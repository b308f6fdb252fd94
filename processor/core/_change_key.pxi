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
    cdef Py_ssize_t n, i = 0
    cdef const unsigned char* p
    cdef unsigned char c
    cdef unsigned int cp
    if not PyUnicode_CheckExact(s):
        return 1
    p = <const unsigned char*>PyUnicode_AsUTF8AndSize(s, &n)
    if p == NULL:  # lone surrogates
        PyErr_Clear()
        return 1
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


cdef int w_json_value(Writer* w, object v) except -1:
    cdef int64_t i
    cdef double d
    cdef Py_ssize_t n, k
    cdef const char* p
    cdef char digits[24]
    cdef Py_ssize_t nd
    cdef uint64_t u
    if v is None:
        return w_raw(w, "null", 4)
    if v is True:
        return w_raw(w, "true", 4)
    if v is False:
        return w_raw(w, "false", 5)
    if PyLong_CheckExact(v):
        if not exact_int64(v, &i):
            return 1
        u = <uint64_t>i if i >= 0 else 0 - <uint64_t>i
        nd = 0
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
    if PyBytes_CheckExact(v):  # json's default hook of events.change_key: bytes as hex
        n = PyBytes_GET_SIZE(v)
        p = PyBytes_AS_STRING(v)
        w_reserve(w, 2 * n + 2)
        w.buf[w.len] = 34
        w.len += 1
        for k in range(n):
            w.buf[w.len] = HEX[(<unsigned char>p[k]) >> 4]
            w.buf[w.len + 1] = HEX[(<unsigned char>p[k]) & 15]
            w.len += 2
        w.buf[w.len] = 34
        w.len += 1
        return 0
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


def change_key(table, key):
    """The Kafka key of a ChangeEvent (events.change_key's bytes)."""
    if CHANGE_KEY_FALLBACK is None:
        raise RuntimeError("enable_change_writer was not called")
    return change_key_c(table, key)


def enable_change_key(fallback):
    """Arm change_key with events.change_key, the reference it hands unusual keys to."""
    global CHANGE_KEY_FALLBACK
    CHANGE_KEY_FALLBACK = fallback
