# cython: language_level=3, boundscheck=False, wraparound=False
"""The raw topic's records from librdkafka's fetch queues, without a confluent-kafka Message each.

confluent-kafka's Consumer.consume builds a Message per record (its topic decoded to a str, its
headers detached, an error slot) and frees it again once the engine has read three fields: py-spy
put that at ~15% of the steady loop's main thread (docs/benchmarks.md, session 38). RawFetch takes
the records from the same librdkafka and hands over a RawRecord each: partition, offset, key, value.

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
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport free, malloc

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
    """poll(max_records, wait_s) -> ({partition: [record, ...]}, [KafkaError, ...], records taken),
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
        cdef list run = None
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
                        run = runs[last] = []
                run.append(_record(m))
                n += 1
        finally:
            for i in range(got):
                txb.message_destroy(self._slots[i])
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
