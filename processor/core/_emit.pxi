# Included by _avro_fast.pyx: the emission of one committed transaction, per change in C.
#
# ChangeStream turns each buffered RawEvent (the store holds the raw bytes) into its Kafka key and
# ChangeEvent bytes, numbering total_order and data_collection_order. An event without attrs (the
# common case) has its fields read in place and written straight back (write_change_in_place);
# only the row key is decoded, for the Kafka key. Acknowledgements need nothing
# per change: outputs are acknowledged by settlement (processor/runtime/emitter.py).


from cpython.pycapsule cimport (
    PyCapsule_GetContext, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New, PyCapsule_SetContext,
)
from cpython.ref cimport Py_DECREF

# A sink's C sender (contracts.Sink.direct_change_sender may return one): a PyCapsule named
# CHANGE_SENDER whose pointer is a ChangeSender. send(ctx, value, value_n, key, key_n) queues one
# change (value NULL: a tombstone) from bytes it copies, and returns 0; any other return refuses the
# change, which then goes through the sink's send_change. The change's key and value are written in
# C buffers and handed over from there: no bytes objects, no Python call per change.
ctypedef int (*send_change_fn)(void* ctx, const char* value, Py_ssize_t value_n, const char* key,
                               Py_ssize_t key_n) noexcept
ctypedef struct ChangeSender:
    send_change_fn send
    void* ctx

cdef const char* CHANGE_SENDER = b"txbuffer.change_sender"


cdef const ChangeSender* _c_sender(object direct) except? NULL:
    """The ChangeSender of a capsule, NULL for anything else (a (call, a, b) tuple, None)."""
    if direct is not None and PyCapsule_IsValid(direct, CHANGE_SENDER):
        return <const ChangeSender*>PyCapsule_GetPointer(direct, CHANGE_SENDER)
    return NULL


# keys.EVENT: an event key is the transaction's prefix, this byte, and its seq (8 bytes, big-endian).
cdef unsigned char _EVENT_TAG = 0


cdef inline uint64_t _read_be64(const unsigned char* p) noexcept:
    return ((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40) | (<uint64_t>p[3] << 32)
            | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16) | (<uint64_t>p[6] << 8) | <uint64_t>p[7])


# The table names of emitted changes, UTF-8 -> str, for the names seen last. A transaction's changes
# come from a few tables in any order, and a cache of the last name alone decoded the name again
# (and copied its bytes) at each switch: ~8% of the per-change loop on the steady workload (4 tables).
cdef list _TABLE_UTF8 = []
cdef list _TABLE_STR = []
cdef Py_ssize_t _TABLE_NEXT = 0  # the entry a miss replaces once the cache is full
cdef Py_ssize_t _TABLE_CACHE_SIZE = 64


cdef object _table_str(const char* p, Py_ssize_t n):
    """The str of a UTF-8 table name (validated when buffered)."""
    global _TABLE_NEXT
    cdef Py_ssize_t i, m = len(_TABLE_UTF8)
    cdef object b
    for i in range(m):
        b = _TABLE_UTF8[i]
        if PyBytes_GET_SIZE(b) == n and memcmp(PyBytes_AS_STRING(b), p, n) == 0:
            return _TABLE_STR[i]
    t = PyUnicode_DecodeUTF8(p, n, NULL)
    b = PyBytes_FromStringAndSize(p, n)
    if m < _TABLE_CACHE_SIZE:
        _TABLE_UTF8.append(b)
        _TABLE_STR.append(t)
    else:
        _TABLE_UTF8[_TABLE_NEXT] = b
        _TABLE_STR[_TABLE_NEXT] = t
        _TABLE_NEXT = (_TABLE_NEXT + 1) % _TABLE_CACHE_SIZE
    return t


cdef enum:
    _TALLIES = 8  # tables counted in C per ChangeStream before their counts go to its dict


cdef enum:  # ChangeStream._write_in_place's outcomes
    IN_PLACE_WRITTEN, IN_PLACE_FRAGMENT, IN_PLACE_GENERAL


