# Included by _avro_fast.pyx: the engine's fast lane for the common record, in C. It validates each
# record as make_view does but reads the few fields it needs in place (lane_scan): no RawView, no
# Python objects but the XID, so a change costs about a fifth less to buffer than through a view.
#
# PartitionEngine.apply_records hands it the poll batch of one partition. It applies records for
# as long as each is one of:
#   * a plain change of an open transaction (INSERT, UPDATE, DELETE or READ that validates, no undo
#     flag, an open transaction whose identity is known and that is not filtered, no table filter
#     configured): the raw bytes go to the batch (or the transaction's staged writes) under the
#     event key, plus the row_id and subxid index entries, exactly as PartitionEngine._change
#     writes them;
#   * the BEGIN of a transaction the engine does not know (engine._open, which identifies it);
#   * the COMMIT of an open transaction whose identity is known or that carries none (engine._commit).
# It stops at the first record it does not handle and returns its index; the engine applies that
# one on the Python path.

from cpython.bytes cimport PyBytes_AS_STRING as _BUF
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.string cimport strcmp

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        pass
    ctypedef struct PyMemberDescrObject:  # a __slots__ attribute's descriptor
        PyMemberDef* d_member
    object PyMember_GetOne(const char*, PyMemberDef*)
    int PyMember_SetOne(char*, PyMemberDef*, object) except -1

# What scan_fields reads of each RawEvent field (for the lane and for emission); every other field
# is only validated.
cdef enum LaneRead:
    L_SKIP, L_XID, L_OP, L_SEQ, L_SCN, L_THREAD, L_TS_MS, L_UNDO, L_TABLE, L_ROW_ID, L_SUBXID, L_USER,
    L_CLIENT, L_ATTRS, L_KEY
cdef enum LaneOp:
    O_NONE, O_CHANGE, O_BEGIN, O_COMMIT, O_ROLLBACK
cdef int LANE_READ[MAX_FIELDS]
cdef int LANE_OP[256]  # op enum index -> what the lane does with it
cdef bint LANE_READY = False
# scan_fields' straight-line path (scan_raw_layout), armed by enable_lane when the RawEvent schema is
# field for field the one it was written for; else scan_fields walks the schema tree.
cdef bint RAW_LAYOUT = False
cdef Py_ssize_t RAW_OPS  # the op enum's symbol count
cdef Node KEY_VALUES, BEFORE_VALUES, AFTER_VALUES  # the row images' value unions (all scalar branches)


cdef struct LaneFields:
    Py_ssize_t op
    const char* xid
    Py_ssize_t xid_n
    int64_t seq
    int64_t scn
    int64_t thread
    int64_t ts_ms
    bint undo
    const char* table  # NULL: null
    Py_ssize_t table_n
    const char* row_id
    Py_ssize_t row_id_n
    const char* subxid
    Py_ssize_t subxid_n
    const char* user  # NULL: null
    Py_ssize_t user_n
    const char* client
    Py_ssize_t client_n
    bint has_attrs  # a non-empty attrs map
    bint has_key  # a non-empty key map


# The Txn attributes the lane reads or writes per change, reached through their slots' PyMemberDef
# (PyMember_GetOne/SetOne: what the attribute's descriptor does, without looking the name up on the
# type at each access, which was ~140 instructions an access and 6 to 8 accesses a change).
cdef enum TxnSlot:
    T_FILTERED, T_IDENTITY_SEEN, T_PREFIX, T_STAGED, T_EVENTS, T_BYTES, T_XID, T_PARTITION, T_COMMIT, T_SLOTS
_TXN_SLOT_NAMES = ("filtered", "identity_seen", "prefix", "staged", "events", "bytes", "xid", "partition", "commit")
cdef PyMemberDef* TXN_MEMBERS[<int>T_SLOTS]
cdef type TXN_TYPE = None  # the class whose slots TXN_MEMBERS are; None: plain attribute access
# The same for the Commit a committed Txn holds (the emission's BEGIN and END read all four).
cdef enum CommitSlot:
    C_SCN, C_TS_MS, C_THREAD, C_OFFSET, C_SLOTS
