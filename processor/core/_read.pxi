# Included by _avro_fast.pyx (one extension, shared C types): reading: varints, strings (UTF-8 checked as fastavro does), decode_node and skip_node.

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


cdef inline int small_varint(Reader* r) noexcept:
    """The value (0-63) of a one-byte, non-negative varint at r.pos, not consumed; -1 otherwise.
    The readers below take their common case inline with it, and their general path reads the same
    byte again."""
    cdef unsigned char b
    if r.pos < r.end:
        b = r.buf[r.pos]
        if b < 0x80 and (b & 1) == 0:
            return b >> 1
    return -1


cdef inline Py_ssize_t read_size(Reader* r) except -1:
    cdef int k = small_varint(r)  # a short length that fits (a name, a short value)
    if 0 <= k < r.end - r.pos:
        r.pos += 1
        return k
    return _read_size(r)


cdef Py_ssize_t _read_size(Reader* r) except -1:
    cdef int64_t n = read_long(r)
    if n < 0 or n > r.end - r.pos:
        raise Malformed(f"length {n} at byte {r.pos} exceeds the {r.end - r.pos} bytes left")
    return <Py_ssize_t>n


cdef inline Py_ssize_t read_index(Reader* r, Py_ssize_t n, str what) except -1:
    cdef int k = small_varint(r)  # an index in range (a union branch, an enum symbol of the first 64)
    if 0 <= k < n:
        r.pos += 1
        return k
    return _read_index(r, n, what)


cdef Py_ssize_t _read_index(Reader* r, Py_ssize_t n, str what) except -1:
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
    cdef int64_t c = small_varint(r)  # a count of 0 to 63
    if c >= 0:
        r.pos += 1
        return c
    c = read_long(r)
    if c < 0:
        c = <int64_t>(0 - <uint64_t>c)
        read_long(r)
    return c


cdef inline str read_str(Reader* r):
    cdef Py_ssize_t n = read_size(r)
    cdef str s = PyUnicode_DecodeUTF8(<const char*>r.buf + r.pos, n, "strict")
    r.pos += n
    return s


cdef inline bint utf8_valid(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 as Python's strict decoder sees it (no surrogates, nothing past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef unsigned char seen = 0
    if n <= 32:  # most strings (names, short values): one pass, inline, that finds them ASCII
        while i < n:
            seen |= s[i]
            i += 1
        if seen < 0x80:
            return True
    return _utf8_valid(s, n)


cdef bint _utf8_valid(const unsigned char* s, Py_ssize_t n) noexcept nogil:
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


cdef inline int skip_scalar(int k, Reader* r) except -1:
    """Validate one value of a scalar kind (null, boolean, int, long, float, double, bytes, string)."""
    cdef Py_ssize_t i
    if k == K_STRING:
        return skip_str(r)
    if k == K_LONG or k == K_INT:
        read_long(r)
        return 0
    if k == K_NULL:
        return 0
    if k == K_BYTES:
        i = read_size(r)
        r.pos += i
        return 0
    i = 1 if k == K_BOOLEAN else (8 if k == K_DOUBLE else 4)
    if r.end - r.pos < i:
        _eof(r, _KIND_NAMES[k])
    r.pos += i
    return 0


cdef int skip_node(Node node, Reader* r) except -1:
    """Validate one value as decode_node would, without building it."""
    cdef int k = node.kind
    cdef Py_ssize_t i
    cdef int64_t count
    cdef Node child
    if k <= K_STRING:
        return skip_scalar(k, r)
    if k == K_UNION:
        i = read_index(r, node.n, "union")
        if node.scalar_union:
            return skip_scalar(node.scalar_kinds[i], r)
        return skip_node(<Node>node.children[i], r)
    if k == K_ENUM:
        read_index(r, node.n, "enum")
        return 0
    if k == K_MAP or k == K_ARRAY:
        child = node.child
        count = read_block_count(r)
        while count != 0:
            i = 0
            while i < count:
                if k == K_MAP:
                    skip_str(r)
                if child.scalar_union:  # the row images' values: no call per value
                    skip_scalar(child.scalar_kinds[read_index(r, child.n, "union")], r)
                else:
                    skip_node(child, r)
                i += 1
            count = read_block_count(r)
        return 0
    if k == K_RECORD:
        for i in range(node.n):
            skip_node(<Node>node.children[i], r)
        return 0
    raise AssertionError(k)