cdef class ChangeStream:
    """The ChangeEvents of one committed transaction, from its buffered raw events in seq order."""

    cdef readonly ChangeWriter writer
    cdef public Py_ssize_t produced     # total_order of the last change numbered
    cdef dict _tables                   # table ("" for none) -> changes numbered, up to _sync_tables
    # Counts not yet in _tables, per table: a change is counted here, in C, and _tables gets them when
    # read (the tables property). A count in the dict was a lookup, an int and a store per change.
    cdef PyObject* _tally_names[_TALLIES]  # owned
    cdef int64_t _tally_counts[_TALLIES]  # the table's count: what _tables had, plus those since
    cdef int _tallies
    cdef list _vals                     # the prefix fields of the event being encoded
    cdef public Py_ssize_t sent         # changes send_all handed to send
    cdef public object last_seq         # seq of the last of them (set by the caller before)
    cdef object _counted                # the table ("" for none) of the last change numbered
    # send_all's change from _next_in_place, in fields rather than a tuple per change
    cdef object _out_key, _out_value, _out_op
    cdef int64_t _out_seq

    def __init__(self, ChangeWriter writer not None, Py_ssize_t produced, dict tables not None):
        self._drop_tallies()
        self.writer, self.produced, self._tables = writer, produced, tables

    def __dealloc__(self):
        self._drop_tallies()

    @property
    def tables(self):
        """table ("" for none) -> changes numbered. The dict itself: what is done to it counts."""
        self._sync_tables()
        return self._tables

    cdef void _drop_tallies(self) noexcept:
        cdef int k
        for k in range(self._tallies):
            Py_DECREF(<object>self._tally_names[k])
        self._tallies = 0

    cdef int _sync_tables(self) except -1:
        """The counts kept in C into _tables; then none kept, so a change to the dict is seen."""
        cdef int k
        for k in range(self._tallies):
            PyDict_SetItem(self._tables, <object>self._tally_names[k], PyLong_FromLongLong(self._tally_counts[k]))
        self._drop_tallies()
        return 0

    cpdef tuple number(self, table):
        """(total_order, data_collection_order) of the next change of `table`."""
        cdef int64_t total_order, collection_order
        self._count(table, &total_order, &collection_order)
        return (total_order, collection_order)

    cdef int _count(self, object table, int64_t* total_order, int64_t* collection_order) except -1:
        """number() for the C path: the two positions written to C variables, no tuple."""
        cdef object t = table or ""
        cdef PyObject* held
        cdef int k = 0
        if self._tables is None:
            raise RuntimeError("ChangeStream.__init__ was not called")
        while k < self._tallies and self._tally_names[k] != <PyObject*>t:  # the same str: _table_str's
            k += 1
        if k == self._tallies:  # not by identity: by value, else a new tally from the dict's count
            k = 0
            while k < self._tallies and not (<object>self._tally_names[k] == t):
                k += 1
            if k == self._tallies:
                if k == _TALLIES:
                    self._sync_tables()
                    k = 0
                held = PyDict_GetItem(self._tables, t)
                self._tally_counts[k] = 0 if held == NULL else <int64_t>(<object>held)
                Py_INCREF(t)
                self._tally_names[k] = <PyObject*>t
                self._tallies = k + 1
        self._tally_counts[k] += 1
        self._counted = t
        self.produced += 1
        total_order[0] = self.produced
        collection_order[0] = self._tally_counts[k]
        return 0

    def send_all(self, pairs, send, failed, tombstone_after, direct=None):
        """The emitter's per-change loop, in C: next() and send(kafka_key, value, failed) for each
        (key, raw) of pairs, in order, and a tombstone (value None) after each change whose op is
        tombstone_after (None: no tombstones). sent and last_seq follow each change handed over.
        When next or send raises, a change numbered but not sent is taken back from the numbering,
        so the emit cursor never covers it.

        direct, when the sink offers one (Sink.direct_change_sender): a ChangeSender capsule (above),
        or (call, a, b), and a change is handed over as call(value, kafka_key, a, b), a C call with
        no Python frame; when either refuses it, the change goes through send, the sink's own path
        (it waits for room, handles an oversized record, or raises the error itself)."""
        cdef object call = None, a = None, b = None
        cdef const ChangeSender* cs = _c_sender(direct)
        if self.writer is None or self._tables is None:
            raise RuntimeError("ChangeStream.__init__ was not called")
        if direct is not None and cs == NULL:
            call, a, b = direct
        for _, raw in pairs:
            self._send_one(raw, call, a, b, send, failed, tombstone_after, cs)

    def send_staged(self, dict staged not None, bytes prefix not None, int64_t after_seq, send, failed,
                    tombstone_after, direct=None):
        """send_all over a staged transaction's events with seq > after_seq (the emit cursor), read
        from its staged writes (txn.staged: key -> raw) in place, without the (key, value) pairs
        of staged_range: the emission of a transaction that never reached the store. Its event keys
        are prefix + EVENT + seq (8 bytes, big-endian), so insertion order is key order when the
        seqs came in order. False, having sent nothing, when they did not or a key is not of that
        form: the caller then takes the sorted path (engine.buffered, send_all)."""
        cdef Py_ssize_t pos = 0, plen = PyBytes_GET_SIZE(prefix), klen, size
        cdef PyObject* k
        cdef PyObject* v
        cdef const unsigned char* kb
        cdef uint64_t seq, last = 0
        cdef bint first = True
        cdef object call = None, a = None, b = None, raw
        cdef const ChangeSender* cs = _c_sender(direct)
        if self.writer is None or self._tables is None:
            raise RuntimeError("ChangeStream.__init__ was not called")
        while PyDict_Next(staged, &pos, &k, &v):  # a pass without side effects: in order?
            klen = PyBytes_GET_SIZE(<object>k) if type(<object>k) is bytes else -1
            if klen < plen + 1:
                return False
            kb = <const unsigned char*>PyBytes_AS_STRING(<object>k)
            if memcmp(kb, PyBytes_AS_STRING(prefix), plen) != 0:
                return False
            if kb[plen] != _EVENT_TAG:
                continue  # another index of the transaction (rows, subtransactions): not an event
            if klen != plen + 9:
                return False
            seq = _read_be64(kb + plen + 1)
            if not first and seq <= last:
                return False
            first, last = False, seq
        if direct is not None and cs == NULL:
            call, a, b = direct
        size, pos = len(staged), 0
        while PyDict_Next(staged, &pos, &k, &v):
            kb = <const unsigned char*>PyBytes_AS_STRING(<object>k)
            if kb[plen] != _EVENT_TAG:
                continue
            if after_seq >= 0 and _read_be64(kb + plen + 1) <= <uint64_t>after_seq:
                continue
            raw = <object>v  # held: send runs Python code
            self._send_one(raw, call, a, b, send, failed, tombstone_after, cs)
            if len(staged) != size:  # PyDict_Next must not go on over a changed dict
                raise RuntimeError("a staged transaction's writes changed during its emission")
        return True

    cdef int _send_one(self, object raw, object call, object a, object b, object send, object failed,
                       object tombstone_after, const ChangeSender* cs) except -1:
        """One buffered event of send_all: numbered, encoded, handed over; a change numbered but not
        sent is taken back from the numbering when next or send raises."""
        cdef object out, key, value, seq, op
        cdef Py_ssize_t numbered = self.produced
        if cs != NULL and type(raw) is bytes and self.writer._fast and self._send_in_place(
            <bytes>raw, cs, send, failed, tombstone_after
        ):
            return 0
        try:
            # no Python call per change, and in the common case no tuple either (True)
            out = self._next(raw, True) if type(raw) is bytes else self.next(raw)
            if out is None:
                return 0
            if out is True:
                key, value, seq, op = self._out_key, self._out_value, self._out_seq, self._out_op
            else:
                key, value, seq, op = (<tuple>out)[0], (<tuple>out)[1], (<tuple>out)[2], (<tuple>out)[4]
            if cs != NULL:
                _hand_over_c(cs, send, failed, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), PyBytes_AS_STRING(value),
                             PyBytes_GET_SIZE(value))
            else:
                _hand_over(call, a, b, send, failed, key, value)
        except BaseException:
            self._take_back(numbered)
            raise
        self.sent += 1
        self.last_seq = seq
        if tombstone_after is not None and op == tombstone_after:
            if cs != NULL:
                _hand_over_c(cs, send, failed, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), NULL, 0)
            else:
                _hand_over(call, a, b, send, failed, key, None)
        return 0

    cdef int _take_back(self, Py_ssize_t numbered) except -1:
        """A change numbered but not handed over leaves the numbering: the emit cursor never covers it."""
        if self.produced > numbered:
            self.produced -= 1
            self.tables[self._counted] -= 1
        return 0

    cdef bint _send_in_place(self, bytes raw, const ChangeSender* cs, object send, object failed,
                             object tombstone_after) except -1:
        """_send_one to a ChangeSender: the change's key and value written in C buffers (_write_in_place)
        and handed over from there. False, having numbered nothing, for an event with attrs (the
        general path)."""
        cdef LaneFields f
        cdef Writer kw, vw
        cdef Py_ssize_t numbered = self.produced
        cdef int done
        w_init(&kw)
        w_init(&vw)
        try:
            try:
                done = self._write_in_place(raw, &f, &kw, &vw)
                if done != IN_PLACE_WRITTEN:
                    return done == IN_PLACE_FRAGMENT  # a fragment is never emitted alone
                _hand_over_c(cs, send, failed, <const char*>kw.buf, kw.len, <const char*>vw.buf, vw.len)
            except BaseException:
                self._take_back(numbered)
                raise
            self.sent += 1
            self.last_seq = f.seq
            if tombstone_after is not None and (<Node>RAW_ROOT.children[I_OP]).symbols[f.op] == tombstone_after:
                _hand_over_c(cs, send, failed, <const char*>kw.buf, kw.len, NULL, 0)
            return True
        finally:
            w_free(&kw)
            w_free(&vw)

    def next(self, bytes raw not None):
        """(kafka_key, value, seq, table or "", op) of one buffered event; None for a fragment
        (merged into its change by the fragment path, never emitted alone)."""
        if self.writer is None or self._tables is None:
            raise RuntimeError("ChangeStream.__init__ was not called")
        return self._next(raw, False)

    cdef object _next(self, bytes raw, bint to_fields):
        """next() once the stream is known to be initialised: in place when it can (with to_fields,
        into the _out_ fields, returning True), else decoded (always a tuple)."""
        cdef Py_ssize_t body_at
        cdef list vals
        if self.writer._fast:
            out = self._next_in_place(raw, to_fields)
            if out is not NotImplemented:
                return out
        if self._vals is None:
            self._vals = [None] * I_KEY
        vals = self._vals
        key = _emit_fields(raw, vals, &body_at)
        op = vals[I_OP]
        if op not in CHANGE_OP_INDEX:
            return None
        table = vals[I_TABLE]
        kafka_key = change_key_c(table, key)
        total_order, collection_order = self.number(table)
        value = self.writer._encode(op, vals[I_SEQ], vals[I_SCN], vals[I_TS_MS], table, vals[I_ROW_ID], vals[I_ATTRS],
                                    raw, body_at, total_order, collection_order)
        return (kafka_key, value, vals[I_SEQ], table or "", op)


    cdef object _next_in_place(self, bytes raw, bint to_fields):
        """next() with the prefix fields read in place and the ChangeEvent written from them
        (_write_in_place); NotImplemented when the event has attrs (the general path). With
        to_fields, the change goes to _out_key, _out_value, _out_seq and _out_op and True is returned."""
        cdef LaneFields f
        cdef Writer kw, vw
        cdef int done
        w_init(&kw)
        w_init(&vw)
        try:
            done = self._write_in_place(raw, &f, &kw, &vw)
            if done == IN_PLACE_FRAGMENT:
                return None  # merged into its change, never emitted alone
            if done == IN_PLACE_GENERAL:
                return NotImplemented
            kafka_key, value = w_result(&kw), w_result(&vw)
        finally:
            w_free(&kw)
            w_free(&vw)
        op = (<Node>RAW_ROOT.children[I_OP]).symbols[f.op]
        if to_fields:
            self._out_key, self._out_value, self._out_seq, self._out_op = kafka_key, value, f.seq, op
            return True
        return (kafka_key, value, f.seq, "" if f.table == NULL else _table_str(f.table, f.table_n), op)

    cdef int _write_in_place(self, bytes raw, LaneFields* f, Writer* kw, Writer* vw) except -1:
        """The in-place path of one buffered event: its prefix fields read into f, its Kafka key written
        to kw and, numbered, its ChangeEvent to vw (IN_PLACE_WRITTEN); IN_PLACE_FRAGMENT or, for an
        event with attrs, IN_PLACE_GENERAL, having written and numbered nothing. A caller whose
        hand-over fails takes the numbering back (_send_one)."""
        cdef Reader r
        cdef Py_ssize_t body_at
        cdef int op_index
        cdef int64_t total_order, collection_order
        cdef bytes kafka_key
        r.buf = <const unsigned char*>PyBytes_AS_STRING(raw)
        r.pos = 0
        r.end = PyBytes_GET_SIZE(raw)
        try:
            scan_fields(&r, I_KEY, f)  # validated when buffered; read again in place
            op_index = RAW_TO_CHANGE_OP[f.op]
            if op_index < 0:
                return IN_PLACE_FRAGMENT
            if f.has_attrs:
                return IN_PLACE_GENERAL
            body_at = r.pos
            if change_key_raw(&r, f.table, f.table_n if f.table != NULL else 0, kw) != 0:
                r.pos = body_at  # a key the bytes path leaves to the reference
                kafka_key = change_key_c(None if f.table == NULL else _table_str(f.table, f.table_n),
                                         decode_node(<Node>RAW_ROOT.children[I_KEY], &r))
                kw.len = 0
                w_raw(kw, PyBytes_AS_STRING(kafka_key), PyBytes_GET_SIZE(kafka_key))
        except Malformed as exc:
            raise DECODE_ERROR(f"undecodable buffered event: {exc}") from exc
        self._count(None if f.table == NULL else _table_str(f.table, f.table_n), &total_order, &collection_order)
        write_change_in_place(self.writer, vw, op_index, f.seq, f.scn, f.ts_ms, f.table, f.table_n, f.row_id,
                              f.row_id_n, raw, body_at, total_order, collection_order)
        return IN_PLACE_WRITTEN


