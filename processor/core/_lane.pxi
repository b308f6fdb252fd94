# Included by _avro_fast.pyx: the engine's fast lane for the common record, in C.
#
# PartitionEngine.apply_records hands it the poll batch of one partition. It applies records for
# as long as each is a plain change of an open transaction (INSERT, UPDATE, DELETE or READ that
# validates, no undo flag, an open transaction whose identity is known and that is not filtered,
# no table filter configured): the raw bytes go to the batch (or the transaction's staged writes)
# under the event key, plus the row_id and subxid index entries, exactly as PartitionEngine._change
# writes them. It stops at the first
# record it does not handle and returns its index; the engine applies that one on the Python path.

from cpython.bytes cimport PyBytes_AS_STRING as _BUF

cdef frozenset LANE_OPS = frozenset()


def enable_lane(row_ops):
    """Arm the lane with the RawEvent ops it applies (events.ROW_OPS)."""
    global LANE_OPS
    LANE_OPS = frozenset(row_ops)


cdef inline void _be64(char* p, uint64_t v) noexcept:
    cdef int k
    for k in range(8):
        p[k] = <char>((v >> (56 - 8 * k)) & 0xFF)


cdef object _index_key(bytes prefix, char kind, object name, int64_t seq):
    """prefix | kind | len(name) (2 bytes) | name | seq (8 bytes); None when name is too long."""
    cdef Py_ssize_t n, m = PyBytes_GET_SIZE(prefix)
    cdef const char* p = PyUnicode_AsUTF8AndSize(name, &n)
    cdef char* out
    if p == NULL:
        PyErr_Clear()
        return None
    if n > 0xFFFF:
        return None
    key = PyBytes_FromStringAndSize(NULL, m + 3 + n + 8)
    out = _BUF(key)
    memcpy(out, _BUF(prefix), m)
    out[m] = kind
    out[m + 1] = <char>(n >> 8)
    out[m + 2] = <char>(n & 0xFF)
    memcpy(out + m + 3, p, n)
    _be64(out + m + 3 + n, <uint64_t>seq)
    return key


def buffer_changes(engine, list records, Py_ssize_t i, dict open_txns, put):
    """Apply records[i:] while each is a plain change of an open transaction; return the index of
    the first record left to the Python path (len(records) when none is)."""
    cdef Py_ssize_t n = len(records), m
    cdef int64_t next_offset = engine.next_offset
    cdef int64_t last_ts = engine.last_ts_ms
    cdef int64_t offset, seq, ts
    cdef Py_ssize_t applied = 0
    cdef object v
    cdef RawView view
    cdef list vals
    cdef bytes prefix, value
    cdef char* out
    if RAW_ROOT is None or not LANE_OPS:
        return i
    try:
        while i < n:
            rec = records[i]
            offset = rec.offset()
            if offset < next_offset:
                i += 1
                continue  # applied already (re-delivered after a seek)
            value = rec.value()
            if value is None:
                break
            v = make_view(value)
            if type(v) is not RawView:
                break
            view = <RawView>v
            vals = view._vals
            if vals[I_OP] not in LANE_OPS or vals[I_UNDO] or not vals[I_XID] or not vals[I_TABLE]:
                break
            seq = vals[I_SEQ]
            if seq < 0 or not view._lazy(I_KEY):
                break
            txn = open_txns.get(vals[I_XID])
            if txn is None or txn.filtered:
                break
            key = rec.key()
            if key is not None and key != (<str>vals[I_XID]).encode():
                break  # apply() dead-letters it (validation.misplaced)
            if not txn.identity_seen and (vals[I_USER] is not None or vals[I_CLIENT] is not None):
                break
            row_id = vals[I_ROW_ID]
            subxid = vals[I_SUBXID]
            prefix = txn.prefix
            row_key = sub_key = None
            if row_id:
                row_key = _index_key(prefix, 1, row_id, seq)
                if row_key is None:
                    break
            if subxid is not None:
                sub_key = _index_key(prefix, 3, subxid, seq)
                if sub_key is None:
                    break
            # keys.event_key(prefix, seq)
            m = PyBytes_GET_SIZE(prefix)
            event_key = PyBytes_FromStringAndSize(NULL, m + 9)
            out = _BUF(event_key)
            memcpy(out, _BUF(prefix), m)
            out[m] = 0
            _be64(out + m + 1, <uint64_t>seq)
            ts = vals[I_TS_MS]
            if ts > last_ts:
                last_ts = ts
            staged = txn.staged
            if staged is None:
                put(event_key, value)
                if row_key is not None:
                    put(row_key, b"")
                if sub_key is not None:
                    put(sub_key, b"")
            else:  # begun in this batch: staged until the checkpoint (PartitionEngine._spill)
                (<dict>staged)[event_key] = value
                if row_key is not None:
                    (<dict>staged)[row_key] = b""
                if sub_key is not None:
                    (<dict>staged)[sub_key] = b""
            txn.events += 1
            txn.bytes += PyBytes_GET_SIZE(value)
            next_offset = offset + 1
            applied += 1
            i += 1
    finally:
        if applied:
            engine.next_offset = next_offset
            engine.last_ts_ms = last_ts
            engine._pos_dirty = True
            stats = engine.stats
            stats.events += applied
            stats.changes += applied
    return i


cdef inline int _bytes_cmp(bytes a, bytes b) noexcept:
    """memcmp order, as Python compares bytes."""
    cdef Py_ssize_t na = PyBytes_GET_SIZE(a), nb = PyBytes_GET_SIZE(b)
    cdef int c = memcmp(_BUF(a), _BUF(b), na if na < nb else nb)
    if c != 0:
        return c
    return (na > nb) - (na < nb)


def staged_range(dict staged, bytes begin, bytes end):
    """The (key, value) pairs of a transaction's staged writes with begin <= key < end, in key order
    (PartitionEngine.buffered). Sources mostly send seqs in order, so a sort is rarely needed."""
    cdef list out = []
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef bint ordered = True
    cdef bytes key, last = None
    while PyDict_Next(staged, &pos, &k, &v):
        key = <bytes><object>k
        if _bytes_cmp(key, begin) < 0 or _bytes_cmp(key, end) >= 0:
            continue
        if last is not None and _bytes_cmp(key, last) < 0:
            ordered = False
        out.append((key, <object>v))
        last = key
    if not ordered:
        out.sort()
    return out


def partition_runs(list records):
    """({partition: its records in order}, [records carrying an error]) of one poll batch."""
    cdef dict runs = {}
    cdef list errors = []
    for rec in records:
        if rec.error() is not None:
            errors.append(rec)
            continue
        q = rec.partition()
        run = runs.get(q)
        if run is None:
            runs[q] = [rec]
        else:
            (<list>run).append(rec)
    return runs, errors
