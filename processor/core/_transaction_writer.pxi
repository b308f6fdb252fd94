# A TransactionEvent (BEGIN, END) written straight from its fields (processor/core/assemble.py,
# transaction_bytes): the emitter sends two per transaction, and building the record dict for the
# generic encoder was ~5% of the loop. The bytes equal fastavro's for the dict transaction_event()
# builds (tests/unit/test_codec_properties.py); any value of an unexpected type or range goes to
# TRANSACTION_FALLBACK, which builds that dict and encodes it the generic way.

cdef object TRANSACTION_FALLBACK = None


def enable_transaction_writer(fallback):
    """Arm transaction_bytes with the generic path it hands unusual values to."""
    global TRANSACTION_FALLBACK
    TRANSACTION_FALLBACK = fallback


cdef inline int _w_opt_long(Writer* w, object v, bint int32) except -1:
    """A ["null", long|int] union member: 0 written, 1 when v is neither None nor an in-range int."""
    cdef int64_t n
    if v is None:
        return w_long(w, 0)
    if not exact_int64(v, &n) or (int32 and (n < -2147483648 or n > 2147483647)):
        return 1
    w_long(w, 1)
    return w_long(w, n)


cdef enum:
    _FEW_TABLES = 16  # an END's data_collections sorted in place up to this many tables


cdef int _write_few_tables(Writer* w, dict tables, Py_ssize_t count) except -1:
    """The data_collections entries of an END, in name order, from a dict of up to _FEW_TABLES str
    names and int tallies, sorted in C: sorted(tables.items()) built a list of tuples and sorted
    it, ~2,300 instructions per END, a third of a transaction's BEGIN and END. 1, having written
    nothing, when a name or a tally is of another type: the caller takes the general path. 2 when a
    name cannot be written (a lone surrogate): the whole record goes to the fallback, as it would."""
    cdef PyObject* names[_FEW_TABLES]
    cdef int64_t tallies[_FEW_TABLES]
    cdef PyObject* key
    cdef PyObject* value
    cdef PyObject* held_name
    cdef int64_t held_tally
    cdef Py_ssize_t pos = 0, i = 0, j
    while PyDict_Next(tables, &pos, &key, &value):
        if not PyUnicode_CheckExact(<object>key) or not exact_int64(<object>value, &tallies[i]):
            return 1
        names[i] = key
        i += 1
    for i in range(1, count):  # insertion sort: str keys of a dict are distinct, code point order as sorted()
        held_name, held_tally = names[i], tallies[i]
        j = i - 1
        while j >= 0 and PyUnicode_Compare(<object>names[j], <object>held_name) > 0:
            names[j + 1], tallies[j + 1] = names[j], tallies[j]
            j -= 1
        names[j + 1], tallies[j + 1] = held_name, held_tally
    for i in range(count):
        if w_str(w, <object>names[i]):
            return 2
        w_long(w, tallies[i])
    return 0


cdef int _write_transaction(
    Writer* w, object status, object xid, object scn, object ts_ms, object thread, object event_count,
    object tables, object partition, object offset, object ordering,
) except -1:
    cdef int64_t n
    cdef Py_ssize_t count, i
    cdef int k
    cdef list items
    if status == "BEGIN":
        w_long(w, 0)
    elif status == "END":
        w_long(w, 1)
    else:
        return 1
    if w_str(w, xid):
        return 1
    if not exact_int64(scn, &n):
        return 1
    w_long(w, n)
    if not exact_int64(ts_ms, &n):
        return 1
    w_long(w, n)
    if not exact_int64(thread, &n) or n < -2147483648 or n > 2147483647:
        return 1
    w_long(w, n)
    if _w_opt_long(w, event_count, False):
        return 1
    if tables is None:
        w_long(w, 0)
    elif type(tables) is dict:
        w_long(w, 1)
        count = PyDict_Size(tables)
        if count:
            w_long(w, count)
            k = 1 if count > _FEW_TABLES else _write_few_tables(w, tables, count)
            if k == 2:
                return 1
            if k == 1:
                items = sorted(tables.items())
                for i in range(count):
                    name, tally = items[i]
                    if w_str(w, name) or not exact_int64(tally, &n):
                        return 1
                    w_long(w, n)
        w_long(w, 0)
    else:
        return 1
    if _w_opt_long(w, partition, True) or _w_opt_long(w, offset, False):
        return 1
    if ordering is None:
        w_long(w, 0)
    else:
        w_long(w, 1)
        if w_str(w, ordering):
            return 1
    w_long(w, 0)  # reason: null
    return 0


def transaction_bytes(
    status, xid, scn, ts_ms, thread, event_count, tables, partition, offset, ordering,
):
    """The TransactionEvent of these fields (tables: {name: changes}, or None for no
    data_collections), byte-equal to encoding assemble.transaction_event()'s record."""
    return _transaction_bytes(status, xid, scn, ts_ms, thread, event_count, tables, partition, offset, ordering)


cdef object _transaction_bytes(
    object status, object xid, object scn, object ts_ms, object thread, object event_count, object tables,
    object partition, object offset, object ordering,
):
    cdef Writer w
    w_init(&w)
    try:
        if _write_transaction(
            &w, status, xid, scn, ts_ms, thread, event_count, tables, partition, offset, ordering
        ) == 0:
            return w_result(&w)
    finally:
        w_free(&w)
    return TRANSACTION_FALLBACK(status, xid, scn, ts_ms, thread, event_count, tables, partition, offset, ordering)
