# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The lists of LogMiner's SQL_REDO, read into tokens: the compiled scanner.

The same functions, the same grammar and the same tokens as processor/sources/redo_scan.py
(its docstring is the contract), read in one pass over the characters instead of Python's regular
expression engine, which takes about a microsecond a value. Each branch below follows one part of
redo_scan's patterns: their quantifiers are possessive and their alternatives start on different
characters, so a scan that never looks back reads the same language.
tests/unit/test_redo_scan_properties.py holds the two scanners to identical results.
"""

from cpython.unicode cimport PyUnicode_DATA, PyUnicode_KIND, PyUnicode_READ

NUMBER, CALL, MARKER = 1, 2, 3

cdef object _NUMBER = NUMBER
cdef object _CALL = CALL
cdef object _MARKER = MARKER


cdef struct Text:
    int kind
    void* data
    Py_ssize_t n


cdef inline unsigned int at(const Text* t, Py_ssize_t i) noexcept:
    """The character at i; 0 past the end (callers that need the end test i against n)."""
    return PyUnicode_READ(t.kind, t.data, i) if i < t.n else 0


cdef inline bint is_ws(unsigned int c) noexcept:
    return c == 32 or c == 9 or c == 13 or c == 10


cdef inline bint is_digit(unsigned int c) noexcept:
    return 48 <= c <= 57


cdef inline bint is_alpha(unsigned int c) noexcept:
    return 65 <= c <= 90 or 97 <= c <= 122


cdef inline bint is_word(unsigned int c) noexcept:
    """An identifier character for sqlglot: what WORD_END rules out (any non-ASCII too)."""
    return is_alpha(c) or is_digit(c) or c == 95 or c == 36 or c == 35 or c == 64 or c > 127


cdef inline Py_ssize_t skip_ws(const Text* t, Py_ssize_t i) noexcept:
    while i < t.n and is_ws(PyUnicode_READ(t.kind, t.data, i)):
        i += 1
    return i


cdef bint word_at(const Text* t, Py_ssize_t i, const char* upper, Py_ssize_t size) noexcept:
    """The ASCII word `upper` at i, in any case."""
    cdef Py_ssize_t k
    cdef unsigned int c
    if i + size > t.n:
        return False
    for k in range(size):
        c = PyUnicode_READ(t.kind, t.data, i + k)
        if 97 <= c <= 122:
            c -= 32
        if c != <unsigned char>upper[k]:
            return False
    return True


cdef inline bint keyword_at(const Text* t, Py_ssize_t i, const char* upper, Py_ssize_t size) noexcept:
    """`upper` at i, ending where a bare word ends (WORD_END)."""
    return word_at(t, i, upper, size) and not is_word(at(t, i + size))


cdef inline bint call_follows(const Text* t, Py_ssize_t i) noexcept:
    """`(` after optional whitespace: a keyword there is a function name."""
    i = skip_ws(t, i)
    return i < t.n and PyUnicode_READ(t.kind, t.data, i) == 40


cdef Py_ssize_t quoted_end(const Text* t, Py_ssize_t i, bint* doubled) noexcept:
    """The end of the quoted identifier or string starting at i (its quote doubled inside); -1 if unclosed."""
    cdef unsigned int q = PyUnicode_READ(t.kind, t.data, i)
    i += 1
    while True:
        while i < t.n and PyUnicode_READ(t.kind, t.data, i) != q:
            i += 1
        if i >= t.n:
            return -1
        if i + 1 < t.n and PyUnicode_READ(t.kind, t.data, i + 1) == q:
            doubled[0] = True
            i += 2
            continue
        return i + 1


cdef inline str unquoted(str text, Py_ssize_t start, Py_ssize_t end, bint doubled, str pair, str single):
    cdef str inner = text[start + 1:end - 1]
    return inner.replace(pair, single) if doubled else inner


cdef Py_ssize_t number_end(const Text* t, Py_ssize_t i) noexcept:
    """The end of the number at i (digits, fraction, exponent, then no identifier character or dot); -1 if none."""
    cdef Py_ssize_t k
    cdef unsigned int c
    if is_digit(at(t, i)):
        while is_digit(at(t, i)):
            i += 1
        if at(t, i) == 46:
            i += 1
            while is_digit(at(t, i)):
                i += 1
    elif at(t, i) == 46 and i < t.n and is_digit(at(t, i + 1)):
        i += 1
        while is_digit(at(t, i)):
            i += 1
    else:
        return -1
    c = at(t, i)
    if c == 101 or c == 69:  # e E
        k = i + 1
        c = at(t, k)
        if c == 43 or c == 45:  # + -
            k += 1
        if is_digit(at(t, k)):
            while is_digit(at(t, k)):
                k += 1
            i = k
    if i < t.n:
        c = PyUnicode_READ(t.kind, t.data, i)
        if is_word(c) or c == 46:
            return -1
    return i


cdef Py_ssize_t value_end(const Text* t, str text, Py_ssize_t i, list out) except -2:
    """Appends the item of the value at i to out; its end, or -1 (nothing appended) where no value starts."""
    cdef unsigned int c
    cdef Py_ssize_t j, k, e, first_at, second_at = -1, first_end = 0, second_end = 0
    cdef bint doubled = False, doubled2 = False
    cdef int nargs = 0
    if i >= t.n:
        return -1
    c = PyUnicode_READ(t.kind, t.data, i)
    if c == 39:  # 'string'
        e = quoted_end(t, i, &doubled)
        if e < 0:
            return -1
        out.append(unquoted(text, i, e, doubled, "''", "'"))
        return e
    if c == 45 or c == 46 or is_digit(c):  # [-] number
        j = skip_ws(t, i + 1) if c == 45 else i
        e = number_end(t, j)
        if e < 0:
            return -1
        out.append((_NUMBER, "-" if c == 45 else "", text[j:e]))
        return e
    if not is_alpha(c):
        return -1
    if keyword_at(t, i, b"NULL", 4) and not call_follows(t, i + 4):
        out.append(None)
        return i + 4
    if keyword_at(t, i, b"TRUE", 4) and not call_follows(t, i + 4):
        out.append(True)
        return i + 4
    if keyword_at(t, i, b"FALSE", 5) and not call_follows(t, i + 5):
        out.append(False)
        return i + 5
    # NAME ( ['first' [, 'second']] )
    j = i + 1
    while True:
        c = at(t, j)
        if not (is_alpha(c) or is_digit(c) or c == 95):
            break
        j += 1
    k = skip_ws(t, j)
    if at(t, k) != 40:  # (
        return -1
    k = skip_ws(t, k + 1)
    first_at = k
    if at(t, k) == 39:
        first_end = quoted_end(t, k, &doubled)
        if first_end < 0:
            return -1
        nargs = 1
        k = skip_ws(t, first_end)
        if at(t, k) == 44:  # , 'second'; without it the comma stays and fails below
            e = skip_ws(t, k + 1)
            if at(t, e) == 39:
                second_end = quoted_end(t, e, &doubled2)
                if second_end >= 0:
                    nargs = 2
                    second_at = e
                    k = skip_ws(t, second_end)
    if at(t, k) != 41:  # )
        return -1
    out.append(
        (
            _CALL,
            (
                text[i:j],
                nargs,
                unquoted(text, second_at, second_end, doubled2, "''", "'") if nargs == 2 else None,
            ),
            unquoted(text, first_at, first_end, doubled, "''", "'") if nargs else "",
        )
    )
    return k + 1


cdef Py_ssize_t marker_end(const Text* t, Py_ssize_t i) noexcept:
    """The end of `Unsupported Type` at i (a bare word, not a call); -1 if it is not there."""
    cdef Py_ssize_t j
    if not word_at(t, i, b"UNSUPPORTED", 11) or not is_ws(at(t, i + 11)):
        return -1
    j = skip_ws(t, i + 11)
    if not keyword_at(t, j, b"TYPE", 4) or call_follows(t, j + 4):
        return -1
    return j + 4


cdef inline void open_text(Text* t, str text):
    t.kind = PyUnicode_KIND(text)
    t.data = PyUnicode_DATA(text)
    t.n = len(text)


cdef Py_ssize_t name_end(const Text* t, str text, Py_ssize_t i, list out) except -2:
    """Append the quoted identifier at i to out and return its end; -1 when none is there."""
    cdef bint doubled = False
    cdef Py_ssize_t e
    if at(t, i) != 34:  # "
        return -1
    e = quoted_end(t, i, &doubled)
    if e >= 0:
        out.append(unquoted(text, i, e, doubled, '""', '"'))
    return e


def columns(str text not None):
    """[name, ...] of a column list that is the whole text; None if it is not one."""
    cdef Text t
    cdef Py_ssize_t i = 0, e
    cdef list names = []
    open_text(&t, text)
    while True:
        e = name_end(&t, text, skip_ws(&t, i), names)
        if e < 0:
            return None
        i = skip_ws(&t, e)
        if i >= t.n:
            return names
        if at(&t, i) != 44:  # ,
            return None
        i += 1


def values(str text not None, Py_ssize_t pos):
    """The items of a VALUES list from pos (just after its `(`) to the closing `)` at the end; None if not one."""
    cdef Text t
    cdef Py_ssize_t i, e
    cdef list items = []
    open_text(&t, text)
    i = min(max(pos, 0), t.n)
    while True:
        i = skip_ws(&t, i)
        e = value_end(&t, text, i, items)
        if e < 0:
            e = marker_end(&t, i)
            if e < 0:
                return None
            items.append((_MARKER, text[i:e]))
        i = skip_ws(&t, e)
        if i >= t.n:
            return None
        if at(&t, i) == 44:  # ,
            i += 1
        elif at(&t, i) == 41 and skip_ws(&t, i + 1) == t.n:  # ) at the end
            return items
        else:
            return None


def conditions(str text not None, Py_ssize_t pos):
    """([name, ...], [item, ...]) of the WHERE conditions from pos to the end (name None for ROWID); None if not so."""
    cdef Text t
    cdef Py_ssize_t i, e
    cdef bint doubled
    cdef object name
    cdef list names = [], items = []
    open_text(&t, text)
    i = min(max(pos, 0), t.n)
    while True:
        i = skip_ws(&t, i)
        if at(&t, i) == 34:  # "column"
            doubled = False
            e = quoted_end(&t, i, &doubled)
            if e < 0:
                return None
            name = unquoted(text, i, e, doubled, '""', '"')
        elif keyword_at(&t, i, b"ROWID", 5):
            name = None
            e = i + 5
        else:
            return None
        i = skip_ws(&t, e)
        if at(&t, i) == 61:  # = value
            e = value_end(&t, text, skip_ws(&t, i + 1), items)
            if e < 0:
                return None
        elif word_at(&t, i, b"IS", 2) and is_ws(at(&t, i + 2)):
            i = skip_ws(&t, i + 2)
            if not keyword_at(&t, i, b"NULL", 4):
                return None
            items.append(None)
            e = i + 4
        else:
            return None
        names.append(name)
        i = skip_ws(&t, e)
        if i >= t.n:
            return names, items
        if not keyword_at(&t, i, b"AND", 3):
            return None
        i += 3


def sets(str text not None):
    """([name, ...], [item, ...]) of a SET list that is the whole text; None if it is not one."""
    cdef Text t
    cdef Py_ssize_t i = 0, e
    cdef list names = [], items = []
    open_text(&t, text)
    while True:
        e = name_end(&t, text, skip_ws(&t, i), names)
        if e < 0:
            return None
        i = skip_ws(&t, e)
        if at(&t, i) != 61:
            return None
        e = value_end(&t, text, skip_ws(&t, i + 1), items)
        if e < 0:
            return None
        i = skip_ws(&t, e)
        if i >= t.n:
            return names, items
        if at(&t, i) != 44:
            return None
        i += 1
