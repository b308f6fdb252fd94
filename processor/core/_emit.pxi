# Included by _avro_fast.pyx: the emission of one committed transaction, per change in C.
#
# ChangeStream turns each buffered RawEvent (the store holds the raw bytes) into its Kafka key and
# ChangeEvent bytes, numbering total_order and data_collection_order. AckTracker keeps the emit
# cursor: the last seq of the contiguously acknowledged prefix of the sent changes, written to the
# transaction (acked_seq, acked_count, acked_tables) as it moves, as the Python emitter did.

cimport cython
from libc.string cimport memmove


cdef class ChangeStream:
    """The ChangeEvents of one committed transaction, from its buffered raw events in seq order."""

    cdef ChangeWriter writer
    cdef public Py_ssize_t produced     # total_order of the last change numbered
    cdef readonly dict tables           # table ("" for none) -> changes numbered
    cdef list _vals                     # the prefix fields of the event being encoded

    def __init__(self, ChangeWriter writer not None, Py_ssize_t produced, dict tables not None):
        self.writer, self.produced, self.tables = writer, produced, tables

    cpdef tuple number(self, table):
        """(total_order, data_collection_order) of the next change of `table`."""
        cdef object t = table or ""
        if self.tables is None:
            raise RuntimeError("ChangeStream.__init__ was not called")
        cdef object count = self.tables.get(t, 0) + 1
        self.tables[t] = count
        self.produced += 1
        return (self.produced, count)

    def next(self, bytes raw not None):
        """(kafka_key, value, seq, table or "", op) of one buffered event; None for a fragment
        (merged into its change by the fragment path, never emitted alone)."""
        cdef Py_ssize_t body_at
        cdef list vals
        if self.writer is None or self.tables is None:
            raise RuntimeError("ChangeStream.__init__ was not called")
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


@cython.freelist(4096)
cdef class ChangeAck:
    """The delivery callback of one sent change: (err) or (err, msg)."""

    cdef AckTracker tracker
    cdef Py_ssize_t order

    def __call__(self, err, msg=None):
        if err is not None:
            self.tracker.errors.append(str(err))
            return
        self.tracker.acked(self.order)


cdef class AckTracker:
    """Acknowledgements of one transaction's sent changes, and its emit cursor.

    Entries [head, n) are sent and not all acknowledged; acknowledged prefixes are dropped, so
    memory follows the changes in flight, never the transaction's size."""

    cdef object txn, engine, xid
    cdef set dirty             # the engine's set of transactions to checkpoint (cursor_moved)
    cdef list errors
    cdef list tables
    cdef int64_t* seqs
    cdef unsigned char* done
    cdef Py_ssize_t first      # total_order of entry 0
    cdef Py_ssize_t n, head, cap

    def __cinit__(self):
        self.seqs = NULL
        self.done = NULL

    def __init__(self, txn, engine, list errors not None):
        self.txn, self.engine, self.errors = txn, engine, errors
        self.xid = txn.xid
        # engine.cursor_moved(txn) is dirty.add(xid): done in C on every ack, not as a Python call.
        dirty = getattr(engine, "_dirty", None)
        self.dirty = dirty if type(dirty) is set else None
        self.tables = []
        self.first = txn.acked_count + 1
        self.n = self.head = 0
        self.cap = 0

    def __dealloc__(self):
        free(self.seqs)
        free(self.done)

    @property
    def pending(self):
        """Sent changes not acknowledged yet (or acknowledged after one that is not)."""
        return self.n - self.head

    cdef int _room(self) except -1:
        cdef Py_ssize_t cap
        cdef void* p
        if self.head:  # drop the acknowledged prefix
            memmove(self.seqs, self.seqs + self.head, (self.n - self.head) * sizeof(int64_t))
            memmove(self.done, self.done + self.head, self.n - self.head)
            del self.tables[:self.head]
            self.first += self.head
            self.n -= self.head
            self.head = 0
        if self.n < self.cap:
            return 0
        cap = self.cap * 2 if self.cap else 64
        p = realloc(self.seqs, cap * sizeof(int64_t))
        if p == NULL:
            raise MemoryError()
        self.seqs = <int64_t*>p
        p = realloc(self.done, cap)
        if p == NULL:
            raise MemoryError()
        self.done = <unsigned char*>p
        self.cap = cap
        return 0

    def track(self, seq, table):
        """The callback for the change about to be sent (the next total_order)."""
        cdef int64_t s = seq
        cdef ChangeAck ack
        if self.tables is None:
            raise RuntimeError("AckTracker.__init__ was not called")
        if self.n == self.cap or (self.head and self.head == self.n):
            self._room()
        self.seqs[self.n] = s
        self.done[self.n] = 0
        self.tables.append(table)
        ack = ChangeAck.__new__(ChangeAck)
        ack.tracker = self
        ack.order = self.first + self.n
        self.n += 1
        return ack

    cdef void acked(self, Py_ssize_t order) except *:
        cdef Py_ssize_t i = order - self.first
        cdef Py_ssize_t start = self.head
        cdef dict counts
        if i < self.head or i >= self.n or self.done[i]:
            return  # a repeated report
        self.done[i] = 1
        if i != self.head:
            return
        while self.head < self.n and self.done[self.head]:
            self.head += 1
        txn = self.txn
        counts = txn.acked_tables
        for i in range(start, self.head):
            t = self.tables[i]
            counts[t] = counts.get(t, 0) + 1
        txn.acked_seq = self.seqs[self.head - 1]
        txn.acked_count = self.first + self.head - 1
        if self.dirty is not None:
            self.dirty.add(self.xid)
        else:
            self.engine.cursor_moved(txn)


@cython.freelist(4096)
cdef class DeliveryRoute:
    """A delivery callback (err, msg) that acknowledges on success and hands a failure, with the
    record's key and value, to on_failure(key, value, on_ack, err): one C call per report."""

    cdef object on_ack, on_failure, key, value

    def __init__(self, on_ack, on_failure, key, value):
        self.on_ack, self.on_failure, self.key, self.value = on_ack, on_failure, key, value

    def __call__(self, err, msg=None):
        if err is None:
            self.on_ack(None)
        else:
            self.on_failure(self.key, self.value, self.on_ack, err)
