# Included by _avro_fast.pyx: the per-transaction dataclasses built in C.
#
# A dataclass(slots=True) has a generated Python __init__ that runs one line per field: a Txn (19
# fields) took ~1 µs to build, and a Commit, a Committed and a Finished are built per transaction
# too. SlottedInit(cls)(*args) builds the instance cls(*args) builds: the same class, each slot set
# through its PyMemberDef in field order, from the positional arguments and then the fields'
# defaults (a default_factory called for each instance, as __init__ calls it), and __post_init__
# called last when the class has one. Keyword arguments are refused (the hot path passes none).

import dataclasses as _dataclasses
import types as _types

from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

cdef extern from "Python.h":
    ctypedef struct _AllocatingType "PyTypeObject":
        PyObject* (*tp_alloc)(_AllocatingType*, Py_ssize_t)
    ctypedef struct _MemberLayout "PyMemberDef":
        int type
        Py_ssize_t offset
    enum: T_OBJECT_EX  # a __slots__ entry: a PyObject* at `offset`, NULL while unset

# How a field gets its value when no argument is given.
cdef enum DefaultKind:
    D_REQUIRED, D_VALUE, D_LIST, D_DICT, D_FACTORY

cdef class SlottedInit:
    """cls(*args) for a dataclass(slots=True) whose __init__ is the generated one, in C."""

    cdef readonly type cls
    cdef Py_ssize_t n
    cdef Py_ssize_t required  # the fields without a default: the fewest arguments accepted
    cdef Py_ssize_t* offsets  # per field: where its slot's PyObject* is in the instance
    cdef int* kinds  # per field: a DefaultKind
    cdef list defaults  # per field: its default value, or its default_factory, or None
    cdef object post_init

    def __cinit__(self, type cls not None):
        self.offsets, self.kinds = NULL, NULL
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.init or "__slots__" not in cls.__dict__:
            raise TypeError(f"{cls.__qualname__} is not a dataclass(slots=True) with a generated __init__")
        declared = getattr(cls, "__dataclass_fields__")
        fields = _dataclasses.fields(cls)
        if len(fields) != len(declared):  # an InitVar: __init__ takes more than the fields
            raise TypeError(f"{cls.__qualname__} has pseudo-fields (InitVar)")
        self.cls = cls
        self.n = len(fields)
        self.offsets = <Py_ssize_t*>malloc(max(self.n, 1) * sizeof(Py_ssize_t))
        self.kinds = <int*>malloc(max(self.n, 1) * sizeof(int))
        if self.offsets == NULL or self.kinds == NULL:
            raise MemoryError()
        self.defaults = []
        self.required = 0
        defaulted = False
        for i, field in enumerate(fields):
            if not field.init or field.kw_only:
                raise TypeError(f"{cls.__qualname__}.{field.name} is not a positional __init__ argument")
            descriptor = next((k.__dict__[field.name] for k in cls.__mro__ if field.name in k.__dict__), None)
            if type(descriptor) is not _types.MemberDescriptorType:
                raise TypeError(f"{cls.__qualname__}.{field.name} is not a slot")
            member = <_MemberLayout*>(<PyMemberDescrObject*><PyObject*>descriptor).d_member
            if member.type != T_OBJECT_EX:
                raise TypeError(f"{cls.__qualname__}.{field.name} is not a __slots__ entry")
            self.offsets[i] = member.offset
            if field.default is not _dataclasses.MISSING:
                self.kinds[i], default = D_VALUE, field.default
            elif field.default_factory is list:
                self.kinds[i], default = D_LIST, None
            elif field.default_factory is dict:
                self.kinds[i], default = D_DICT, None
            elif field.default_factory is not _dataclasses.MISSING:
                self.kinds[i], default = D_FACTORY, field.default_factory
            elif defaulted:
                raise TypeError(f"{cls.__qualname__}.{field.name}: a required field after a default")
            else:
                self.kinds[i], default = D_REQUIRED, None
                self.required = i + 1
            defaulted = self.kinds[i] != D_REQUIRED
            self.defaults.append(default)
        self.post_init = getattr(cls, "__post_init__", None)

    def __dealloc__(self):
        free(self.offsets)
        free(self.kinds)

    def __call__(self, *args):
        cdef Py_ssize_t i, given = PyTuple_GET_SIZE(args)
        cdef PyObject* raw
        cdef PyObject** slot
        cdef int kind
        if given < self.required or given > self.n:
            raise TypeError(f"{self.cls.__qualname__}() takes {self.required} to {self.n} positional arguments, "
                            f"{given} given")
        raw = (<_AllocatingType*><PyObject*>self.cls).tp_alloc(<_AllocatingType*><PyObject*>self.cls, 0)
        if raw == NULL:
            raise MemoryError()
        obj = <object>raw
        Py_DECREF(obj)  # <object> took a reference of its own
        for i in range(self.n):
            if i < given:
                value = <object>PyTuple_GET_ITEM(args, i)
            else:
                kind = self.kinds[i]
                if kind == D_VALUE:
                    value = self.defaults[i]
                elif kind == D_LIST:
                    value = []
                elif kind == D_DICT:
                    value = {}
                else:
                    value = self.defaults[i]()
            # What PyMember_SetOne does for a slot that is still NULL (the instance is new).
            slot = <PyObject**>((<char*>raw) + self.offsets[i])
            Py_INCREF(value)
            slot[0] = <PyObject*>value
        if self.post_init is not None:
            self.post_init(obj)
        return obj