cdef class Emission:
    """One released transaction of processor.runtime.emitter.Emitter: its change numbering (stream, a
    ChangeStream) and how far its outputs are acknowledged. The emitter's Python Emission, in C: it
    is built once and settled twice per emitted transaction (~3 Python frames a transaction)."""

    cdef public object engine, txn
    cdef public ChangeStream stream
    cdef public object last_seq  # seq of the last change sent
    cdef public bint all_sent, end_sent, end_acked
    cdef public bint changes_settled  # every change sent so far is acknowledged

    def __init__(self, engine, txn, ChangeStream stream=None):
        """stream None: the transaction's own, numbering from its emit cursor (assemble.change_writer's
        writer; the commit, xid and user read through their slots)."""
        cdef bint slots, commit_slots
        cdef object commit
        if stream is None:
            slots = type(txn) is TXN_TYPE
            commit = _commit_of(txn, slots)
            commit_slots = type(commit) is COMMIT_TYPE
            writer = ChangeWriter(_txn_get(txn, slots, T_XID), _commit_get(commit, commit_slots, C_SCN),
                                  _commit_get(commit, commit_slots, C_TS_MS),
                                  _commit_get(commit, commit_slots, C_THREAD), txn.user)
            stream = ChangeStream(writer, txn.acked_count, dict(txn.acked_tables))
        self.engine, self.txn, self.stream = engine, txn, stream
        self.last_seq = txn.acked_seq
        self.all_sent = self.end_sent = self.end_acked = False
        self.changes_settled = True

    cpdef settle(self):
        """Every output of this emission sent so far is acknowledged: move the emit cursor."""
        cdef object txn = self.txn
        cdef object produced
        if not self.changes_settled:
            self.changes_settled = True
            produced = self.stream.produced
            if produced != txn.acked_count:
                txn.acked_seq = self.last_seq
                txn.acked_count = produced
                # Shared once every change is sent (the counts are final), else a copy.
                txn.acked_tables = self.stream.tables if self.all_sent else dict(self.stream.tables)
                if _txn_get(txn, type(txn) is TXN_TYPE, T_STAGED) is None:  # else cursor_moved does nothing
                    self.engine.cursor_moved(txn)
        if self.end_sent:
            self.end_acked = True

    cpdef bytes transaction_bytes(self, str status, object ordering):
        """The transaction's BEGIN, or its END with the stream's counts (assemble.transaction_bytes)."""
        cdef object txn = self.txn
        cdef bint slots = type(txn) is TXN_TYPE  # the fields through their slots (_lane.pxi)
        cdef object commit = _commit_of(txn, slots)
        cdef bint commit_slots = type(commit) is COMMIT_TYPE
        xid = _txn_get(txn, slots, T_XID)
        scn, ts_ms = _commit_get(commit, commit_slots, C_SCN), _commit_get(commit, commit_slots, C_TS_MS)
        thread = _commit_get(commit, commit_slots, C_THREAD)
        if status == "END":
            return _transaction_bytes(status, xid, scn, ts_ms, thread, self.stream.produced, self.stream.tables or {},
                                      _txn_get(txn, slots, T_PARTITION), _commit_get(commit, commit_slots, C_OFFSET),
                                      ordering)
        return _transaction_bytes(status, xid, scn, ts_ms, thread, None, None, None, None, ordering)