_COMMIT_SLOT_NAMES = ("scn", "ts_ms", "thread", "offset")
cdef PyMemberDef* COMMIT_MEMBERS[<int>C_SLOTS]
cdef type COMMIT_TYPE = None


cdef bint _arm_slots(type cls, tuple names, PyMemberDef** members) except -1:
    """Fill members with the slots of cls named names; False (members not to be used) when one of
    them is not a slot of cls."""
    import types
    for i, name in enumerate(names):
        descriptor = cls.__dict__.get(name)
        if type(descriptor) is not types.MemberDescriptorType:
            return False
        members[i] = (<PyMemberDescrObject*><PyObject*>descriptor).d_member
    return True


def enable_txn_slots(type cls):
    """Reach these attributes of cls's instances (core.txn.Txn) through their slots. A class without
    one of them as a slot keeps plain attribute access."""
    global TXN_TYPE
    TXN_TYPE = None
    if not _arm_slots(cls, _TXN_SLOT_NAMES, TXN_MEMBERS):
        return False
    TXN_TYPE = cls
    return True


def enable_commit_slots(type cls):
    """enable_txn_slots for core.txn.Commit."""
    global COMMIT_TYPE
    COMMIT_TYPE = None
    if not _arm_slots(cls, _COMMIT_SLOT_NAMES, COMMIT_MEMBERS):
        return False
    COMMIT_TYPE = cls
    return True


cdef inline object _commit_get(object commit, bint slots, int i):
    if slots:
        return PyMember_GetOne(<const char*><PyObject*>commit, COMMIT_MEMBERS[i])
    return getattr(commit, _COMMIT_SLOT_NAMES[i])


cdef object _commit_of(object txn, bint slots):
    """A committed transaction's Commit; raises as Txn.require_commit does for one without."""
    commit = _txn_get(txn, slots, T_COMMIT)
    return txn.require_commit() if commit is None else commit


cdef inline object _txn_get(object txn, bint slots, int i):
    if slots:
        return PyMember_GetOne(<const char*><PyObject*>txn, TXN_MEMBERS[i])
    return getattr(txn, _TXN_SLOT_NAMES[i])


cdef inline int _txn_set(object txn, bint slots, int i, object value) except -1:
    if slots:
        return PyMember_SetOne(<char*><PyObject*>txn, TXN_MEMBERS[i], value)
    setattr(txn, _TXN_SLOT_NAMES[i], value)
    return 0


def enable_lane(row_ops, str begin, str commit, str rollback):
    """Arm the lane with the RawEvent ops it applies (events.ROW_OPS, BEGIN, COMMIT, ROLLBACK). The RawEvent
    codec must exist: the lane reads the fields it needs straight from the bytes, so their types are
    checked here."""
    global LANE_READY
    cdef Node root = RAW_ROOT
    if root is None:
        raise RuntimeError("enable_lane before RawCodec")
    expected = {  # field position -> (what the lane reads, its Avro shape)
        I_XID: (L_XID, "string"), I_OP: (L_OP, "enum"), I_SEQ: (L_SEQ, "long"), I_SCN: (L_SCN, "long"),
        I_THREAD: (L_THREAD, "int"), I_TS_MS: (L_TS_MS, "long"),
        I_UNDO: (L_UNDO, "boolean"), I_TABLE: (L_TABLE, "?string"), I_ROW_ID: (L_ROW_ID, "?string"),
        I_SUBXID: (L_SUBXID, "?string"), I_USER: (L_USER, "?string"), I_CLIENT: (L_CLIENT, "?string"),
        I_ATTRS: (L_ATTRS, "map"), I_KEY: (L_KEY, "?map"),
    }
    for i in range(MAX_FIELDS):
        LANE_READ[i] = L_SKIP
    for i, (read, shape) in expected.items():
        if not _shape_is(<Node>root.children[i], shape):
            raise NotImplementedError(f"RawEvent field {RAW_NAMES[i]!r} is not {shape}: the lane cannot read it")
        LANE_READ[i] = read
    _arm_layout(root)
    symbols = (<Node>root.children[I_OP]).symbols
    if len(symbols) > 256:
        raise NotImplementedError("more than 256 ops")
    changes = frozenset(row_ops)
    for k in range(256):
        op = symbols[k] if k < len(symbols) else None
        LANE_OP[k] = (O_CHANGE if op in changes else O_BEGIN if op == begin else O_COMMIT if op == commit
                      else O_ROLLBACK if op == rollback else O_NONE)
    LANE_READY = True


