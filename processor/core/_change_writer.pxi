# Included by _avro_fast.pyx (one extension, shared C types): ChangeWriter: a ChangeEvent spliced from a buffered RawEvent's bytes.

_VALUE = ("union", ("null", "boolean", "long", "double", "string", "bytes"))
_ROW = ("union", ("null", ("map", _VALUE)))
_OPT_STR = ("union", ("null", "string"))
# The op enum's symbols are the schema's own (more may be appended); the rest must match.
CHANGE_SIGNATURE = ("record", (
    ("event_id", "string"),
    ("op", ("enum", "*")),
    ("ts_ms", "long"),
    ("key", _ROW),
    ("before", _ROW),
    ("after", _ROW),
    ("ddl", _OPT_STR),
    ("source", ("record", (
        ("table", _OPT_STR), ("xid", "string"), ("seq", "long"), ("scn", "long"), ("commit_scn", "long"),
        ("commit_ts_ms", "long"), ("thread", "int"), ("user", _OPT_STR), ("row_id", _OPT_STR),
        ("attrs", ("map", "string")),
    ))),
    ("transaction", ("union", ("null", ("record", (
        ("id", "string"), ("total_order", "long"), ("data_collection_order", "long"),
    ))))),
))
RAW_BODY_SIGNATURE = (("key", _ROW), ("before", _ROW), ("after", _ROW), ("ddl", _OPT_STR))

cdef dict CHANGE_OP_INDEX = None    # RawEvent op -> ChangeOp symbol index
cdef int RAW_TO_CHANGE_OP[256]      # RawEvent op enum index -> ChangeOp symbol index, -1: not a change
cdef object SPLICED_FALLBACK = None  # (head, body, tail) -> bytes through fastavro
cdef dict ENVELOPE_OP = None


def enable_change_writer(Codec raw, Codec change, dict envelope_op, spliced_fallback):
    """Check that the schemas have the layout ChangeWriter writes, and arm it."""
    global CHANGE_OP_INDEX, SPLICED_FALLBACK, ENVELOPE_OP
    fields = list(_signature(change.root)[1])
    if len(fields) < 2 or fields[1][0] != "op" or fields[1][1][0] != "enum":
        raise NotImplementedError("ChangeEvent's second field is not the op enum")
    symbols = fields[1][1][1]
    fields[1] = ("op", ("enum", "*"))
    if ("record", tuple(fields)) != CHANGE_SIGNATURE:
        raise NotImplementedError("ChangeEvent schema differs from the layout ChangeWriter writes")
    missing = sorted(set(envelope_op.values()) - set(symbols))
    if missing:
        raise NotImplementedError(f"ChangeOp lacks {missing}")
    raw_sig = _signature(raw.root)[1]
    if tuple(raw_sig[len(raw_sig) - 4:]) != RAW_BODY_SIGNATURE:
        raise NotImplementedError("RawEvent does not end with key, before, after, ddl as ChangeEvent has them")
    CHANGE_OP_INDEX = {raw_op: symbols.index(env) for raw_op, env in envelope_op.items()}
    raw_ops = (<Node>raw.root.children[raw.root.names.index("op")]).symbols
    for k in range(256):
        RAW_TO_CHANGE_OP[k] = CHANGE_OP_INDEX.get(raw_ops[k], -1) if k < len(raw_ops) else -1
    ENVELOPE_OP = dict(envelope_op)
    SPLICED_FALLBACK = spliced_fallback


cdef inline Py_ssize_t _decimal_at_end(char* digits, int64_t v) noexcept:
    """v in decimal, as str(v), in the last bytes of digits (24 bytes); how many."""
    cdef Py_ssize_t nd = 0
    cdef uint64_t u = <uint64_t>v if v >= 0 else 0 - <uint64_t>v
    while True:
        digits[23 - nd] = <char>(48 + u % 10)
        nd += 1
        u //= 10
        if u == 0:
            break
    if v < 0:
        digits[23 - nd] = 45  # "-"
        nd += 1
    return nd


