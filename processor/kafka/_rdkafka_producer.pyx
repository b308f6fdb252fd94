# cython: language_level=3, boundscheck=False, wraparound=False
"""The outputs' producer on librdkafka's C API, without a Python call per delivered record.

confluent-kafka's Producer takes the GIL and builds a Message for every delivery report, even under
delivery.report.only.error (it drops the successes itself, afterwards). Here the delivery callback is
C: a success costs no Python at all, and a failure (or, without only-error, any report) is queued
and handed to the record's Python callback when poll() or flush() returns, as (KafkaError,
DeliveryReport). Everything else keeps confluent-kafka's meaning: BufferError on a full queue,
KafkaException(KafkaError) on a refused record, len() counting records until they are acknowledged
or their report ran, error_cb with a KafkaError (fatal ones resolved to their cause).

Settlement by epochs: every record carries the producer's open epoch (a batch, for the runner), and
the C callback counts each epoch's records down as librdkafka reports them. settled_epoch() then says,
without waiting, up to which closed epoch every record is acknowledged (a failed one once its Python
report ran: what that report produces, a chunk or a dead letter, is counted in the failed record's
epoch first). So a caller settles its outputs batch by batch while the queue keeps filling, where
len() == 0 is never seen under a steady load. (kafka/delivery.py, processor/kafka/settlement.py)

librdkafka is confluent-kafka's own, reached as _rdkafka_api.pxi says.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.pycapsule cimport PyCapsule_GetContext, PyCapsule_New, PyCapsule_SetContext
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t

import time
from collections import deque

from confluent_kafka import KafkaError, KafkaException

include "_rdkafka_api.pxi"

cdef extern from *:
    """
    /* One record onto the producer's queue: RD_KAFKA_VTYPE_RKT 2, PARTITION 3, VALUE 4, KEY 5,
       OPAQUE 6, MSGFLAGS 7 (RD_KAFKA_MSG_F_COPY 2), HEADERS 10. A null value is a tombstone. */
    static void *txb_produce(void *rk, void *rkt, int32_t partition, const char *value, Py_ssize_t value_len,
                             const char *key, Py_ssize_t key_len, void *opaque, void *headers) {
        txb_vu_t vu[7];
        size_t n = 0;
        vu[n].vtype = 2; vu[n++].u.rkt = rkt;
        vu[n].vtype = 3; vu[n++].u.i32 = partition;
        vu[n].vtype = 7; vu[n++].u.i = 2;
        if (value) { vu[n].vtype = 4; vu[n].u.mem.ptr = (void *)value; vu[n++].u.mem.size = (size_t)value_len; }
        if (key) { vu[n].vtype = 5; vu[n].u.mem.ptr = (void *)key; vu[n++].u.mem.size = (size_t)key_len; }
        if (opaque) { vu[n].vtype = 6; vu[n++].u.ptr = opaque; }
        if (headers) { vu[n].vtype = 10; vu[n++].u.headers = headers; }
        return txb.produceva(rk, vu, n);
    }
    """
    void *txb_produce(void *rk, void *rkt, int32_t partition, const char *value, Py_ssize_t value_len,
                      const char *key, Py_ssize_t key_len, void *opaque, void *headers) nogil

cdef extern from *:
    """
    /* An epoch's count of records in flight: librdkafka reports deliveries on the thread that polls
       (the loop, or exactly_once's commit thread), so the counts are atomic. */
    static inline void txb_count_add(int64_t *count, int64_t n) { __atomic_add_fetch(count, n, __ATOMIC_ACQ_REL); }
    static inline int64_t txb_count_get(int64_t *count) { return __atomic_load_n(count, __ATOMIC_ACQUIRE); }
    static inline int64_t txb_count_down(int64_t *count) { return __atomic_sub_fetch(count, 1, __ATOMIC_ACQ_REL); }
    """
    void txb_count_add(int64_t *count, int64_t n) nogil
    int64_t txb_count_get(int64_t *count) nogil
    int64_t txb_count_down(int64_t *count) nogil

cdef extern from *:
    """
    #include <pthread.h>
    /* send_now(): a thread of the producer's own calls rd_kafka_flush, librdkafka's only way to send
       what is queued without waiting out linger.ms (it holds rk_flushing while it waits), so that the
       caller goes on without waiting for the broker.

       One thread at a time serves librdkafka's report queue (serve_mu): rd_kafka_flush waits on it
       in polls of up to 10 ms and only checks for an empty queue in between, so a report taken by
       another thread left a flush asleep for the rest of its 10 ms (a flush per batch took 4.5 ms
       instead of 1.6). The thread never takes the GIL itself: the delivery callback takes it for a
       failure report only, so the GIL's holders take serve_mu with the GIL released. */
    typedef struct {
        pthread_mutex_t serve_mu;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t thread;
        int started, stop, pending;
        void *rk;
        int ms;
        int (*flush)(void *rk, int timeout_ms);
    } txb_sender_t;

    static void txb_sender_init(txb_sender_t *s) {
        pthread_mutex_init(&s->serve_mu, NULL);
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        s->started = s->stop = s->pending = 0;
    }

    static void *txb_sender_main(void *arg) {
        txb_sender_t *s = (txb_sender_t *)arg;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            while (!s->pending && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
            if (s->stop) break;
            s->pending = 0;
            pthread_mutex_unlock(&s->mu);
            pthread_mutex_lock(&s->serve_mu);
            s->flush(s->rk, s->ms);
            pthread_mutex_unlock(&s->serve_mu);
            pthread_mutex_lock(&s->mu);
        }
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }

    /* Starts the thread at the first kick; 0, or pthread_create's error. */
    static int txb_sender_kick(txb_sender_t *s, void *rk, int (*flush)(void *, int), int ms) {
        int err = 0;
        pthread_mutex_lock(&s->mu);
        if (!s->started) {
            s->rk = rk; s->flush = flush; s->ms = ms;
            err = pthread_create(&s->thread, NULL, txb_sender_main, s);
            s->started = err == 0;
        }
        if (!err) {
            s->pending = 1;
            pthread_cond_signal(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        return err;
    }

    /* Waits for a flush under way (at most its ms). Called without the GIL, which a failure report
       in that flush may need. */
    static void txb_sender_stop(txb_sender_t *s) {
        int started;
        pthread_mutex_lock(&s->mu);
        started = s->started;
        s->stop = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (started) pthread_join(s->thread, NULL);
        s->started = 0;
    }

    /* librdkafka's poll under serve_mu. One that does not wait skips (returns 0) while the thread's
       flush serves the queue. Once the thread runs, a poll waits 1 ms at most: it returns at the first
       report it serves, and the one its caller waits for may have been served by the thread just
       before (its caller checks again and polls again). */
    static int txb_serve_poll(txb_sender_t *s, int (*poll)(void *, int), void *rk, int ms) {
        int served;
        if (ms == 0) {
            if (pthread_mutex_trylock(&s->serve_mu) != 0) return 0;
        } else {
            pthread_mutex_lock(&s->serve_mu);
            if (s->started && (ms < 0 || ms > 1)) ms = 1;
        }
        served = poll(rk, ms);
        pthread_mutex_unlock(&s->serve_mu);
        return served;
    }

    /* librdkafka's flush under serve_mu: it checks for an empty queue before each wait. */
    static int txb_serve_flush(txb_sender_t *s, int (*flush)(void *, int), void *rk, int ms) {
        int err;
        pthread_mutex_lock(&s->serve_mu);
        err = flush(rk, ms);
        pthread_mutex_unlock(&s->serve_mu);
        return err;
    }
    """
    ctypedef struct txb_sender_t:
        int started
    void txb_sender_init(txb_sender_t *s) nogil
    int txb_sender_kick(txb_sender_t *s, void *rk, int (*flush)(void *, int) noexcept nogil, int ms) nogil
    void txb_sender_stop(txb_sender_t *s) nogil
    int txb_serve_poll(txb_sender_t *s, int (*poll)(void *, int) noexcept nogil, void *rk, int ms) nogil
    int txb_serve_flush(txb_sender_t *s, int (*flush)(void *, int) noexcept nogil, void *rk, int ms) nogil


cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    /* hold(): records that go to librdkafka only once every record produced before them is
       acknowledged (a transaction's END after its changes), released in order by whichever thread
       sees the last of those acknowledgements: a delivery callback, or a hold, poll or flush. A held
       record is counted in the epoch open at its hold, so that epoch settles after it is delivered;
       what it waits for are the plain (not held) records of the epochs up to `after`: an END does not
       wait for the ENDs before it, the queue keeps their order.
       A failure report stops the releases (blocked) until reclaim_held() takes every held record back:
       what that report did (a chunk, a dead letter, a failure) decides what the record must say. */
    typedef struct txb_held_s {
        struct txb_held_s *next;
        void *rkt;
        char *value;  /* NULL: a tombstone */
        Py_ssize_t value_len;
        char *key;
        Py_ssize_t key_len;
        void *opaque;
        uint64_t after;  /* released once every epoch up to it is settled */
    } txb_held_t;

    typedef struct {
        pthread_mutex_t mu;
        txb_held_t *head, *tail;
        int64_t count;  /* also read without the lock */
        uint64_t cursor;  /* the epochs before it are settled */
        int blocked;
    } txb_holds_t;

    static void txb_holds_init(txb_holds_t *h) {
        pthread_mutex_init(&h->mu, NULL);
        h->head = h->tail = NULL;
        h->count = 0;
        h->cursor = 1;
        h->blocked = 0;
    }

    static inline int64_t txb_holds_count(txb_holds_t *h) { return __atomic_load_n(&h->count, __ATOMIC_ACQUIRE); }

    /* A copy of the record at the tail; 0, or -1 when out of memory. */
    static int txb_holds_add(txb_holds_t *h, uint64_t settled_before, void *rkt, const char *value,
                             Py_ssize_t value_len, const char *key, Py_ssize_t key_len, void *opaque, uint64_t after) {
        txb_held_t *r = (txb_held_t *)malloc(sizeof(txb_held_t) + (value ? value_len : 0) + (key ? key_len : 0));
        char *data;
        if (!r) return -1;
        data = (char *)(r + 1);
        r->next = NULL; r->rkt = rkt; r->opaque = opaque; r->after = after;
        r->value = value ? data : NULL; r->value_len = value ? value_len : 0;
        if (value) { memcpy(data, value, value_len); data += value_len; }
        r->key = key ? data : NULL; r->key_len = key ? key_len : 0;
        if (key) memcpy(data, key, key_len);
        pthread_mutex_lock(&h->mu);
        if (h->cursor < settled_before) h->cursor = settled_before;  /* never behind the ring's window */
        if (h->tail) h->tail->next = r; else h->head = r;
        h->tail = r;
        __atomic_add_fetch(&h->count, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&h->mu);
        return 0;
    }

    /* Hands librdkafka the held records, in order, whose plain records up to epoch `after` are all
       acknowledged (or failed and reported: a failure report blocks the releases first). A
       record librdkafka refuses (a full queue) blocks the rest: reclaim_held() sends them from Python,
       which waits for room. */
    static void txb_holds_release(txb_holds_t *h, void *rk, int64_t *plain, uint64_t mask) {
        txb_held_t *r;
        void *err;
        if (!txb_holds_count(h)) return;
        pthread_mutex_lock(&h->mu);
        while ((r = h->head) != NULL && !h->blocked) {
            while (h->cursor <= r->after && __atomic_load_n(&plain[h->cursor & mask], __ATOMIC_ACQUIRE) == 0)
                h->cursor++;
            if (h->cursor <= r->after) break;
            err = txb_produce(rk, r->rkt, -1, r->value, r->value_len, r->key, r->key_len, r->opaque, NULL);
            if (err) { txb.error_destroy(err); h->blocked = 1; break; }
            h->head = r->next;
            if (!h->head) h->tail = NULL;
            __atomic_sub_fetch(&h->count, 1, __ATOMIC_ACQ_REL);
            free(r);
        }
        pthread_mutex_unlock(&h->mu);
    }

    static void txb_holds_block(txb_holds_t *h) {
        pthread_mutex_lock(&h->mu);
        h->blocked = 1;
        pthread_mutex_unlock(&h->mu);
    }

    /* Once blocked: drops every held record (each counted off its epoch) and unblocks; how many. */
    static int64_t txb_holds_reclaim(txb_holds_t *h, int64_t *in_flight, uint64_t mask) {
        txb_held_t *r, *next;
        int64_t n = 0;
        pthread_mutex_lock(&h->mu);
        if (h->blocked) {
            for (r = h->head; r; r = next) {
                next = r->next;
                __atomic_sub_fetch(&in_flight[((uintptr_t)r->opaque >> 32) & mask], 1, __ATOMIC_ACQ_REL);
                free(r);
                n++;
            }
            h->head = h->tail = NULL;
            __atomic_store_n(&h->count, 0, __ATOMIC_RELEASE);
            h->blocked = 0;
        }
        pthread_mutex_unlock(&h->mu);
        return n;
    }

    static void txb_holds_free(txb_holds_t *h) {
        txb_held_t *r, *next;
        for (r = h->head; r; r = next) { next = r->next; free(r); }
        h->head = h->tail = NULL;
        h->count = 0;
    }
    """
    ctypedef struct txb_holds_t:
        int64_t count
    void txb_holds_init(txb_holds_t *h) nogil
    int64_t txb_holds_count(txb_holds_t *h) nogil
    int txb_holds_add(txb_holds_t *h, uint64_t settled_before, void *rkt, const char *value, Py_ssize_t value_len,
                      const char *key, Py_ssize_t key_len, void *opaque, uint64_t after) nogil
    void txb_holds_release(txb_holds_t *h, void *rk, int64_t *plain, uint64_t mask) nogil
    void txb_holds_block(txb_holds_t *h) nogil
    int64_t txb_holds_reclaim(txb_holds_t *h, int64_t *in_flight, uint64_t mask) nogil
    void txb_holds_free(txb_holds_t *h) nogil


cdef enum:
    RD_KAFKA_PRODUCER = 0
    ERR_QUEUE_FULL = -184  # RD_KAFKA_RESP_ERR__QUEUE_FULL
    ERR_FATAL = -150  # RD_KAFKA_RESP_ERR__FATAL
    # Epochs in flight at once: next_epoch() waits rather than reuse the count of an unsettled one.
    EPOCH_RING = 4096

# A record's opaque: its epoch in the high 32 bits; in the low 32, HELD_TAG for a held record and its
# callback's slot (0: none).
cdef uintptr_t EPOCH_MASK = 0xFFFFFFFF
cdef uintptr_t SLOT_MASK = 0x7FFFFFFF
cdef uintptr_t HELD_TAG = 0x80000000
cdef uintptr_t RING_MASK = EPOCH_RING - 1

# librdkafka-only names are passed through; these are confluent-kafka's own, handled here.
_ONLY_ERROR = "delivery.report.only.error"
_ERROR_CB = "error_cb"


cdef int _timeout_ms(object timeout):
    """confluent-kafka's convention: seconds as a float, None or negative = wait forever."""
    if timeout is None or timeout < 0:
        return -1
    return <int>(timeout * 1000)


class DeliveryReport:
    """The record of a delivery report, as the callback sees it (confluent-kafka's Message subset)."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_error")

    def __init__(self, topic, partition, offset, key, value, error):
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._error = key, value, error

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def error(self):
        return self._error

    def __repr__(self):
        return f"DeliveryReport({self._topic}[{self._partition}]@{self._offset}, error={self._error})"


cdef struct CallbackState:
    int only_error  # a successful delivery is not reported
    int closing  # set before rd_kafka_destroy: callbacks touch nothing else
    PyObject *owner  # the NativeProducer (borrowed: it outlives its rd_kafka_t)
    int64_t in_flight[EPOCH_RING]  # records produced and not yet reported, by epoch % EPOCH_RING
    int64_t plain[EPOCH_RING]  # the same without held records: what a held record waits for
    txb_holds_t holds  # hold()'s records, until librdkafka gets them


cdef void _on_delivery(void *rk, const txb_message_t *msg, void *opaque) noexcept nogil:
    cdef CallbackState *state = <CallbackState *>opaque
    cdef uintptr_t tag = <uintptr_t>msg._private
    if state.closing:
        return
    if (tag & SLOT_MASK) == 0 or (msg.err == 0 and state.only_error):
        # No callback to hand it to, or a success not reported: counted off here, no GIL, no allocation.
        txb_count_down(&state.in_flight[(tag >> 32) & RING_MASK])
        if (tag & HELD_TAG) == 0 and txb_count_down(&state.plain[(tag >> 32) & RING_MASK]) == 0:
            if txb_holds_count(&state.holds):  # held records this one may have been the last for
                txb_holds_release(&state.holds, rk, state.plain, RING_MASK)
        return
    with gil:  # counted off once its report ran (_run_reports)
        (<NativeProducer>state.owner)._queue_report(msg)


cdef void _on_error(void *rk, int err, const char *reason, void *opaque) noexcept nogil:
    cdef CallbackState *state = <CallbackState *>opaque
    cdef char cause[512]
    cdef int fatal = 0
    if state.closing:
        return
    if err == ERR_FATAL:  # the cause is the producer's fatal error (as confluent-kafka reports it)
        err = txb.fatal_error(rk, cause, sizeof(cause))
        reason = cause
        fatal = 1
    with gil:
        (<NativeProducer>state.owner)._queue_error(err, reason, fatal)


# The emitter's C sender (processor/core/_emit.pxi declares the same struct and capsule name).
ctypedef int (*txb_send_change_fn)(void *ctx, const char *value, Py_ssize_t value_len, const char *key,
                                   Py_ssize_t key_len) noexcept
ctypedef struct txb_change_sender_t:
    txb_send_change_fn send
    void *ctx

cdef const char *_CHANGE_SENDER = b"txbuffer.change_sender"

cdef class NativeProducer


@cython.final
cdef class ChangeSender:
    """What a change_sender capsule points into: its producer, topic handle and callback slot."""

    cdef txb_change_sender_t c
    cdef NativeProducer producer
    cdef void *rkt
    cdef uintptr_t slot

    def __dealloc__(self):
        if self.producer is not None:
            self.producer._pinned.pop(self.slot, None)


cdef int _send_change(void *ctx, const char *value, Py_ssize_t value_len, const char *key,
                      Py_ssize_t key_len) noexcept:
    cdef ChangeSender sender = <ChangeSender>ctx
    return sender.producer._produce_c(sender.rkt, value, value_len, key, key_len, sender.slot)


cdef void _release_sender(object capsule) noexcept:
    cdef void *sender = PyCapsule_GetContext(capsule)
    if sender != NULL:
        Py_DECREF(<object>sender)


@cython.no_gc_clear  # __dealloc__ destroys the topic handles in _topics first
cdef class NativeProducer:
    """A confluent_kafka.Producer for the outputs' calls: produce, poll, flush, len, list_topics and the
    transactional ones exactly_once makes. A failed record's callback, and
    error_cb, run inside poll() or flush() after librdkafka returns, in the order of the reports; one
    that raises propagates, and the reports after it run at the next call."""

    cdef void *rk
    cdef CallbackState state
    cdef dict _topics  # name -> rd_kafka_topic_t handle, as an int
    cdef str _last_topic  # the last name looked up, and its handle
    cdef void *_last_rkt
    cdef dict _callbacks  # slot -> on_delivery callable, for the records still queued
    cdef dict _pinned  # slot -> on_delivery callable of a ChangeSender: kept while the sender lives
    cdef object _last_callback
    cdef uintptr_t _last_slot
    cdef uintptr_t _next_slot
    cdef object _reports  # a deque of (slot, KafkaError | None, DeliveryReport, epoch) and (None, KafkaError, None, 0)
    cdef object _error_cb
    cdef uint64_t _epoch  # the open epoch: records produced now carry it
    cdef uint64_t _unsettled  # the oldest epoch not known to be settled (<= _epoch)
    cdef uint64_t _report_epoch  # while a failure report runs: its record's epoch, which what it produces joins
    cdef txb_sender_t _sender  # send_now()'s thread, started at its first call
    cdef int _linger_ms
    cdef bint _produced_in_open  # the open epoch has records that were not held

    def __cinit__(self):
        self.rk = NULL
        self._topics = {}
        self._callbacks = {}
        self._pinned = {}
        self._reports = deque()
        self._next_slot = 1
        self._epoch = self._unsettled = 1  # epoch 0 is settled from the start
        self._report_epoch = 0
        txb_sender_init(&self._sender)
        txb_holds_init(&self.state.holds)

    def __init__(self, dict conf):
        cdef char errstr[512]
        cdef void *c_conf
        settings = dict(conf)
        self._linger_ms = max(1, int(float(settings.get("linger.ms", settings.get("queue.buffering.max.ms", 5)))))
        self._error_cb = settings.pop(_ERROR_CB, None)
        self.state.only_error = 1 if _flag(settings.pop(_ONLY_ERROR, False)) else 0
        for name, value in settings.items():
            if callable(value) or isinstance(value, dict):
                raise TypeError(f"NativeProducer does not take {name!r} (a callback or a nested config)")
        c_conf = txb.conf_new()
        for name, value in settings.items():
            if txb.conf_set(c_conf, str(name).encode(), _conf_value(value).encode(), errstr, sizeof(errstr)) != 0:
                txb.conf_destroy(c_conf)
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, errstr.decode("utf-8", "replace")))
        self.state.owner = <PyObject *>self
        txb.conf_set_opaque(c_conf, &self.state)
        txb.conf_set_dr_msg_cb(c_conf, _on_delivery)
        txb.conf_set_error_cb(c_conf, _on_error)
        self.rk = txb.new_(RD_KAFKA_PRODUCER, c_conf, errstr, sizeof(errstr))  # owns c_conf on success
        if self.rk == NULL:
            txb.conf_destroy(c_conf)
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, errstr.decode("utf-8", "replace")))

    def __dealloc__(self):
        if self.rk == NULL:
            return
        self.state.closing = 1
        with nogil:
            txb_sender_stop(&self._sender)
        txb_holds_free(&self.state.holds)  # never sent: the caller did not wait for them
        for handle in self._topics.values():
            txb.topic_destroy(<void *><uintptr_t>handle)
        with nogil:
            txb.destroy(self.rk)
        self.rk = NULL

    # -- callbacks, run with the GIL from inside poll/flush -------------------------------------

    cdef void _queue_report(self, const txb_message_t *msg) noexcept:
        cdef uintptr_t tag = <uintptr_t>msg._private
        try:
            error = None if msg.err == 0 else KafkaError(msg.err, _err_name(msg.err))
            record = DeliveryReport(
                txb.topic_name(msg.rkt).decode("utf-8", "replace"),
                msg.partition,
                msg.offset,
                None if msg.key == NULL else PyBytes_FromStringAndSize(<char *>msg.key, msg.key_len),
                None if msg.payload == NULL else PyBytes_FromStringAndSize(<char *>msg.payload, msg.len),
                error,
            )
            self._reports.append((tag & SLOT_MASK, error, record, tag >> 32, tag & HELD_TAG))
        except BaseException as exc:  # never into librdkafka's thread; MemoryError is all that is left
            self._reports.append(
                (0, KafkaError(KafkaError._FAIL, f"delivery report lost: {exc!r}"), None, tag >> 32, tag & HELD_TAG)
            )

    cdef void _queue_error(self, int err, const char *reason, int fatal) noexcept:
        try:
            self._reports.append((None, KafkaError(err, reason.decode("utf-8", "replace"), fatal=bool(fatal)), None, 0, 0))
        except BaseException:
            pass

    cdef _run_reports(self):
        """The queued reports in order, each record counted off its epoch once its report ran; then,
        with nothing queued anywhere, the callback table is cleared."""
        cdef uint64_t outer
        reports = self._reports
        while reports:
            slot, error, record, epoch, held = reports.popleft()
            if slot is None:
                if self._error_cb is not None:
                    self._error_cb(error)
                continue
            if error is not None:  # before its epoch can settle: no held record goes past a failure
                txb_holds_block(&self.state.holds)
            outer, self._report_epoch = self._report_epoch, epoch  # a report may poll, and run others
            try:
                if slot == 0:  # a report that could not be built
                    raise KafkaException(error)
                callback = self._callbacks.get(slot)
                if callback is None:
                    callback = self._pinned.get(slot)
                if callback is not None:
                    callback(error, record)
            finally:
                self._report_epoch = outer
                txb_count_add(&self.state.in_flight[<uintptr_t>epoch & RING_MASK], -1)
                if not held:
                    txb_count_add(&self.state.plain[<uintptr_t>epoch & RING_MASK], -1)
        self._release_held()  # those the reports just counted off were the last for
        if txb.outq_len(self.rk) == 0 and not txb_holds_count(&self.state.holds):
            self._callbacks.clear()
            self._last_callback = None

    # -- the Producer calls -----------------------------------------------------------------------

    cdef void *_topic(self, str topic) except NULL:
        if topic is self._last_topic:  # the common case: a run of changes to one topic
            return self._last_rkt
        handle = self._topics.get(topic)
        if handle is not None:
            self._last_topic, self._last_rkt = topic, <void *><uintptr_t>handle
            return self._last_rkt
        cdef void *rkt = txb.topic_new(self.rk, topic.encode(), NULL)
        if rkt == NULL:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"cannot use topic {topic!r}"))
        self._topics[topic] = <uintptr_t>rkt
        return rkt

    def produce(self, str topic, value=None, key=None, int partition=-1, on_delivery=None, timestamp=0,
                headers=None):
        """Queue one record (positional order as confluent-kafka's). Raises BufferError when the queue
        is full, KafkaException(KafkaError) when librdkafka refuses the record."""
        cdef void *rkt = self._topic(topic)
        cdef uintptr_t slot = 0
        cdef void *hdrs = NULL
        cdef void *error
        cdef int code
        if timestamp:
            raise TypeError("NativeProducer.produce does not take a timestamp")
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value)
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key)
        if on_delivery is not None:
            slot = self._slot_for(on_delivery)
        if headers:
            hdrs = _headers(headers)
        error = self._enqueue(
            rkt,
            partition,
            NULL if value is None else PyBytes_AS_STRING(value),
            0 if value is None else PyBytes_GET_SIZE(value),
            NULL if key is None else PyBytes_AS_STRING(key),
            0 if key is None else PyBytes_GET_SIZE(key),
            slot,
            hdrs,
        )
        if error == NULL:
            return
        code = txb.error_code(error)
        reason = txb.error_string(error).decode("utf-8", "replace")
        txb.error_destroy(error)
        if hdrs != NULL:
            txb.headers_destroy(hdrs)
        if code == ERR_QUEUE_FULL:
            raise BufferError(reason)
        raise KafkaException(KafkaError(code, reason))

    def produce_run(self, str topic, list records, Py_ssize_t start, Py_ssize_t stop, on_delivery=None):
        """Queue records[start:stop], each a tuple (key: str, value: bytes, ...), in order, on the
        partitioner's partition: what produce(topic, value, key.encode(), -1, on_delivery) would do
        for each, in one call (a paced source writes ~100 records a lap; a Python call each was most
        of its loop). Returns the index of the first record not queued, `stop` when all were: the
        caller hands that one to produce(), which waits for room or raises why."""
        cdef void *rkt
        cdef uintptr_t slot = 0 if on_delivery is None else self._slot_for(on_delivery)
        cdef Py_ssize_t i, key_len
        cdef const char *key
        cdef tuple record
        cdef str xid
        cdef bytes value
        if self.rk == NULL:
            raise RuntimeError("the producer is closed")
        if start < 0 or stop > len(records):
            raise IndexError(f"records[{start}:{stop}] is outside the list's {len(records)}")
        rkt = self._topic(topic)
        for i in range(start, stop):
            record = records[i]
            xid = record[0]
            value = record[1]
            if value is None:
                raise TypeError(f"records[{i}] has no value: produce() writes a tombstone")
            key = PyUnicode_AsUTF8AndSize(xid, &key_len)
            if self._produce_c(rkt, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), key, key_len, slot):
                return i
        return max(start, stop)

    cdef uintptr_t _slot_for(self, object on_delivery) except? 0:
        """The callback slot a record carries: one per callback, not per record."""
        if on_delivery is not self._last_callback:
            self._last_slot = self._next_slot
            self._next_slot += 1
            self._callbacks[self._last_slot] = on_delivery
            self._last_callback = on_delivery
        return self._last_slot & SLOT_MASK

    cdef void *_enqueue(self, void *rkt, int32_t partition, const char *value, Py_ssize_t value_len,
                        const char *key, Py_ssize_t key_len, uintptr_t slot, void *hdrs) noexcept:
        """One record into librdkafka's queue, counted in the open epoch (or the failure report's):
        NULL, or librdkafka's error (the caller destroys it; the record is not counted)."""
        cdef uint64_t epoch = self._report_epoch or self._epoch
        cdef int64_t *in_flight = &self.state.in_flight[epoch & RING_MASK]
        cdef int64_t *plain = &self.state.plain[epoch & RING_MASK]
        cdef void *error
        txb_count_add(in_flight, 1)
        txb_count_add(plain, 1)
        self._produced_in_open = True
        error = txb_produce(self.rk, rkt, partition, value, value_len, key, key_len,
                            <void *>(((epoch & EPOCH_MASK) << 32) | slot), hdrs)
        if error != NULL:
            txb_count_add(in_flight, -1)
            txb_count_add(plain, -1)
        return error

    cdef int _produce_c(self, void *rkt, const char *value, Py_ssize_t value_len, const char *key,
                        Py_ssize_t key_len, uintptr_t slot) noexcept:
        """produce() from C, for a ChangeSender: 0 when queued, else librdkafka's error code (the
        caller hands the record to the Python path, which raises or waits as produce() does)."""
        cdef void *error
        cdef int code
        if self.rk == NULL:
            return -1
        error = self._enqueue(rkt, -1, value, value_len if value != NULL else 0, key, key_len, slot, NULL)
        if error == NULL:
            return 0
        code = txb.error_code(error)
        txb.error_destroy(error)
        return code if code != 0 else -1

    def change_sender(self, str topic, on_delivery):
        """A ChangeSender capsule (processor/core/_emit.pxi) producing to topic with the partitioner's
        partition and on_delivery as every record's callback: the emitter hands each change over in
        C, from the buffers it was written in (librdkafka copies it)."""
        cdef ChangeSender sender = ChangeSender.__new__(ChangeSender)
        sender.producer = self
        sender.rkt = self._topic(topic)
        sender.slot = self._next_slot & SLOT_MASK
        self._next_slot += 1
        self._pinned[sender.slot] = on_delivery
        sender.c.send = _send_change
        sender.c.ctx = <void *>sender
        capsule = PyCapsule_New(<void *>&sender.c, _CHANGE_SENDER, _release_sender)
        Py_INCREF(sender)  # the capsule's: released by its destructor
        PyCapsule_SetContext(capsule, <void *>sender)
        return capsule

    def poll(self, timeout=None):
        """Serve delivery and error reports for up to timeout seconds; returns how many librdkafka served."""
        cdef int ms = _timeout_ms(timeout)
        cdef int served
        if self._reports:
            self._run_reports()  # left by a callback that raised
        with nogil:
            served = txb_serve_poll(&self._sender, txb.poll, self.rk, ms)
        self._run_reports()
        return served

    cdef void _release_held(self) noexcept:
        if txb_holds_count(&self.state.holds):
            with nogil:
                txb_holds_release(&self.state.holds, self.rk, self.state.plain, RING_MASK)

    def flush(self, timeout=None):
        """Wait until every record is acknowledged and its report ran (callbacks may produce more);
        returns how many are left when timeout runs out."""
        cdef int ms
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        if self._reports:
            self._run_reports()
        while True:
            ms = -1 if deadline is None else max(0, <int>((deadline - time.monotonic()) * 1000))
            with nogil:
                txb_serve_flush(&self._sender, txb.flush, self.rk, ms)
            self._run_reports()
            left = len(self)
            if left == 0 or (deadline is not None and time.monotonic() >= deadline):
                return left
            if txb.outq_len(self.rk) == 0 and not self._reports:
                return left  # only held records, stopped by a failure report: reclaim_held() takes them

    def send_now(self):
        """Have librdkafka send every record queued so far without waiting out linger.ms, and return
        at once: the acknowledgements come in with a later poll() or flush(). A thread of the
        producer's own flushes for at most linger.ms (librdkafka sends immediately while a flush
        waits, so records produced meanwhile go at once too); a call while it does asks for one more."""
        cdef int err
        if self.rk == NULL:
            raise RuntimeError("the producer is closed")
        with nogil:
            err = txb_sender_kick(&self._sender, self.rk, txb.flush, self._linger_ms)
        if err:
            raise OSError(err, "cannot start the producer's sending thread")

    # -- settlement by epochs ------------------------------------------------------------------------

    @property
    def epoch(self):
        """The open epoch: the records produced now carry it (a failure report's, those it produces)."""
        return self._epoch

    def next_epoch(self):
        """Close the open epoch and return its number; the records produced from now on carry the next.
        Waits (serving reports) while EPOCH_RING epochs are unsettled, rather than reuse a count."""
        return self._close_epoch()

    cdef uint64_t _close_epoch(self) except? 0:
        cdef uint64_t closed = self._epoch
        while closed + 1 - self._settle_closed() >= EPOCH_RING:
            self.poll(0.1)
        self._epoch = closed + 1
        self._produced_in_open = False
        return closed

    def settled_epoch(self):
        """The last closed epoch up to which every record is acknowledged, or failed and its report ran
        (0: none yet). Serves nothing and does not wait: poll() first to take in the latest reports."""
        return self._settle_closed() - 1

    cdef uint64_t _settle_closed(self):
        """Move past the closed epochs whose records are all reported; the oldest one that is not."""
        while self._unsettled < self._epoch and txb_count_get(&self.state.in_flight[self._unsettled & RING_MASK]) == 0:
            self._unsettled += 1
        return self._unsettled

    def __len__(self):
        """Records not yet acknowledged, plus reports not yet run (as confluent-kafka counts them), plus
        held records."""
        return txb.outq_len(self.rk) + len(self._reports) + txb_holds_count(&self.state.holds)

    # -- held records ------------------------------------------------------------------------------

    def hold(self, str topic, bytes value, bytes key not None, on_delivery=None):
        """Queue a record that goes to librdkafka only once every record produced before it is
        acknowledged, without waiting for that: the thread that serves the last acknowledgement hands
        it over, so a send_now() flush under way sends it at once. Held records keep their order, and
        one does not wait for those held before it. Each is counted in the open epoch from now on (a
        record produced since the last hold closes the epoch first, so that the hold waits for it),
        and len() counts it. A failure report stops the releases: reclaim_held() then takes every held
        record back."""
        cdef void *rkt = self._topic(topic)
        cdef uintptr_t slot = 0
        cdef uint64_t after
        if self.rk == NULL:
            raise RuntimeError("the producer is closed")
        if on_delivery is not None:
            slot = self._slot_for(on_delivery)
        after = self._close_epoch() if self._produced_in_open else self._epoch - 1
        txb_count_add(&self.state.in_flight[self._epoch & RING_MASK], 1)
        if txb_holds_add(
            &self.state.holds,
            self._settle_closed(),
            rkt,
            NULL if value is None else PyBytes_AS_STRING(value),
            0 if value is None else PyBytes_GET_SIZE(value),
            PyBytes_AS_STRING(key),
            PyBytes_GET_SIZE(key),
            <void *>(((self._epoch & EPOCH_MASK) << 32) | HELD_TAG | slot),
            after,
        ) != 0:
            txb_count_add(&self.state.in_flight[self._epoch & RING_MASK], -1)
            raise MemoryError()
        self._release_held()  # its epochs may be settled already

    def reclaim_held(self):
        """After a failure report ran (or librdkafka refused a held record): take every held record
        back, unsent, counted off its epoch, and let later holds go again. Returns how many (the last
        ones held, in order); 0 while nothing stopped the releases."""
        return txb_holds_reclaim(&self.state.holds, self.state.in_flight, RING_MASK)

    # -- transactions (exactly_once): librdkafka's calls, errors as confluent-kafka raises them ------

    cdef _wait_for(self, void *(*call)(void *rk, int timeout_ms) noexcept nogil, object timeout):
        """One blocking transactional call, the GIL released while librdkafka waits."""
        cdef int ms = _timeout_ms(timeout)
        cdef void *error
        with nogil:
            error = call(self.rk, ms)
        _raise_if(error)

    def init_transactions(self, timeout=None):
        self._wait_for(txb.init_transactions, timeout)

    def begin_transaction(self):
        _raise_if(txb.begin_transaction(self.rk))

    def commit_transaction(self, timeout=None):
        self._wait_for(txb.commit_transaction, timeout)

    def abort_transaction(self, timeout=None):
        self._wait_for(txb.abort_transaction, timeout)

    def send_offsets_to_transaction(self, positions, bytes group_metadata not None, timeout=None):
        """positions: TopicPartitions with the offsets to commit; group_metadata: the consumer's
        consumer_group_metadata() (confluent-kafka serialises it with librdkafka's writer)."""
        cdef int ms = _timeout_ms(timeout)
        cdef void *error
        cdef void *metadata = NULL
        cdef void *offsets = txb.topic_partition_list_new(len(positions))
        cdef bytes topic
        try:
            for tp in positions:
                topic = tp.topic.encode()
                txb.topic_partition_list_add(offsets, topic, tp.partition)
                txb.topic_partition_list_set_offset(offsets, topic, tp.partition, tp.offset)
            _raise_if(txb.consumer_group_metadata_read(
                &metadata, PyBytes_AS_STRING(group_metadata), PyBytes_GET_SIZE(group_metadata)
            ))
            with nogil:
                error = txb.send_offsets_to_transaction(self.rk, offsets, metadata, ms)
            _raise_if(error)
        finally:
            txb.topic_partition_list_destroy(offsets)
            if metadata != NULL:
                txb.consumer_group_metadata_destroy(metadata)

    def list_topics(self, topic=None, timeout=None):
        """A metadata request: {topic: partition count}, for one topic or all. Raises KafkaException
        when the cluster does not answer within timeout (unlike confluent-kafka, no ClusterMetadata)."""
        cdef const txb_metadata_t *md = NULL
        cdef void *rkt = NULL if topic is None else self._topic(topic)
        cdef int ms = _timeout_ms(timeout)
        cdef int code
        cdef int i
        with nogil:
            code = txb.metadata(self.rk, 1 if rkt == NULL else 0, rkt, &md, ms)
        if code != 0:
            raise KafkaException(KafkaError(code, _err_name(code)))
        partitions = {}
        try:
            for i in range(md.topic_cnt):
                if md.topics[i].err == 0:
                    partitions[md.topics[i].topic.decode("utf-8", "replace")] = md.topics[i].partition_cnt
        finally:
            txb.metadata_destroy(md)
        return partitions


cdef int _raise_if(void *error) except -1:
    """KafkaException(KafkaError) for an rd_kafka_error_t, with its fatal, retriable and abort flags."""
    if error == NULL:
        return 0
    code = txb.error_code(error)
    reason = txb.error_string(error).decode("utf-8", "replace")
    fatal, retriable = txb.error_is_fatal(error), txb.error_is_retriable(error)
    requires_abort = txb.error_txn_requires_abort(error)
    txb.error_destroy(error)
    raise KafkaException(
        KafkaError(code, reason, fatal=bool(fatal), retriable=bool(retriable), txn_requires_abort=bool(requires_abort))
    )


cdef bytes _as_bytes(object data):
    if isinstance(data, str):
        return (<str>data).encode()
    return bytes(data)


cdef void *_headers(object headers) except NULL:
    """rd_kafka_headers_t from [(name, value)] or {name: value}; values bytes, str or None."""
    items = headers.items() if isinstance(headers, dict) else headers
    cdef void *hdrs = txb.headers_new(8)
    cdef bytes name_b
    cdef bytes value_b
    try:
        for name, value in items:
            name_b = name.encode() if isinstance(name, str) else bytes(name)
            if value is None:
                txb.header_add(hdrs, PyBytes_AS_STRING(name_b), PyBytes_GET_SIZE(name_b), NULL, 0)
            else:
                value_b = _as_bytes(value)
                txb.header_add(
                    hdrs, PyBytes_AS_STRING(name_b), PyBytes_GET_SIZE(name_b),
                    PyBytes_AS_STRING(value_b), PyBytes_GET_SIZE(value_b),
                )
    except BaseException:
        txb.headers_destroy(hdrs)
        raise
    return hdrs


cdef bint _flag(object value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


cdef str _conf_value(object value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
