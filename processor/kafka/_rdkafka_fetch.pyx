# cython: language_level=3, boundscheck=False, wraparound=False
"""The raw topic's records from librdkafka's fetch queues, without a confluent-kafka Message each.

confluent-kafka's Consumer.consume builds a Message per record (its topic decoded to a str, its
headers detached, an error slot) and frees it again once the engine has read three fields: py-spy
put that at ~15% of the steady loop's main thread (docs/benchmarks.md, session 38). RawFetch takes
the records from the same librdkafka and hands over each partition's as a RecordRun: the records
copied into one block, which the engine's compiled lane reads in place, and a RawRecord (partition,
offset, key, value) for whatever asks for one (session 45: no RawRecord and key bytes per record,
and no value bytes but a change's; the steady loop's main thread went from a median 3.58 to 2.95
µs per event).

How. Each partition the member is assigned has its fetch queue forwarded to RawFetch's own queue
(route(), called before incremental_assign): librdkafka never re-forwards a queue the application
forwarded, so none of its records reaches the consumer's queue. Everything else stays on the
consumer's queue and with confluent-kafka (rebalances and their callbacks, commit results, errors,
seek, pause, position, group metadata): poll() serves it first with consumer.consume(n, 0), then
takes the records the way kafka/poll.py does, waiting up to wait_s for the first and then taking
what is already fetched. An event reaching the consumer's queue during that wait ends it early.

librdkafka is confluent-kafka's own, reached as _rdkafka_api.pxi says.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES

from confluent_kafka import Consumer, KafkaError

include "_rdkafka_api.pxi"

cdef extern from *:
    """
    /* confluent-kafka's client object begins with its rd_kafka_t, NULL once closed (Handle in
       confluent_kafka.h, unchanged since 0.9). */
    typedef struct { PyObject_HEAD void *rk; } txb_handle_t;
    static void *txb_handle_rk(PyObject *handle) { return ((txb_handle_t *)handle)->rk; }
    """
    void *txb_handle_rk(PyObject *handle)

cdef enum:
    RD_KAFKA_CONSUMER = 1


@cython.final
@cython.freelist(1024)
@cython.no_gc  # holds bytes and None only
cdef class RawRecord:
    """One consumed record, as the engines read it: confluent-kafka's Message subset."""

    cdef int32_t _partition
    cdef int64_t _offset
    cdef object _key
    cdef object _value

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def error(self):
        return None

    def __repr__(self):
        return f"RawRecord([{self._partition}]@{self._offset})"


# One record of a RecordRun, as its buffer exports it (format "qPnPn"; the lane in
# processor/core/_lane.pxi reads the same layout): a length of -1 is a null key or value.
cdef char *_RECORD_FORMAT = b"qPnPn"

ctypedef struct txb_raw_record_t:
    int64_t offset
    const char *key
    Py_ssize_t key_len
    const char *value
    Py_ssize_t value_len


cdef bytes _bytes(object b):
    if type(b) is not bytes:
        raise TypeError(f"a record's key and value are bytes or None, not {type(b).__name__}")
    return <bytes>b


cdef RawRecord _record_of(int32_t partition, const txb_raw_record_t *r):
    cdef RawRecord rec = RawRecord.__new__(RawRecord)
    rec._partition = partition
    rec._offset = r.offset
    rec._key = None if r.key_len < 0 else PyBytes_FromStringAndSize(r.key, r.key_len)
    rec._value = None if r.value_len < 0 else PyBytes_FromStringAndSize(r.value, r.value_len)
    return rec


