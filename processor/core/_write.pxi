# Included by _avro_fast.pyx (one extension, shared C types): writing: the growable Writer buffer and encode_node.

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
