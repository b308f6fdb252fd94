# Included by _avro_fast.pyx (one extension, shared C types): the schema tree: a parsed Avro schema compiled into Nodes, and union branch choice.

cdef enum Kind:
    K_NULL
    K_BOOLEAN
    K_INT
    K_LONG
    K_FLOAT
    K_DOUBLE
    K_BYTES
    K_STRING
    K_ENUM
    K_UNION
    K_MAP
    K_ARRAY
    K_RECORD

_KIND_NAMES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string",
               "enum", "union", "map", "array", "record")
_PRIMITIVES = {"null": K_NULL, "boolean": K_BOOLEAN, "int": K_INT, "long": K_LONG, "float": K_FLOAT,
               "double": K_DOUBLE, "bytes": K_BYTES, "string": K_STRING}

cdef enum:
    MAX_FIELDS = 64
    MAX_LAZY = 8
    SMALL = 512

cdef int64_t INT32_MIN = -2147483648
cdef int64_t INT32_MAX = 2147483647


cdef class Node:
    cdef int kind
    cdef tuple children        # union branches, record field types, (values,) or (items,)
    cdef Node child            # map values, array items
    cdef tuple names           # record field names
    cdef tuple symbols         # enum symbols
    cdef dict symbol_index     # enum symbol -> index
    cdef Py_ssize_t n          # len(children) or len(symbols)
    # Union branch chosen by fastavro for a datum of each exact type, -1 when unsure (fall back).
    cdef int pick_none, pick_bool, pick_int32, pick_int64, pick_float, pick_str, pick_bytes
    cdef int pick_dict, pick_list
    # A union whose branches are all scalars (null, boolean, numbers, bytes, string; at most 8):
    # each branch's kind, so skip_node validates a branch without visiting its Node.
    cdef bint scalar_union
    cdef int scalar_kinds[8]


class Malformed(ValueError):
    """Bytes that fastavro would not decode either."""


def _compile(schema, dict names, str namespace, set compiling):
    cdef Node node
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            node = Node.__new__(Node)
            node.kind = _PRIMITIVES[schema]
            return node
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        for name in (full, schema):
            if name in compiling:
                raise NotImplementedError(f"recursive type {name}")
            if name in names:
                return names[name]
        raise ValueError(f"unknown type {schema!r}")
    if isinstance(schema, list):
        node = Node.__new__(Node)
        node.kind = K_UNION
        node.children = tuple(_compile(s, names, namespace, compiling) for s in schema)
        node.n = len(node.children)
        _plan_union(node)
        node.scalar_union = node.n <= 8 and all((<Node>b).kind <= K_STRING for b in node.children)
        if node.scalar_union:
            for i in range(node.n):
                node.scalar_kinds[i] = (<Node>node.children[i]).kind
        return node
    if not isinstance(schema, dict):
        raise ValueError(f"not a schema: {schema!r}")
    if "logicalType" in schema:
        raise NotImplementedError("logical types")
    t = schema["type"]
    if isinstance(t, str) and t in _PRIMITIVES:
        return _compile(t, names, namespace, compiling)
    if t in ("record", "error", "enum"):
        name = schema["name"]
        ns = schema.get("namespace", namespace) if "." not in name else name.rpartition(".")[0]
        full = name if "." in name or not ns else f"{ns}.{name}"
        node = Node.__new__(Node)
        if t == "enum":
            node.kind = K_ENUM
            node.symbols = tuple(schema["symbols"])
            node.symbol_index = {s: i for i, s in enumerate(node.symbols)}
            node.n = len(node.symbols)
        else:
            node.kind = K_RECORD
            compiling.add(full)
            fields = schema["fields"]
            node.names = tuple(f["name"] for f in fields)
            node.children = tuple(_compile(f["type"], names, ns, compiling) for f in fields)
            node.n = len(fields)
            compiling.discard(full)
        names[full] = node
        names[name.rpartition(".")[2]] = node
        return node
    if t == "map":
        node = Node.__new__(Node)
        node.kind = K_MAP
        node.child = _compile(schema["values"], names, namespace, compiling)
        node.children = (node.child,)
        return node
    if t == "array":
        node = Node.__new__(Node)
        node.kind = K_ARRAY
        node.child = _compile(schema["items"], names, namespace, compiling)
        node.children = (node.child,)
        return node
    if t == "fixed":
        raise NotImplementedError("fixed")
    return _compile(t, names, namespace, compiling)


# What fastavro's union writer does with a datum of an exact type, per branch kind: 1 = the
# branch validates, 0 = it does not, -1 = it may (left to fastavro). The writer takes the first
# validating branch; records and floats make it look further, so those are left to it too.
cdef int _verdict(str datum_type, Node branch, int dict_branches, int list_branches):
    cdef int k = branch.kind
    if datum_type == "none":
        return 1 if k == K_NULL else 0
    if datum_type == "bool":
        if k == K_BOOLEAN:
            return 1
        return -1 if k in (K_INT, K_LONG, K_FLOAT, K_DOUBLE) else 0
    if datum_type in ("int32", "int64"):
        if k == K_LONG or (k == K_INT and datum_type == "int32"):
            return 1
        return -1 if k in (K_INT, K_FLOAT, K_DOUBLE) else 0
    if datum_type == "float":
        if k == K_DOUBLE:
            return 1
        return -1 if k == K_FLOAT else 0
    if datum_type == "str":
        if k == K_STRING:
            return 1
        return -1 if k == K_ENUM else 0
    if datum_type == "bytes":
        return 1 if k == K_BYTES else 0
    if datum_type == "dict":
        if k in (K_MAP, K_RECORD):
            return 1 if dict_branches == 1 else -1
        return 0
    if datum_type == "list":
        if k == K_ARRAY:
            return 1 if list_branches == 1 else -1
        return 0
    return -1


cdef int _pick(str datum_type, Node union):
    cdef Node b
    cdef int i, v
    cdef int dict_branches = 0, list_branches = 0
    for b in union.children:
        dict_branches += b.kind == K_MAP or b.kind == K_RECORD
        list_branches += b.kind == K_ARRAY
    for i in range(union.n):
        v = _verdict(datum_type, union.children[i], dict_branches, list_branches)
        if v == 1:
            return i
        if v == -1:
            return -1
    return -1


cdef _plan_union(Node u):
    u.pick_none = _pick("none", u)
    u.pick_bool = _pick("bool", u)
    u.pick_int32 = _pick("int32", u)
    u.pick_int64 = _pick("int64", u)
    u.pick_float = _pick("float", u)
    u.pick_str = _pick("str", u)
    u.pick_bytes = _pick("bytes", u)
    u.pick_dict = _pick("dict", u)
    u.pick_list = _pick("list", u)


def _signature(Node node):
    """The structure of a compiled schema as nested tuples (names, kinds, symbols)."""
    k = node.kind
    if k == K_ENUM:
        return ("enum", node.symbols)
    if k == K_UNION:
        return ("union", tuple(_signature(b) for b in node.children))
    if k == K_MAP or k == K_ARRAY:
        return (_KIND_NAMES[k], _signature(node.child))
    if k == K_RECORD:
        return ("record", tuple((n, _signature(c)) for n, c in zip(node.names, node.children)))
    return _KIND_NAMES[k]