@cython.final
@cython.no_gc  # holds no Python objects
cdef class RecordRun:
    """One partition's records of a poll batch, in offset order, copied into one block: a sequence
    of RawRecord (built on access), and a buffer of txb_raw_record_t that the engine's compiled lane
    reads in place. A record costs no Python object unless something asks for it: the lane makes
    only the value bytes a buffered change is stored under (docs/benchmarks.md, session 45)."""

    cdef readonly int32_t partition
    cdef txb_raw_record_t *_recs
    cdef Py_ssize_t _n, _cap
    cdef char *_arena
    cdef Py_ssize_t _used, _arena_cap
    cdef bint _sealed

    def __cinit__(self, int32_t partition):
        self.partition = partition

    def __dealloc__(self):
        free(self._recs)
        free(self._arena)

    @staticmethod
    def of(int32_t partition, records):
        """A sealed run of (offset, key, value) tuples (key and value bytes or None): for tests and
        tools that have records in hand rather than from librdkafka."""
        cdef RecordRun run = RecordRun(partition)
        cdef bytes k, v
        for offset, key, value in records:
            k = None if key is None else _bytes(key)
            v = None if value is None else _bytes(value)
            run._append(offset, NULL if k is None else PyBytes_AS_STRING(k), -1 if k is None else len(k),
                        NULL if v is None else PyBytes_AS_STRING(v), -1 if v is None else len(v))
        run._seal()
        return run

    cdef int _add(self, const txb_message_t *m) except -1:
        return self._append(m.offset, <const char *>m.key, m.key_len if m.key != NULL else -1,
                            <const char *>m.payload, m.len if m.payload != NULL else -1)

    cdef int _append(self, int64_t offset, const char *key, Py_ssize_t key_len, const char *value,
                     Py_ssize_t value_len) except -1:
        """Copy one record in (a length of -1: null); its key and value are arena offsets until _seal()."""
        cdef Py_ssize_t need = max(key_len, 0) + max(value_len, 0)
        cdef Py_ssize_t cap
        cdef void *grown
        cdef txb_raw_record_t *r
        if self._sealed:
            raise RuntimeError("RecordRun is sealed")
        if self._n == self._cap:
            cap = 64 if self._cap == 0 else 2 * self._cap
            grown = realloc(self._recs, cap * sizeof(txb_raw_record_t))
            if grown == NULL:
                raise MemoryError()
            self._recs, self._cap = <txb_raw_record_t *>grown, cap
        if self._used + need > self._arena_cap:
            cap = max(16384, 2 * self._arena_cap, self._used + need)
            grown = realloc(self._arena, cap)
            if grown == NULL:
                raise MemoryError()
            self._arena, self._arena_cap = <char *>grown, cap
        r = &self._recs[self._n]
        r.offset = offset
        r.key, r.key_len = NULL, key_len
        r.value, r.value_len = NULL, value_len
        if key_len >= 0:
            memcpy(self._arena + self._used, key, key_len)
            r.key = <const char *><uintptr_t>self._used
            self._used += key_len
        if value_len >= 0:
            memcpy(self._arena + self._used, value, value_len)
            r.value = <const char *><uintptr_t>self._used
            self._used += value_len
        self._n += 1
        return 0

    cdef void _seal(self) noexcept:
        """The arena is final: its offsets become pointers."""
        cdef Py_ssize_t i
        if self._sealed:
            return
        for i in range(self._n):
            if self._recs[i].key_len >= 0:
                self._recs[i].key = self._arena + <uintptr_t>self._recs[i].key
            if self._recs[i].value_len >= 0:
                self._recs[i].value = self._arena + <uintptr_t>self._recs[i].value
        self._sealed = True

    def __len__(self):
        return self._n

    def __getitem__(self, Py_ssize_t i):
        if i < 0:
            i += self._n
        if not 0 <= i < self._n or not self._sealed:
            raise IndexError("RecordRun index out of range")
        return _record_of(self.partition, &self._recs[i])

    def __getbuffer__(self, Py_buffer *view, int flags):
        if not self._sealed:
            raise BufferError("RecordRun is not sealed")
        view.buf = <void *>self._recs
        view.obj = self
        view.len = self._n * sizeof(txb_raw_record_t)
        view.readonly = 1
        view.itemsize = sizeof(txb_raw_record_t)
        view.format = _RECORD_FORMAT if (flags & PyBUF_FORMAT) else NULL
        view.ndim = 1
        view.shape = &self._n if (flags & PyBUF_ND) else NULL
        view.strides = &view.itemsize if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def __repr__(self):
        return f"RecordRun([{self.partition}], {self._n} records)"