cdef inline const char* _lane_str(Reader* r, Py_ssize_t* n) except? NULL:
    """A UTF-8-checked string in place: its bytes and length (no object)."""
    cdef Py_ssize_t size = read_size(r)
    cdef const char* p = <const char*>r.buf + r.pos
    if not utf8_valid(r.buf + r.pos, size):
        raise Malformed(f"invalid UTF-8 in the string at byte {r.pos}")
    r.pos += size
    n[0] = size
    return p


cdef inline const char* _lane_opt_str(Reader* r, Py_ssize_t* n) except? NULL:
    """["null", "string"]: NULL for null (checked by enable_lane)."""
    if read_index(r, 2, "union") == 0:
        n[0] = 0
        return NULL
    return _lane_str(r, n)


cdef int scan_fields(Reader* r, Py_ssize_t stop, LaneFields* f) except -1:
    """Read RawEvent fields 0..stop-1 from r, validating each as make_view does (UTF-8 included) and
    keeping the ones LANE_READ names in f, in place: no Python object. Raises what the reader raises."""
    if RAW_LAYOUT and (stop == RAW_ROOT.n or stop == I_KEY):
        return scan_raw_layout(r, stop == RAW_ROOT.n, f)
    return _scan_tree(r, stop, f)


cdef int _scan_tree(Reader* r, Py_ssize_t stop, LaneFields* f) except -1:
    """scan_fields for any RawEvent schema: each field by the schema tree (LANE_READ, skip_node)."""
    cdef Node root = RAW_ROOT
    cdef Node node
    cdef Py_ssize_t i, at
    cdef int read
    f.table = f.row_id = f.subxid = f.user = f.client = NULL  # the fields it does not reach (stop)
    f.has_attrs = f.has_key = False
    for i in range(stop):
        read = LANE_READ[i]
        if read == L_SKIP:
            skip_node(<Node>root.children[i], r)
        elif read == L_XID:
            f.xid = _lane_str(r, &f.xid_n)
        elif read == L_OP:
            f.op = read_index(r, (<Node>root.children[i]).n, "enum")
        elif read == L_SEQ:
            f.seq = read_long(r)
        elif read == L_SCN:
            f.scn = read_long(r)
        elif read == L_THREAD:
            f.thread = read_long(r)
        elif read == L_TS_MS:
            f.ts_ms = read_long(r)
        elif read == L_UNDO:
            if r.pos >= r.end:
                _eof(r, "boolean")
            f.undo = r.buf[r.pos] != 0
            r.pos += 1
        elif read == L_TABLE:
            f.table = _lane_opt_str(r, &f.table_n)
        elif read == L_ROW_ID:
            f.row_id = _lane_opt_str(r, &f.row_id_n)
        elif read == L_SUBXID:
            f.subxid = _lane_opt_str(r, &f.subxid_n)
        elif read == L_USER:
            f.user = _lane_opt_str(r, &f.user_n)
        elif read == L_CLIENT:
            f.client = _lane_opt_str(r, &f.client_n)
        elif read == L_ATTRS:  # only whether it has an entry
            at = r.pos
            f.has_attrs = read_block_count(r) != 0
            r.pos = at
            skip_node(<Node>root.children[i], r)
        else:  # L_KEY: ["null", map]; only whether it has an entry
            node = <Node>root.children[i]
            if read_index(r, 2, "union") == 1:
                at = r.pos
                f.has_key = read_block_count(r) != 0
                r.pos = at
                skip_node(<Node>node.children[1], r)
    return 0