def settle_all(list emissions):
    """settle() each of emissions, in order."""
    for em in emissions:
        (<Emission?>em).settle()


cdef inline int _hand_over(object call, object a, object b, object send, object failed, object key,
                           object value) except -1:
    """One output to the sink: by its direct call when it has one, else (or when that raises
    an Exception) by send."""
    if call is not None:
        try:
            call(value, key, a, b)
            return 0
        except Exception:
            pass
    send(key, value, failed)
    return 0


cdef inline int _hand_over_c(const ChangeSender* cs, object send, object failed, const char* key, Py_ssize_t key_n,
                             const char* value, Py_ssize_t value_n) except -1:
    """One output to the sink's ChangeSender (value NULL: a tombstone), or by send when it refuses it."""
    if cs.send(cs.ctx, value, value_n, key, key_n) != 0:
        send(PyBytes_FromStringAndSize(key, key_n),
             None if value == NULL else PyBytes_FromStringAndSize(value, value_n), failed)
    return 0


cdef object _emit_fields(bytes raw, list vals, Py_ssize_t* body_at):
    """Decode the fields before `key` into vals (lob_data skipped), set *body_at and return the
    key. The event was validated to its last byte when it was buffered, so the row images and
    the DDL after the key are not read again."""
    cdef Reader r
    cdef Node root = RAW_ROOT
    cdef Py_ssize_t i
    if root is None:
        raise RuntimeError("RawCodec.__init__ was not called")
    r.buf = <const unsigned char*>PyBytes_AS_STRING(raw)
    r.pos = 0
    r.end = PyBytes_GET_SIZE(raw)
    try:
        for i in range(I_KEY):
            if EMIT_USES[i]:
                vals[i] = decode_node(<Node>root.children[i], &r)
            else:
                skip_node(<Node>root.children[i], &r)
        body_at[0] = r.pos
        return decode_node(<Node>root.children[I_KEY], &r)
    except Malformed as exc:
        raise DECODE_ERROR(f"undecodable buffered event: {exc}") from exc


