# librdkafka's C API as confluent-kafka links it, shared by the extensions that call it directly
# (included by _rdkafka_producer.pyx and _rdkafka_fetch.pyx; each gets its own table).
#
# The functions are confluent-kafka's own librdkafka, found through its extension module (dlsym on
# confluent_kafka.cimpl, which links it), so no header or second copy is needed to build or run; the
# few types used are declared below from rdkafka.h, whose ABI is stable across 1.x and 2.x.

cdef extern from "dlfcn.h" nogil:
    void *dlopen(const char *filename, int flags)
    char *dlerror()
    int RTLD_NOLOAD
    int RTLD_LAZY

cdef extern from *:
    """
    #include <sys/types.h>
    /* From rdkafka.h (rd_kafka_message_t, rd_kafka_vu_t, rd_kafka_metadata_t), reduced to what is used. */
    typedef struct { int err; void *rkt; int32_t partition; void *payload; size_t len; void *key;
                     size_t key_len; int64_t offset; void *_private; } txb_message_t;
    typedef struct { int vtype; union { const char *cstr; void *rkt; int i; int32_t i32; int64_t i64;
                     struct { void *ptr; size_t size; } mem; void *headers; void *ptr; char _pad[64]; } u; } txb_vu_t;
    typedef struct { char *topic; int partition_cnt; void *partitions; int err; } txb_metadata_topic_t;
    typedef struct { int broker_cnt; void *brokers; int topic_cnt; txb_metadata_topic_t *topics;
                     int32_t orig_broker_id; char *orig_broker_name; } txb_metadata_t;
    typedef void (*txb_dr_cb_t)(void *rk, const txb_message_t *msg, void *opaque);
    typedef void (*txb_error_cb_t)(void *rk, int err, const char *reason, void *opaque);
    typedef void (*txb_event_cb_t)(void *rk, void *opaque);
    typedef struct {
        void *(*conf_new)(void);
        int (*conf_set)(void *conf, const char *name, const char *value, char *errstr, size_t errstr_size);
        void (*conf_set_dr_msg_cb)(void *conf, txb_dr_cb_t cb);
        void (*conf_set_error_cb)(void *conf, txb_error_cb_t cb);
        void (*conf_set_opaque)(void *conf, void *opaque);
        void (*conf_destroy)(void *conf);
        void *(*new_)(int type, void *conf, char *errstr, size_t errstr_size);
        void (*destroy)(void *rk);
        void *(*topic_new)(void *rk, const char *topic, void *conf);
        void (*topic_destroy)(void *rkt);
        const char *(*topic_name)(const void *rkt);
        void *(*produceva)(void *rk, const txb_vu_t *vus, size_t cnt);
        int (*error_code)(const void *error);
        const char *(*error_string)(const void *error);
        void (*error_destroy)(void *error);
        int (*poll)(void *rk, int timeout_ms);
        int (*flush)(void *rk, int timeout_ms);
        int (*outq_len)(void *rk);
        int (*fatal_error)(void *rk, char *errstr, size_t errstr_size);
        const char *(*err2str)(int err);
        void *(*headers_new)(size_t initial_count);
        int (*header_add)(void *hdrs, const char *name, ssize_t name_size, const void *value, ssize_t value_size);
        void (*headers_destroy)(void *hdrs);
        int (*metadata)(void *rk, int all_topics, void *only_rkt, const txb_metadata_t **metadatap, int timeout_ms);
        void (*metadata_destroy)(const txb_metadata_t *metadata);
        int (*version)(void);
        int (*error_is_fatal)(const void *error);
        int (*error_is_retriable)(const void *error);
        int (*error_txn_requires_abort)(const void *error);
        void *(*init_transactions)(void *rk, int timeout_ms);
        void *(*begin_transaction)(void *rk);
        void *(*commit_transaction)(void *rk, int timeout_ms);
        void *(*abort_transaction)(void *rk, int timeout_ms);
        void *(*send_offsets_to_transaction)(void *rk, const void *offsets, const void *cgmetadata, int timeout_ms);
        void *(*consumer_group_metadata_read)(void **cgmdp, const void *buffer, size_t size);
        void (*consumer_group_metadata_destroy)(void *cgmd);
        void *(*topic_partition_list_new)(int size);
        void *(*topic_partition_list_add)(void *rktparlist, const char *topic, int32_t partition);
        int (*topic_partition_list_set_offset)(void *rktparlist, const char *topic, int32_t partition, int64_t offset);
        void (*topic_partition_list_destroy)(void *rktparlist);
        int (*type_)(const void *rk);
        void *(*queue_new)(void *rk);
        void (*queue_destroy)(void *rkqu);
        void *(*queue_get_partition)(void *rk, const char *topic, int32_t partition);
        void *(*queue_get_consumer)(void *rk);
        void (*queue_forward)(void *src, void *dst);
        void (*queue_yield)(void *rkqu);
        void (*queue_cb_event_enable)(void *rkqu, txb_event_cb_t event_cb, void *opaque);
        ssize_t (*consume_batch_queue)(void *rkqu, int timeout_ms, txb_message_t **rkmessages, size_t size);
        void (*message_destroy)(txb_message_t *rkmessage);
    } txb_api_t;
    static txb_api_t txb;

    /* Fill txb from lib (a dlopen handle); NULL, or the first name lib does not have. */
    #include <dlfcn.h>
    #define TXB_RESOLVE(field, name) if (!(*(void **)&txb.field = dlsym(lib, name))) return name;
    static const char *txb_load(void *lib) {
        TXB_RESOLVE(conf_new, "rd_kafka_conf_new")
        TXB_RESOLVE(conf_set, "rd_kafka_conf_set")
        TXB_RESOLVE(conf_set_dr_msg_cb, "rd_kafka_conf_set_dr_msg_cb")
        TXB_RESOLVE(conf_set_error_cb, "rd_kafka_conf_set_error_cb")
        TXB_RESOLVE(conf_set_opaque, "rd_kafka_conf_set_opaque")
        TXB_RESOLVE(conf_destroy, "rd_kafka_conf_destroy")
        TXB_RESOLVE(new_, "rd_kafka_new")
        TXB_RESOLVE(destroy, "rd_kafka_destroy")
        TXB_RESOLVE(topic_new, "rd_kafka_topic_new")
        TXB_RESOLVE(topic_destroy, "rd_kafka_topic_destroy")
        TXB_RESOLVE(topic_name, "rd_kafka_topic_name")
        TXB_RESOLVE(produceva, "rd_kafka_produceva")
        TXB_RESOLVE(error_code, "rd_kafka_error_code")
        TXB_RESOLVE(error_string, "rd_kafka_error_string")
        TXB_RESOLVE(error_destroy, "rd_kafka_error_destroy")
        TXB_RESOLVE(poll, "rd_kafka_poll")
        TXB_RESOLVE(flush, "rd_kafka_flush")
        TXB_RESOLVE(outq_len, "rd_kafka_outq_len")
        TXB_RESOLVE(fatal_error, "rd_kafka_fatal_error")
        TXB_RESOLVE(err2str, "rd_kafka_err2str")
        TXB_RESOLVE(headers_new, "rd_kafka_headers_new")
        TXB_RESOLVE(header_add, "rd_kafka_header_add")
        TXB_RESOLVE(headers_destroy, "rd_kafka_headers_destroy")
        TXB_RESOLVE(metadata, "rd_kafka_metadata")
        TXB_RESOLVE(metadata_destroy, "rd_kafka_metadata_destroy")
        TXB_RESOLVE(version, "rd_kafka_version")
        TXB_RESOLVE(error_is_fatal, "rd_kafka_error_is_fatal")
        TXB_RESOLVE(error_is_retriable, "rd_kafka_error_is_retriable")
        TXB_RESOLVE(error_txn_requires_abort, "rd_kafka_error_txn_requires_abort")
        TXB_RESOLVE(init_transactions, "rd_kafka_init_transactions")
        TXB_RESOLVE(begin_transaction, "rd_kafka_begin_transaction")
        TXB_RESOLVE(commit_transaction, "rd_kafka_commit_transaction")
        TXB_RESOLVE(abort_transaction, "rd_kafka_abort_transaction")
        TXB_RESOLVE(send_offsets_to_transaction, "rd_kafka_send_offsets_to_transaction")
        TXB_RESOLVE(consumer_group_metadata_read, "rd_kafka_consumer_group_metadata_read")
        TXB_RESOLVE(consumer_group_metadata_destroy, "rd_kafka_consumer_group_metadata_destroy")
        TXB_RESOLVE(topic_partition_list_new, "rd_kafka_topic_partition_list_new")
        TXB_RESOLVE(topic_partition_list_add, "rd_kafka_topic_partition_list_add")
        TXB_RESOLVE(topic_partition_list_set_offset, "rd_kafka_topic_partition_list_set_offset")
        TXB_RESOLVE(topic_partition_list_destroy, "rd_kafka_topic_partition_list_destroy")
        TXB_RESOLVE(type_, "rd_kafka_type")
        TXB_RESOLVE(queue_new, "rd_kafka_queue_new")
        TXB_RESOLVE(queue_destroy, "rd_kafka_queue_destroy")
        TXB_RESOLVE(queue_get_partition, "rd_kafka_queue_get_partition")
        TXB_RESOLVE(queue_get_consumer, "rd_kafka_queue_get_consumer")
        TXB_RESOLVE(queue_forward, "rd_kafka_queue_forward")
        TXB_RESOLVE(queue_yield, "rd_kafka_queue_yield")
        TXB_RESOLVE(queue_cb_event_enable, "rd_kafka_queue_cb_event_enable")
        TXB_RESOLVE(consume_batch_queue, "rd_kafka_consume_batch_queue")
        TXB_RESOLVE(message_destroy, "rd_kafka_message_destroy")
        return NULL;
    }

    """
    ctypedef struct txb_message_t:
        int err
        void *rkt
        int32_t partition
        void *payload
        size_t len
        void *key
        size_t key_len
        int64_t offset
        void *_private
    ctypedef struct txb_metadata_topic_t:
        char *topic
        int partition_cnt
        int err
    ctypedef struct txb_metadata_t:
        int topic_cnt
        txb_metadata_topic_t *topics
    ctypedef void (*txb_dr_cb_t)(void *rk, const txb_message_t *msg, void *opaque) noexcept nogil
    ctypedef void (*txb_error_cb_t)(void *rk, int err, const char *reason, void *opaque) noexcept nogil
    ctypedef void (*txb_event_cb_t)(void *rk, void *opaque) noexcept nogil
    ctypedef struct txb_api_t:
        void *(*conf_new)() nogil
        int (*conf_set)(void *conf, const char *name, const char *value, char *errstr, size_t errstr_size) nogil
        void (*conf_set_dr_msg_cb)(void *conf, txb_dr_cb_t cb) nogil
        void (*conf_set_error_cb)(void *conf, txb_error_cb_t cb) nogil
        void (*conf_set_opaque)(void *conf, void *opaque) nogil
        void (*conf_destroy)(void *conf) nogil
        void *(*new_)(int type, void *conf, char *errstr, size_t errstr_size) nogil
        void (*destroy)(void *rk) nogil
        void *(*topic_new)(void *rk, const char *topic, void *conf) nogil
        void (*topic_destroy)(void *rkt) nogil
        const char *(*topic_name)(const void *rkt) nogil
        int (*error_code)(const void *error) nogil
        const char *(*error_string)(const void *error) nogil
        void (*error_destroy)(void *error) nogil
        int (*poll)(void *rk, int timeout_ms) nogil
        int (*flush)(void *rk, int timeout_ms) nogil
        int (*outq_len)(void *rk) nogil
        int (*fatal_error)(void *rk, char *errstr, size_t errstr_size) nogil
        const char *(*err2str)(int err) nogil
        void *(*headers_new)(size_t initial_count) nogil
        int (*header_add)(void *hdrs, const char *name, Py_ssize_t name_size, const void *value,
                          Py_ssize_t value_size) nogil
        void (*headers_destroy)(void *hdrs) nogil
        int (*metadata)(void *rk, int all_topics, void *only_rkt, const txb_metadata_t **metadatap,
                        int timeout_ms) nogil
        void (*metadata_destroy)(const txb_metadata_t *metadata) nogil
        int (*version)() nogil
        int (*error_is_fatal)(const void *error) nogil
        int (*error_is_retriable)(const void *error) nogil
        int (*error_txn_requires_abort)(const void *error) nogil
        void *(*init_transactions)(void *rk, int timeout_ms) nogil
        void *(*begin_transaction)(void *rk) nogil
        void *(*commit_transaction)(void *rk, int timeout_ms) nogil
        void *(*abort_transaction)(void *rk, int timeout_ms) nogil
        void *(*send_offsets_to_transaction)(void *rk, const void *offsets, const void *cgmetadata,
                                             int timeout_ms) nogil
        void *(*consumer_group_metadata_read)(void **cgmdp, const void *buffer, size_t size) nogil
        void (*consumer_group_metadata_destroy)(void *cgmd) nogil
        void *(*topic_partition_list_new)(int size) nogil
        void *(*topic_partition_list_add)(void *rktparlist, const char *topic, int32_t partition) nogil
        int (*topic_partition_list_set_offset)(void *rktparlist, const char *topic, int32_t partition,
                                               int64_t offset) nogil
        void (*topic_partition_list_destroy)(void *rktparlist) nogil
        int (*type_)(const void *rk) nogil
        void *(*queue_new)(void *rk) nogil
        void (*queue_destroy)(void *rkqu) nogil
        void *(*queue_get_partition)(void *rk, const char *topic, int32_t partition) nogil
        void *(*queue_get_consumer)(void *rk) nogil
        void (*queue_forward)(void *src, void *dst) nogil
        void (*queue_yield)(void *rkqu) nogil
        void (*queue_cb_event_enable)(void *rkqu, txb_event_cb_t event_cb, void *opaque) nogil
        Py_ssize_t (*consume_batch_queue)(void *rkqu, int timeout_ms, txb_message_t **rkmessages, size_t size) nogil
        void (*message_destroy)(txb_message_t *rkmessage) nogil
    txb_api_t txb
    const char *txb_load(void *lib)


cdef enum:
    MIN_VERSION = 0x020000ff  # produceva and the rd_kafka_error_t API (1.6) with margin


def _load():
    """Point txb at confluent-kafka's librdkafka; ImportError when it cannot be found or is too old."""
    import confluent_kafka.cimpl as cimpl

    cdef void *lib = dlopen(cimpl.__file__.encode(), RTLD_NOLOAD | RTLD_LAZY)
    if lib == NULL:
        raise ImportError(f"cannot open {cimpl.__file__}: {(dlerror() or b'').decode()}")
    cdef const char *missing = txb_load(lib)
    if missing != NULL:
        raise ImportError(f"librdkafka has no {missing.decode()}")
    if txb.version() < MIN_VERSION:
        raise ImportError(f"librdkafka {txb.version():#x} is older than 2.0")


_load()


cdef str _err_name(int code):
    return txb.err2str(code).decode("utf-8", "replace")