# The RawEvent layout scan_raw_layout reads, field by field: (name, Avro shape).
_RAW_LAYOUT = (
    ("xid", "string"), ("op", "enum"), ("seq", "long"), ("scn", "long"), ("thread", "int"), ("ts_ms", "long"),
    ("undo", "boolean"), ("row_id", "?string"), ("subxid", "?string"), ("savepoint", "?string"),
    ("user", "?string"), ("client", "?string"), ("table", "?string"), ("lob_column", "?string"),
    ("lob_offset", "?long"), ("lob_length", "?long"), ("lob_data", "null|string|bytes"), ("attrs", "map<string>"),
    ("key", "?row"), ("before", "?row"), ("after", "?row"), ("ddl", "?string"),
)


cdef bint _shape_is(Node node, str shape) except -1:
    """Whether node has this shape (enable_lane's and _RAW_LAYOUT's): a primitive, "map" (any values),
    "map<string>", "null|string|bytes", or ["null", X] as "?string", "?long", "?map" or "?row"."""
    cdef Node value
    kinds = {"string": K_STRING, "enum": K_ENUM, "long": K_LONG, "int": K_INT, "boolean": K_BOOLEAN, "map": K_MAP}
    if shape in kinds:
        return node.kind == kinds[shape]
    if shape == "map<string>":
        return node.kind == K_MAP and node.child.kind == K_STRING
    if shape == "null|string|bytes":
        return node.kind == K_UNION and node.n == 3 and [(<Node>c).kind for c in node.children] == [
            K_NULL, K_STRING, K_BYTES]
    if node.kind != K_UNION or node.n != 2 or (<Node>node.children[0]).kind != K_NULL:
        return False
    value = <Node>node.children[1]
    if shape == "?row":  # a map whose values are a union of scalars (skip_node's scalar_union)
        return value.kind == K_MAP and value.child.kind == K_UNION and value.child.scalar_union
    return value.kind == kinds[shape[1:]]


cdef int _arm_layout(Node root) except -1:
    global RAW_LAYOUT, RAW_OPS, KEY_VALUES, BEFORE_VALUES, AFTER_VALUES
    RAW_LAYOUT = root.n == len(_RAW_LAYOUT)
    for i in range(root.n if RAW_LAYOUT else 0):
        name, shape = _RAW_LAYOUT[i]
        if root.names[i] != name or not _shape_is(<Node>root.children[i], shape):
            RAW_LAYOUT = False
    if RAW_LAYOUT:
        RAW_OPS = (<Node>root.children[1]).n
        KEY_VALUES = (<Node>(<Node>root.children[18]).children[1]).child
        BEFORE_VALUES = (<Node>(<Node>root.children[19]).children[1]).child
        AFTER_VALUES = (<Node>(<Node>root.children[20]).children[1]).child
    return 0


cdef inline int _skip_opt_str(Reader* r) except -1:
    if read_index(r, 2, "union") == 1:
        skip_str(r)
    return 0


cdef inline int _skip_opt_long(Reader* r) except -1:
    if read_index(r, 2, "union") == 1:
        read_long(r)
    return 0


cdef int _skip_row(Reader* r, Node values, bint* nonempty) except -1:
    """["null", map<scalar union>], as skip_node validates it; *nonempty: its first block has entries."""
    cdef int64_t count, i
    if read_index(r, 2, "union") == 0:
        return 0
    count = read_block_count(r)
    nonempty[0] = count != 0
    while count != 0:
        i = 0
        while i < count:
            skip_str(r)
            skip_scalar(values.scalar_kinds[read_index(r, values.n, "union")], r)
            i += 1
        count = read_block_count(r)
    return 0