cdef class _RecordingSender:
    """recording_change_sender's state: where it logs, which calls it refuses, how many it took."""

    cdef ChangeSender c
    cdef list log
    cdef object refuse
    cdef Py_ssize_t calls


cdef int _recording_send(void* ctx, const char* value, Py_ssize_t value_n, const char* key,
                         Py_ssize_t key_n) noexcept:
    cdef _RecordingSender sender = <_RecordingSender>ctx
    cdef Py_ssize_t n = sender.calls
    sender.calls += 1
    try:
        if n in sender.refuse:
            return -184  # as librdkafka's queue full
        sender.log.append((PyBytes_FromStringAndSize(key, key_n),
                           None if value == NULL else PyBytes_FromStringAndSize(value, value_n), "direct"))
    except BaseException:
        return -1
    return 0


cdef void _release_context(object capsule) noexcept:
    cdef void* context = PyCapsule_GetContext(capsule)
    if context != NULL:
        Py_DECREF(<object>context)


def recording_change_sender(list log not None, refuse):
    """For the tests: a ChangeSender capsule that appends (key, value, "direct") to log for each change
    (value None: a tombstone) and refuses the calls whose number (from 0) is in refuse."""
    cdef _RecordingSender sender = _RecordingSender.__new__(_RecordingSender)
    sender.log, sender.refuse = log, refuse
    sender.c.send = _recording_send
    sender.c.ctx = <void*>sender
    capsule = PyCapsule_New(<void*>&sender.c, CHANGE_SENDER, _release_context)
    Py_INCREF(sender)  # the capsule's: released by its destructor
    PyCapsule_SetContext(capsule, <void*>sender)
    return capsule
