"""Constructors for the dataclasses built once per transaction: Txn, Commit, Committed, Finished.

A dataclass(slots=True)'s generated __init__ is Python, one line per field: a Txn (19 fields) took
~1 µs to build, a Commit, a Committed and a Finished ~0.35 µs each. On the compiled backend
constructor(cls) is the extension's SlottedInit, which builds the same instance in C: every slot
set in field order from the positional arguments, then from the defaults (a default_factory
called per instance), then __post_init__ (tests/unit/test_construct.py holds it to cls(*args)).
Otherwise, or for a class it does not handle, it is cls itself. Positional arguments only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from processor.core import codec

T = TypeVar("T")


def constructor(cls: type[T]) -> Callable[..., T]:
    """cls(*args), built in C when the compiled backend runs."""
    module = codec.compiled_module()
    if module is None:
        return cls
    try:
        built: Callable[..., T] = module.SlottedInit(cls)
    except TypeError:  # not a dataclass(slots=True) with a generated, positional __init__
        return cls
    return built