cdef int scan_raw_layout(Reader* r, bint whole, LaneFields* f) except -1:
    """scan_fields for the _RAW_LAYOUT schema, in straight-line code: every field read or validated
    with the same readers scan_fields and skip_node use, in the same order. whole: to the last field,
    else up to key (the emitter's prefix)."""
    cdef int64_t count, i
    cdef Py_ssize_t k
    cdef bint ignored
    f.xid = _lane_str(r, &f.xid_n)
    f.op = read_index(r, RAW_OPS, "enum")
    f.seq = read_long(r)
    f.scn = read_long(r)
    f.thread = read_long(r)
    f.ts_ms = read_long(r)
    if r.pos >= r.end:
        _eof(r, "boolean")
    f.undo = r.buf[r.pos] != 0
    r.pos += 1
    f.row_id = _lane_opt_str(r, &f.row_id_n)
    f.subxid = _lane_opt_str(r, &f.subxid_n)
    _skip_opt_str(r)  # savepoint
    f.user = _lane_opt_str(r, &f.user_n)
    f.client = _lane_opt_str(r, &f.client_n)
    f.table = _lane_opt_str(r, &f.table_n)
    _skip_opt_str(r)  # lob_column
    _skip_opt_long(r)  # lob_offset
    _skip_opt_long(r)  # lob_length
    k = read_index(r, 3, "union")  # lob_data
    if k == 1:
        skip_str(r)
    elif k == 2:
        k = read_size(r)
        r.pos += k
    count = read_block_count(r)  # attrs: only whether it has an entry
    f.has_attrs = count != 0
    while count != 0:
        i = 0
        while i < count:
            skip_str(r)
            skip_str(r)
            i += 1
        count = read_block_count(r)
    f.has_key = False
    if not whole:
        return 0
    _skip_row(r, KEY_VALUES, &f.has_key)
    _skip_row(r, BEFORE_VALUES, &ignored)
    _skip_row(r, AFTER_VALUES, &ignored)
    _skip_opt_str(r)  # ddl
    return 0


cdef bint lane_scan(const char* data, Py_ssize_t n, LaneFields* f) except -1:
    """Validate the n bytes at data as a whole RawEvent exactly as make_view does, and read the fields
    the lane needs in place. False when it is not a RawEvent (the Python path says why)."""
    cdef Reader r
    r.buf = <const unsigned char*>data
    r.pos = 0
    r.end = n
    try:
        scan_fields(&r, RAW_ROOT.n, f)
    except Exception:  # as make_view: whatever the reader raises, it is not a RawEvent
        return False
    return r.pos == r.end


def scan_both_ways(bytes data, bint whole):
    """For the tests: scan_raw_layout's and _scan_tree's outcome on data (to the last field, or up to
    key), each ("ok", end position, the fields read) or ("error", the exception's type and message).
    None when the layout is not armed (enable_lane with the project's schema arms it)."""
    cdef LaneFields f
    cdef Reader r
    if not RAW_LAYOUT:
        return None
    outcomes = []
    for layout in (True, False):
        r.buf = <const unsigned char*>_BUF(data)
        r.pos = 0
        r.end = PyBytes_GET_SIZE(data)
        try:
            if layout:
                scan_raw_layout(&r, whole, &f)
            else:
                _scan_tree(&r, RAW_ROOT.n if whole else I_KEY, &f)
        except Exception as exc:
            outcomes.append(("error", type(exc).__name__, str(exc)))
            continue
        outcomes.append(("ok", r.pos, (
            PyBytes_FromStringAndSize(f.xid, f.xid_n), f.op, f.seq, f.scn, f.thread, f.ts_ms, f.undo,
            _opt_bytes(f.row_id, f.row_id_n), _opt_bytes(f.subxid, f.subxid_n), _opt_bytes(f.user, f.user_n),
            _opt_bytes(f.client, f.client_n), _opt_bytes(f.table, f.table_n), f.has_attrs, f.has_key,
        )))
    return tuple(outcomes)


