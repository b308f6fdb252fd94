# Included by _avro_fast.pyx (one extension, shared C types): RawView (one validated RawEvent, lazy fields) and RawCodec.

cdef object _UNSET = object()
cdef list _NO_VALUES = [None] * MAX_FIELDS

# Field positions in the RawEvent schema, resolved by RawCodec (one RawEvent schema per process).
cdef Py_ssize_t I_XID, I_OP, I_SEQ, I_SCN, I_THREAD, I_TS_MS, I_UNDO, I_ROW_ID, I_SUBXID, I_SAVEPOINT
cdef Py_ssize_t I_USER, I_CLIENT, I_TABLE, I_LOB_COLUMN, I_LOB_OFFSET, I_LOB_LENGTH, I_LOB_DATA, I_ATTRS
cdef Py_ssize_t I_KEY, I_BEFORE, I_AFTER, I_DDL
cdef Node RAW_ROOT = None
cdef dict RAW_INDEX = {}          # field name -> position
cdef tuple RAW_NAMES = ()
cdef Py_ssize_t RAW_LAZY_SLOT[MAX_FIELDS]   # position -> slot in RawView._lazy_at, or -1
cdef unsigned char EMIT_USES[MAX_FIELDS]     # position -> 1 if ChangeStream.next reads the field
cdef object DECODE_ERROR = ValueError

_RAW_FIELDS = ("xid", "op", "seq", "scn", "thread", "ts_ms", "undo", "row_id", "subxid", "savepoint",
               "user", "client", "table", "lob_column", "lob_offset", "lob_length", "lob_data", "attrs",
               "key", "before", "after", "ddl")
# Decoded on first access only: the row images, the DDL text and LOB pieces can be large and the
# buffering path rarely needs them. They are validated when the view is made all the same.
_RAW_LAZY = ("lob_data", "key", "before", "after", "ddl")
# The prefix fields a ChangeEvent is built from (the transaction's own fields come from its Txn);
# emission skips the others (xid, user, client, ...) instead of making objects it drops.
_EMIT_FIELDS = ("op", "seq", "scn", "ts_ms", "row_id", "table", "attrs")


cdef class RawView:
    """One RawEvent, validated to its last byte: the raw bytes, where `key` starts (the splice
    point), and every field as an attribute or view["name"]. lob_data, key, before, after and
    ddl are decoded on first access."""

    cdef readonly bytes raw
    cdef readonly Py_ssize_t body_at
    cdef list _vals
    cdef Py_ssize_t _lazy_at[MAX_LAZY]

    def __cinit__(self):
        self._vals = _NO_VALUES  # a view made by RawView.__new__ reads as all None, never crashes
        self.raw = b""

    def __init__(self):
        raise TypeError("RawView is made by decode_raw_batch / decode_raw_view")

    cdef object _lazy(self, Py_ssize_t i):
        cdef object v = self._vals[i]
        cdef Reader r
        if v is _UNSET:
            r.buf = <const unsigned char*>PyBytes_AS_STRING(self.raw)
            r.pos = self._lazy_at[RAW_LAZY_SLOT[i]]
            r.end = PyBytes_GET_SIZE(self.raw)
            v = decode_node(<Node>RAW_ROOT.children[i], &r)
            self._vals[i] = v
        return v

    def __getitem__(self, str name):
        cdef object i = RAW_INDEX.get(name)
        if i is None:
            raise KeyError(name)
        return self._lazy(i)

    def get(self, str name, default=None):
        cdef object i = RAW_INDEX.get(name)
        return default if i is None else self._lazy(i)

    def __contains__(self, name):
        return name in RAW_INDEX

    def keys(self):
        return RAW_NAMES

    def to_dict(self):
        """The whole record, equal to fastavro's decode of raw."""
        return {RAW_NAMES[i]: self._lazy(i) for i in range(len(RAW_NAMES))}

    def __repr__(self):
        return f"RawView({self.to_dict()!r}, body_at={self.body_at})"

    @property
    def xid(self):
        return self._vals[I_XID]

    @property
    def op(self):
        return self._vals[I_OP]

    @property
    def seq(self):
        return self._vals[I_SEQ]

    @property
    def scn(self):
        return self._vals[I_SCN]

    @property
    def thread(self):
        return self._vals[I_THREAD]

    @property
    def ts_ms(self):
        return self._vals[I_TS_MS]

    @property
    def undo(self):
        return self._vals[I_UNDO]

    @property
    def row_id(self):
        return self._vals[I_ROW_ID]

    @property
    def subxid(self):
        return self._vals[I_SUBXID]

    @property
    def savepoint(self):
        return self._vals[I_SAVEPOINT]

    @property
    def user(self):
        return self._vals[I_USER]

    @property
    def client(self):
        return self._vals[I_CLIENT]

    @property
    def table(self):
        return self._vals[I_TABLE]

    @property
    def lob_column(self):
        return self._vals[I_LOB_COLUMN]

    @property
    def lob_offset(self):
        return self._vals[I_LOB_OFFSET]

    @property
    def lob_length(self):
        return self._vals[I_LOB_LENGTH]

    @property
    def attrs(self):
        return self._vals[I_ATTRS]

    @property
    def lob_data(self):
        return self._lazy(I_LOB_DATA)

    @property
    def key(self):
        return self._lazy(I_KEY)

    @property
    def before(self):
        return self._lazy(I_BEFORE)

    @property
    def after(self):
        return self._lazy(I_AFTER)

    @property
    def ddl(self):
        return self._lazy(I_DDL)