cdef bytes _event_id_prefix(object thread, object commit_scn, str xid):
    """UTF-8 of f"{thread}:{commit_scn}:{xid}:", the event ids' common prefix. Once per emitted
    transaction: the f-string and its encode were ~1,700 instructions of a transaction's ~18,000
    (bench.instructions); written here from the ints and the xid's UTF-8 when they are plain."""
    cdef int64_t t, scn
    cdef Py_ssize_t nt, ns, nx
    cdef const char* x
    cdef char tdigits[24]
    cdef char sdigits[24]
    cdef bytes out
    cdef char* p
    if exact_int64(thread, &t) and exact_int64(commit_scn, &scn):
        x = PyUnicode_AsUTF8AndSize(xid, &nx)
        if x == NULL:  # a lone surrogate: surrogatepass, below
            PyErr_Clear()
        else:
            nt, ns = _decimal_at_end(tdigits, t), _decimal_at_end(sdigits, scn)
            out = PyBytes_FromStringAndSize(NULL, nt + ns + nx + 3)
            p = PyBytes_AS_STRING(out)
            memcpy(p, tdigits + 24 - nt, nt)
            p[nt] = 58  # ":"
            memcpy(p + nt + 1, sdigits + 24 - ns, ns)
            p[nt + 1 + ns] = 58
            memcpy(p + nt + ns + 2, x, nx)
            p[nt + ns + nx + 2] = 58
            return out
    return f"{thread}:{commit_scn}:{xid}:".encode("utf-8", "surrogatepass")


cdef class ChangeWriter:
    """ChangeEvent bytes for the changes of one committed transaction.

    The per-transaction parts (xid, commit position, thread, user) are encoded once; encode()
    writes the head, copies raw[body_at:] (the RawEvent's key/before/after/ddl, laid out as in
    ChangeEvent) and writes the source and transaction blocks.
    """

    cdef readonly str xid
    cdef readonly object commit_scn, commit_ts_ms, thread, user
    cdef bytes _xid          # encoded string
    cdef bytes _commit       # commit_scn, commit_ts_ms, thread, user
    cdef bytes _id_prefix    # UTF-8 of "<thread>:<commit_scn>:<xid>:"
    cdef readonly bint _fast

    def __init__(self, str xid, commit_scn, commit_ts_ms, thread, user):
        cdef Writer w
        if CHANGE_OP_INDEX is None:
            raise RuntimeError("enable_change_writer was not called")
        self.xid, self.commit_scn, self.commit_ts_ms, self.thread, self.user = xid, commit_scn, commit_ts_ms, thread, user
        self._id_prefix = _event_id_prefix(thread, commit_scn, xid)
        w_init(&w)
        try:
            self._fast = (w_str(&w, xid) == 0)
            if self._fast:
                self._xid = w_result(&w)
                w.len = 0
                self._fast = (encode_node(_LONG, commit_scn, &w) == 0 and encode_node(_LONG, commit_ts_ms, &w) == 0
                              and encode_node(_INT, thread, &w) == 0 and encode_node(_OPT_STRING, user, &w) == 0
                              and PyLong_CheckExact(thread) and PyLong_CheckExact(commit_scn))
                self._commit = w_result(&w)
        finally:
            w_free(&w)

    def encode(self, str op, seq, scn, ts_ms, table, row_id, attrs, bytes raw not None, Py_ssize_t body_at,
               total_order, collection_order):
        """The ChangeEvent of one change (op is the RawEvent op); equal to fastavro's encoding."""
        return self._encode(op, seq, scn, ts_ms, table, row_id, attrs, raw, body_at, total_order, collection_order)

    cdef object _encode(self, str op, seq, scn, ts_ms, table, row_id, attrs, bytes raw, Py_ssize_t body_at,
                        total_order, collection_order):
        cdef Writer w
        cdef int64_t s
        cdef char digits[24]
        cdef Py_ssize_t nd = 0, i
        cdef object op_index = CHANGE_OP_INDEX.get(op)
        if op_index is None:
            raise KeyError(op)
        if body_at < 0 or body_at > PyBytes_GET_SIZE(raw):
            raise ValueError(f"body_at {body_at} outside the {PyBytes_GET_SIZE(raw)}-byte record")
        if self._fast and exact_int64(seq, &s):
            w_init(&w)
            try:
                nd = _decimal_at_end(digits, s)  # event_id: "<thread>:<commit_scn>:<xid>:<seq>"
                w_long(&w, PyBytes_GET_SIZE(self._id_prefix) + nd)
                w_raw(&w, PyBytes_AS_STRING(self._id_prefix), PyBytes_GET_SIZE(self._id_prefix))
                w_raw(&w, digits + 24 - nd, nd)
                w_long(&w, <int64_t>op_index)
                if encode_node(_LONG, ts_ms, &w) == 0:
                    w_raw(&w, PyBytes_AS_STRING(raw) + body_at, PyBytes_GET_SIZE(raw) - body_at)
                    if (encode_node(_OPT_STRING, table, &w) == 0
                            and w_raw(&w, PyBytes_AS_STRING(self._xid), PyBytes_GET_SIZE(self._xid)) == 0
                            and encode_node(_LONG, seq, &w) == 0 and encode_node(_LONG, scn, &w) == 0
                            and w_raw(&w, PyBytes_AS_STRING(self._commit), PyBytes_GET_SIZE(self._commit)) == 0
                            and encode_node(_OPT_STRING, row_id, &w) == 0
                            and encode_node(_STRING_MAP, attrs, &w) == 0):
                        w_long(&w, 1)  # transaction: the record branch
                        w_raw(&w, PyBytes_AS_STRING(self._xid), PyBytes_GET_SIZE(self._xid))
                        if encode_node(_LONG, total_order, &w) == 0 and encode_node(_LONG, collection_order, &w) == 0:
                            return w_result(&w)
            finally:
                w_free(&w)
        head = {"event_id": f"{self.thread}:{self.commit_scn}:{self.xid}:{seq}", "op": ENVELOPE_OP[op],
                "ts_ms": ts_ms}
        tail = {
            "source": {"table": table, "xid": self.xid, "seq": seq, "scn": scn, "commit_scn": self.commit_scn,
                       "commit_ts_ms": self.commit_ts_ms, "thread": self.thread, "user": self.user,
                       "row_id": row_id, "attrs": attrs},
            "transaction": {"id": self.xid, "total_order": total_order, "data_collection_order": collection_order},
        }
        return SPLICED_FALLBACK(head, memoryview(raw)[body_at:], tail)