cdef inline object _opt_bytes(const char* p, Py_ssize_t n):
    return None if p == NULL else PyBytes_FromStringAndSize(p, n)


cdef inline void _be64(char* p, uint64_t v) noexcept:
    cdef int k
    for k in range(8):
        p[k] = <char>((v >> (56 - 8 * k)) & 0xFF)


cdef object _index_key(bytes prefix, char kind, const char* p, Py_ssize_t n, int64_t seq):
    """prefix | kind | len(name) (2 bytes) | name (UTF-8) | seq (8 bytes); None when name is too long."""
    cdef Py_ssize_t m = PyBytes_GET_SIZE(prefix)
    cdef char* out
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


cdef object _txn_prefix(uint64_t partition, const char* xid, Py_ssize_t n):
    """keys.txn_prefix(partition, xid), built in one piece: TXN, partition (4 bytes), len(xid)
    (2 bytes), xid (UTF-8), big-endian. None when either does not fit (the Python path raises)."""
    cdef char* out
    if n > 0xFFFF or partition > 0xFFFFFFFF:
        return None
    key = PyBytes_FromStringAndSize(NULL, 7 + n)
    out = _BUF(key)
    out[0] = b"t"
    out[1] = <char>((partition >> 24) & 0xFF)
    out[2] = <char>((partition >> 16) & 0xFF)
    out[3] = <char>((partition >> 8) & 0xFF)
    out[4] = <char>(partition & 0xFF)
    out[5] = <char>(n >> 8)
    out[6] = <char>(n & 0xFF)
    memcpy(out + 7, xid, n)
    return key


cdef inline object _opt_str(const char* p, Py_ssize_t n):
    return None if p == NULL else PyUnicode_DecodeUTF8(p, n, NULL)


# The XID of each record as a str, from a direct-mapped table of recent XIDs indexed by a hash of
# its bytes. A transaction's records each carried a new str, decoded and hashed again at each lookup;
# this keeps one str per XID (its hash kept, found by identity in the engine's dicts). A dict keyed
# by the record key hashed every fresh key object and, holding tens of thousands of XIDs, missed
# the CPU's caches (~4% of the loop on small transactions); a slot costs a short hash and a compare.
# A cache, no state: a slot that holds another XID is replaced.
cdef enum:
    XID_SLOTS = 4096  # a power of two
cdef PyObject* _XID_SLOTS[XID_SLOTS]


cdef inline object _xid_str(const char* p, Py_ssize_t n):
    """The XID whose UTF-8 (validated) is p[:n], as a str."""
    cdef uint64_t h = 14695981039346656037ULL  # FNV-1a
    cdef Py_ssize_t i, size
    cdef const char* u
    cdef PyObject* held
    for i in range(n):
        h = (h ^ <unsigned char>p[i]) * 1099511628211ULL
    i = <Py_ssize_t>(h & (XID_SLOTS - 1))
    held = _XID_SLOTS[i]
    if held != NULL:
        u = PyUnicode_AsUTF8AndSize(<object>held, &size)
        if size == n and memcmp(u, p, n) == 0:
            return <object>held
    xid = PyUnicode_DecodeUTF8(p, n, NULL)
    Py_INCREF(xid)
    _XID_SLOTS[i] = <PyObject*>xid
    Py_XDECREF(held)
    return xid


# A record of a RecordRun (processor/kafka/_rdkafka_fetch.pyx) as its buffer exports it: the same
# layout and format string on both sides. A length of -1 is a null key or value.
ctypedef struct RawRecordView:
    int64_t offset
    const char* key
    Py_ssize_t key_len
    const char* value
    Py_ssize_t value_len