cdef object make_view(object data):
    """A RawView of data, or the DecodeError describing why it is not a RawEvent."""
    cdef Reader r
    cdef RawView view
    cdef Node root = RAW_ROOT
    cdef Py_ssize_t i, n = root.n, slot
    cdef list vals
    if not data:
        return DECODE_ERROR("empty record")
    if type(data) is not bytes:
        data = bytes(data)
    r.buf = <const unsigned char*>PyBytes_AS_STRING(data)
    r.pos = 0
    r.end = PyBytes_GET_SIZE(data)
    view = RawView.__new__(RawView)
    vals = [_UNSET] * n
    try:
        for i in range(n):
            slot = RAW_LAZY_SLOT[i]
            if slot < 0:
                vals[i] = decode_node(<Node>root.children[i], &r)
            else:
                view._lazy_at[slot] = r.pos
                skip_node(<Node>root.children[i], &r)
    except Exception as exc:
        err = DECODE_ERROR(f"undecodable Avro: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err
    if r.pos != r.end:
        return DECODE_ERROR(f"trailing bytes: decoded {r.pos} of {r.end}")
    view.raw = data
    view._vals = vals
    view.body_at = view._lazy_at[RAW_LAZY_SLOT[I_KEY]]
    return view


cdef class RawCodec(Codec):
    """The RawEvent codec, plus views for the buffering path."""

    def __init__(self, str name, schema, fallback_encode, decode_error):
        global RAW_ROOT, RAW_INDEX, RAW_NAMES, DECODE_ERROR
        global I_XID, I_OP, I_SEQ, I_SCN, I_THREAD, I_TS_MS, I_UNDO, I_ROW_ID, I_SUBXID, I_SAVEPOINT
        global I_USER, I_CLIENT, I_TABLE, I_LOB_COLUMN, I_LOB_OFFSET, I_LOB_LENGTH, I_LOB_DATA, I_ATTRS
        global I_KEY, I_BEFORE, I_AFTER, I_DDL
        Codec.__init__(self, name, schema, fallback_encode, decode_error)
        root = self.root
        if root.kind != K_RECORD or root.n > MAX_FIELDS:
            raise NotImplementedError("RawEvent must be a record of at most 64 fields")
        index = {name: i for i, name in enumerate(root.names)}
        missing = [f for f in _RAW_FIELDS if f not in index]
        if missing:
            raise NotImplementedError(f"RawEvent schema lacks {missing}")
        (I_XID, I_OP, I_SEQ, I_SCN, I_THREAD, I_TS_MS, I_UNDO, I_ROW_ID, I_SUBXID, I_SAVEPOINT, I_USER, I_CLIENT,
         I_TABLE, I_LOB_COLUMN, I_LOB_OFFSET, I_LOB_LENGTH, I_LOB_DATA, I_ATTRS, I_KEY, I_BEFORE, I_AFTER,
         I_DDL) = [index[f] for f in _RAW_FIELDS]
        for i in range(MAX_FIELDS):
            RAW_LAZY_SLOT[i] = -1
        for slot, f in enumerate(_RAW_LAZY):
            RAW_LAZY_SLOT[index[f]] = slot
        for i in range(MAX_FIELDS):
            EMIT_USES[i] = 0
        for f in _EMIT_FIELDS:
            EMIT_USES[index[f]] = 1
        RAW_ROOT = root
        RAW_INDEX = index
        RAW_NAMES = root.names
        DECODE_ERROR = decode_error

    def view(self, data):
        """RawView of one record; raises DecodeError."""
        if RAW_ROOT is None:
            raise RuntimeError("RawCodec.__init__ was not called")
        v = make_view(data)
        if type(v) is not RawView:
            raise v
        return v

    def view_batch(self, values):
        """One RawView or DecodeError per value, in order."""
        if RAW_ROOT is None:
            raise RuntimeError("RawCodec.__init__ was not called")
        return [make_view(v) for v in values]