cdef inline int _w_opt_str(Writer* w, const char* p, Py_ssize_t n) except -1:
    """["null", "string"] from a string in place (NULL: null)."""
    if p == NULL:
        return w_long(w, 0)
    w_long(w, 1)
    w_long(w, n)
    return w_raw(w, p, n)


cdef int write_change_in_place(ChangeWriter cw, Writer* w, int op_index, int64_t seq, int64_t scn, int64_t ts_ms,
                               const char* table, Py_ssize_t table_n, const char* row_id, Py_ssize_t row_id_n,
                               bytes raw, Py_ssize_t body_at, int64_t total_order,
                               int64_t collection_order) except -1:
    """ChangeWriter._encode's fast path, into w, for fields read in place from the raw bytes
    (ChangeStream._write_in_place), with empty attrs: the same bytes, no Python object for the fields."""
    cdef char digits[24]
    cdef Py_ssize_t nd = _decimal_at_end(digits, seq)  # event_id: "<thread>:<commit_scn>:<xid>:<seq>"
    w_long(w, PyBytes_GET_SIZE(cw._id_prefix) + nd)
    w_raw(w, PyBytes_AS_STRING(cw._id_prefix), PyBytes_GET_SIZE(cw._id_prefix))
    w_raw(w, digits + 24 - nd, nd)
    w_long(w, op_index)
    w_long(w, ts_ms)
    w_raw(w, PyBytes_AS_STRING(raw) + body_at, PyBytes_GET_SIZE(raw) - body_at)
    _w_opt_str(w, table, table_n)
    w_raw(w, PyBytes_AS_STRING(cw._xid), PyBytes_GET_SIZE(cw._xid))
    w_long(w, seq)
    w_long(w, scn)
    w_raw(w, PyBytes_AS_STRING(cw._commit), PyBytes_GET_SIZE(cw._commit))
    _w_opt_str(w, row_id, row_id_n)
    w_long(w, 0)  # attrs: empty
    w_long(w, 1)  # transaction: the record branch
    w_raw(w, PyBytes_AS_STRING(cw._xid), PyBytes_GET_SIZE(cw._xid))
    w_long(w, total_order)
    w_long(w, collection_order)
    return 0


cdef Node _LONG = _compile("long", {}, "", set())
cdef Node _INT = _compile("int", {}, "", set())
cdef Node _OPT_STRING = _compile(["null", "string"], {}, "", set())
cdef Node _STRING_MAP = _compile({"type": "map", "values": "string"}, {}, "", set())