cdef const char* RAW_RECORD_FORMAT = b"qPnPn"


def buffer_changes(engine, records, Py_ssize_t i, dict open_txns, put, list actions):
    """Apply records[i:] while the lane handles each (above), adding the actions they cause to
    actions; return the index of the first record left to the Python path (len(records) if none).
    records is a list of records with offset(), key() and value(), or a run exporting
    RawRecordView records (the native fetch's RecordRun): read in place, no object per record."""
    cdef Py_buffer view
    cdef RawRecordView* recs = NULL
    cdef Py_ssize_t n
    if type(records) is list:
        n = len(<list>records)
    elif PyObject_CheckBuffer(records):
        PyObject_GetBuffer(records, &view, PyBUF_FORMAT | PyBUF_ND)
        try:
            if (view.format == NULL or strcmp(view.format, RAW_RECORD_FORMAT) != 0
                    or view.itemsize != sizeof(RawRecordView) or view.ndim != 1):
                raise TypeError(f"buffer_changes: not a run of raw records ({type(records).__name__})")
            recs = <RawRecordView*>view.buf
            n = view.shape[0]
            return _buffer_changes(engine, None, recs, n, i, open_txns, put, actions)
        finally:
            PyBuffer_Release(&view)
    else:
        return i
    return _buffer_changes(engine, <list>records, NULL, n, i, open_txns, put, actions)