cdef RawRecord _record(const txb_message_t *m):
    cdef RawRecord rec = RawRecord.__new__(RawRecord)
    rec._partition = m.partition
    rec._offset = m.offset
    rec._key = None if m.key == NULL else PyBytes_FromStringAndSize(<char *>m.key, m.key_len)
    rec._value = None if m.payload == NULL else PyBytes_FromStringAndSize(<char *>m.payload, m.len)
    return rec


cdef object _error(const txb_message_t *m):
    """A consumer error from a fetch queue: librdkafka puts its text in the payload."""
    if m.payload != NULL and m.len > 0:
        reason = PyBytes_FromStringAndSize(<char *>m.payload, m.len).decode("utf-8", "replace")
    else:
        reason = _err_name(m.err)
    return KafkaError(m.err, reason)


cdef void _wake(void *rk, void *opaque) noexcept nogil:
    # Called by librdkafka (its thread, the consumer queue's lock held) when that queue gets an
    # event: a wait in poll() returns, so the event is served now rather than after wait_s.
    txb.queue_yield(opaque)


@cython.final
@cython.no_gc_clear  # __dealloc__ needs _consumer to tell whether the queues still exist
cdef class RawFetch:
    """poll(max_records, wait_s) -> ({partition: RecordRun}, [KafkaError, ...], records taken),
    for one topic of a confluent_kafka.Consumer. route(partitions) before assigning them;
    unroute(partitions) once they are revoked; close() before the consumer's close()."""

    cdef object _consumer
    cdef bytes _topic
    cdef void *_queue  # where the routed partitions' fetch queues forward
    cdef void *_consumer_queue  # the consumer's own queue: only its wake-up is set here
    cdef dict _routed  # partition -> its fetch queue handle, as an int
    cdef txb_message_t **_slots
    cdef Py_ssize_t _capacity

    def __cinit__(self):
        self._routed = {}

    def __init__(self, consumer, str topic, Py_ssize_t max_records):
        if not isinstance(consumer, Consumer):
            raise TypeError(f"RawFetch needs a confluent_kafka.Consumer, not {type(consumer).__name__}")
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        cdef void *rk = txb_handle_rk(<PyObject *>consumer)
        if rk == NULL:
            raise RuntimeError("the consumer is closed")
        if txb.type_(rk) != RD_KAFKA_CONSUMER:
            raise TypeError("RawFetch needs a consumer's rd_kafka_t")
        self._consumer = consumer
        self._topic = topic.encode()
        self._slots = <txb_message_t **>malloc(max_records * sizeof(txb_message_t *))
        if self._slots == NULL:
            raise MemoryError()
        self._capacity = max_records
        self._consumer_queue = txb.queue_get_consumer(rk)
        if self._consumer_queue == NULL:
            raise ValueError("the consumer has no group (group.id)")
        self._queue = txb.queue_new(rk)
        txb.queue_cb_event_enable(self._consumer_queue, _wake, self._queue)

    def __dealloc__(self):
        self._close()

    cdef void *_rk(self) except NULL:
        if self._queue == NULL:
            raise RuntimeError("RawFetch is closed")
        cdef void *rk = txb_handle_rk(<PyObject *>self._consumer)
        if rk == NULL:
            raise RuntimeError("the consumer was closed before RawFetch")
        return rk

    def route(self, partitions):
        """Forward these partitions' fetch queues here: call it before assigning them."""
        cdef void *rk = self._rk()
        cdef void *q
        for p in partitions:
            handle = self._routed.get(p)
            if handle is None:
                q = txb.queue_get_partition(rk, self._topic, <int32_t>p)
                if q == NULL:
                    raise ValueError(f"no fetch queue for {self._topic.decode()} [{p}]")
                self._routed[p] = <uintptr_t>q
            else:
                q = <void *><uintptr_t>handle
            txb.queue_forward(q, self._queue)

    def unroute(self, partitions):
        """Stop forwarding these partitions (revoked or lost): their leftovers are outdated anyway.
        Nothing to do once closed (the revokes of consumer.close() come after close())."""
        if self._queue == NULL:
            return
        self._rk()
        for p in partitions:
            handle = self._routed.pop(p, None)
            if handle is not None:
                txb.queue_forward(<void *><uintptr_t>handle, NULL)
                txb.queue_destroy(<void *><uintptr_t>handle)

    def poll(self, Py_ssize_t max_records, double wait_s):
        self._rk()
        cdef Py_ssize_t want = min(max_records, self._capacity)
        cdef int wait_ms = <int>(wait_s * 1000) if wait_s > 0 else 0
        cdef Py_ssize_t got = 0, more, i = 0, n = 0
        cdef dict runs = {}
        cdef list errors = []
        cdef object run = None
        cdef int32_t last = -1
        cdef const txb_message_t *m
        # The consumer's own queue: rebalance callbacks (route/unroute run inside), commit results,
        # errors; and the records of a partition that was never routed, if any.
        for msg in self._consumer.consume(want, 0):
            if msg.error() is not None:
                errors.append(msg.error())
            else:
                runs.setdefault(msg.partition(), []).append(msg)
                n += 1
        # A fetch stopped by a revoke clears its forward; one started again soon after could
        # otherwise be left unforwarded (librdkafka leaves an application-forwarded queue alone).
        for handle in self._routed.values():
            txb.queue_forward(<void *><uintptr_t>handle, self._queue)
        if n >= want:
            return runs, errors, n
        with nogil:
            got = txb.consume_batch_queue(self._queue, 0 if n else wait_ms, self._slots, 1)
            if got == 1 and want - n > 1:
                more = txb.consume_batch_queue(self._queue, 0, self._slots + 1, want - n - 1)
                if more > 0:
                    got += more
        try:
            while i < got:
                m = self._slots[i]
                i += 1
                if m.err:
                    errors.append(_error(m))
                    continue
                if m.partition != last:  # records come in runs of one partition
                    last = m.partition
                    run = runs.get(last)
                    if run is None:
                        run = runs[last] = RecordRun(last)
                if type(run) is RecordRun:
                    (<RecordRun>run)._add(m)
                else:  # the partition's first records came through the consumer's queue
                    (<list>run).append(_record(m))
                n += 1
        finally:
            for i in range(got):
                txb.message_destroy(self._slots[i])
            for run in runs.values():
                if type(run) is RecordRun:
                    (<RecordRun>run)._seal()
        return runs, errors, n

    def close(self):
        """Stop forwarding, drop what is left, and let go of the queues: before consumer.close()
        (librdkafka wants the consumer queue's handles gone by then)."""
        self._close()

    cdef void _close(self) noexcept:
        cdef Py_ssize_t got
        if self._queue != NULL and txb_handle_rk(<PyObject *>self._consumer) != NULL:
            txb.queue_cb_event_enable(self._consumer_queue, NULL, NULL)  # waits out a running wake-up
            txb.queue_destroy(self._consumer_queue)
            for handle in self._routed.values():
                txb.queue_forward(<void *><uintptr_t>handle, NULL)
                txb.queue_destroy(<void *><uintptr_t>handle)
            while True:  # records left in the queue hold references to their partitions
                got = txb.consume_batch_queue(self._queue, 0, self._slots, self._capacity)
                if got <= 0:
                    break
                for i in range(got):
                    txb.message_destroy(self._slots[i])
            txb.queue_destroy(self._queue)
        # else already closed, or the consumer is gone and its queues with it: nothing to release safely
        self._queue = self._consumer_queue = NULL
        self._routed.clear()
        if self._slots != NULL:
            free(self._slots)
            self._slots = NULL