cdef Py_ssize_t _buffer_changes(engine, list records, const RawRecordView* recs, Py_ssize_t n, Py_ssize_t i,
                                dict open_txns, put, list actions) except -1:
    """buffer_changes over a list of records, or (records None) over n RawRecordViews."""
    cdef int64_t next_offset = engine.next_offset
    cdef int64_t last_ts = engine.last_ts_ms
    cdef int64_t offset, seq, ts
    cdef Py_ssize_t applied = 0, changes = 0, m
    cdef int kind
    cdef bint slots
    cdef dict completed = engine.completed
    cdef object pending = engine.pending
    cdef LaneFields f
    cdef bytes prefix
    cdef object value, key
    cdef const char* value_at
    cdef Py_ssize_t value_n
    cdef const char* key_at
    cdef Py_ssize_t key_n
    cdef const RawRecordView* r
    cdef char* out
    cdef object record_type = None, offset_of = None, key_of = None, value_of = None
    if not LANE_READY or i >= n:
        return i
    if records is not None:
        # The records' offset, key and value methods taken from their type once, not looked up on
        # each record; a record of another type is left to the Python path.
        record_type = type(records[i])
        offset_of, key_of, value_of = record_type.offset, record_type.key, record_type.value
    # bound once, not at each BEGIN, COMMIT and ROLLBACK
    open_txn, commit_txn, rollback_txn = engine._open, engine._commit, engine._rollback
    partition = engine.partition
    if type(partition) is not int or not 0 <= partition <= 0xFFFFFFFF:  # else the Python path (keys.txn_prefix)
        return i
    try:
        while i < n:
            if recs != NULL:
                r = &recs[i]
                offset = r.offset
                if offset < next_offset:
                    i += 1
                    continue  # applied already (re-delivered after a seek)
                if r.value_len < 0:
                    break
                value = None  # made for a change only: what it is stored under
                value_at, value_n = r.value, r.value_len
                key_at, key_n = r.key, r.key_len
            else:
                rec = records[i]
                if type(rec) is not record_type:
                    break
                offset = offset_of(rec)
                if offset < next_offset:
                    i += 1
                    continue
                value = value_of(rec)
                if value is None or type(value) is not bytes:
                    break
                value_at, value_n = _BUF(value), PyBytes_GET_SIZE(value)
                key = key_of(rec)
                if key is None:
                    key_at, key_n = NULL, -1
                elif type(key) is not bytes:
                    break
                else:
                    key_at, key_n = _BUF(key), PyBytes_GET_SIZE(key)
            if not lane_scan(value_at, value_n, &f):
                break  # not a RawEvent: apply() dead-letters it
            kind = LANE_OP[f.op]
            seq = f.seq
            if kind == O_NONE or f.xid_n == 0 or seq < 0 or f.thread != <int32_t>f.thread:
                break  # apply() dead-letters it (validation.validate)
            if kind == O_CHANGE and (f.undo or f.table == NULL or f.table_n == 0 or not f.has_key):
                break
            if key_n >= 0 and (key_n != f.xid_n or memcmp(key_at, f.xid, f.xid_n) != 0):
                break  # apply() dead-letters it (validation.misplaced)
            xid = _xid_str(f.xid, f.xid_n)
            ts = f.ts_ms
            if kind == O_BEGIN:
                if xid in open_txns or xid in completed or xid in pending:
                    break  # a restart from the start, or a late BEGIN: the Python path
                prefix = _txn_prefix(partition, f.xid, f.xid_n)
                if prefix is None:
                    break
                if f.user != NULL or f.client != NULL:
                    open_txn(xid, offset, ts, _opt_str(f.user, f.user_n), _opt_str(f.client, f.client_n), prefix)
                else:
                    open_txn(xid, offset, ts, None, None, prefix)
            elif kind == O_COMMIT or kind == O_ROLLBACK:  # of an open transaction; any other: the Python path
                txn = open_txns.get(xid)
                if txn is None or ((f.user != NULL or f.client != NULL)
                                   and not _txn_get(txn, type(txn) is TXN_TYPE, T_IDENTITY_SEEN)):
                    break  # the identity comes first with it: apply() identifies the transaction
                if kind == O_COMMIT:
                    actions.extend(commit_txn(txn, offset, f.scn, ts, f.thread))
                else:
                    actions.append(rollback_txn(txn, offset, f.scn))
            if ts > last_ts:
                last_ts = ts
            if kind != O_CHANGE:
                next_offset = offset + 1
                applied += 1
                i += 1
                continue
            txn = open_txns.get(xid)
            if txn is None:
                break
            slots = type(txn) is TXN_TYPE
            if _txn_get(txn, slots, T_FILTERED):
                break
            if (f.user != NULL or f.client != NULL) and not _txn_get(txn, slots, T_IDENTITY_SEEN):
                break
            prefix = _txn_get(txn, slots, T_PREFIX)
            row_key = sub_key = None
            if f.row_id != NULL and f.row_id_n > 0:
                row_key = _index_key(prefix, 1, f.row_id, f.row_id_n, seq)
                if row_key is None:
                    break
            if f.subxid != NULL:
                sub_key = _index_key(prefix, 3, f.subxid, f.subxid_n, seq)
                if sub_key is None:
                    break
            if value is None:
                value = PyBytes_FromStringAndSize(value_at, value_n)
            # keys.event_key(prefix, seq)
            m = PyBytes_GET_SIZE(prefix)
            event_key = PyBytes_FromStringAndSize(NULL, m + 9)
            out = _BUF(event_key)
            memcpy(out, _BUF(prefix), m)
            out[m] = _EVENT_TAG
            _be64(out + m + 1, <uint64_t>seq)
            staged = _txn_get(txn, slots, T_STAGED)
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
            _txn_set(txn, slots, T_EVENTS, _txn_get(txn, slots, T_EVENTS) + 1)
            _txn_set(txn, slots, T_BYTES, _txn_get(txn, slots, T_BYTES) + value_n)
            next_offset = offset + 1
            applied += 1
            changes += 1
            i += 1
    finally:
        if applied:
            engine.next_offset = next_offset
            engine.last_ts_ms = last_ts
            engine._pos_dirty = True
            stats = engine.stats
            stats.events += applied
            stats.changes += changes
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
