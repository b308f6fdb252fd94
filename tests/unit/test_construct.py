"""construct.constructor(cls) builds what cls(*args) builds: on the compiled backend in C
(_avro_fast.SlottedInit), else cls itself. The per-transaction dataclasses (Txn, Commit, Committed,
Finished) and a dataclass with every kind of default are built both ways from the same random
arguments and compared slot by slot, the default_factory results included (fresh per instance)."""

from __future__ import annotations

import dataclasses
import gc
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core import codec
from processor.core.actions import Committed, DeadLetter, Finished
from processor.core.construct import constructor
from processor.core.txn import Commit, Txn

compiled = pytest.mark.skipif(codec.BACKEND != "compiled", reason="SlottedInit is compiled")

_made: list[int] = []


def _counted() -> tuple[int, ...]:
    _made.append(len(_made))
    return tuple(_made)


@dataclasses.dataclass(slots=True)
class EveryDefault:
    required: object
    value: int = 7
    listed: list[int] = dataclasses.field(default_factory=list)
    mapped: dict[str, int] = dataclasses.field(default_factory=dict)
    made: tuple[int, ...] = dataclasses.field(default_factory=_counted)
    post: object = None

    def __post_init__(self) -> None:
        if self.post is None:
            self.post = ("post_init saw", self.value, type(self.listed).__name__)


def _slots(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]


values = st.one_of(st.none(), st.integers(), st.text(max_size=8), st.binary(max_size=8), st.lists(st.integers()))


@given(st.lists(values, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_every_kind_of_default_is_built_as_the_dataclass_builds_it(args: list[object]) -> None:
    make = constructor(EveryDefault)
    _made.clear()
    expected = EveryDefault(*args)
    _made.clear()
    built = make(*args)
    assert type(built) is EveryDefault
    assert _slots(built) == _slots(expected)
    if len(args) < 3:  # a default_factory runs once per instance, never shared
        assert built.listed is not make(*args).listed
    if len(args) < 4:
        assert built.mapped is not make(*args).mapped


txn_args = st.tuples(
    st.integers(0, 2**31 - 1),
    st.text(min_size=1, max_size=12),
    st.integers(0, 2**63 - 1),
    st.binary(max_size=16),
    st.integers(0, 2**53),
    st.one_of(st.none(), st.text(max_size=6)),
    st.one_of(st.none(), st.text(max_size=6)),
    st.booleans(),
    st.booleans(),
)


@given(txn_args, st.integers(3, 9))
@settings(max_examples=200, deadline=None)
def test_a_txn_is_built_as_the_dataclass_builds_it_post_init_included(args: tuple, given_n: int) -> None:
    prefix_args = args[:given_n]
    built, expected = constructor(Txn)(*prefix_args), Txn(*prefix_args)
    assert type(built) is Txn
    assert _slots(built) == _slots(expected)
    assert built.prefix  # __post_init__ made it when none was given
    assert built.to_bytes() == expected.to_bytes()
    assert built.savepoints is not expected.savepoints and built.acked_tables is not expected.acked_tables


@given(st.integers(), st.integers(), st.integers(), st.integers(), st.text(max_size=6))
@settings(max_examples=100, deadline=None)
def test_the_actions_and_the_commit_are_built_as_their_dataclasses_build_them(
    a: int, b: int, c: int, d: int, text: str
) -> None:
    txn = Txn(0, text or "x", 1)
    cases = [
        (Commit, (a, b, c, d)),
        (Committed, (txn,)),
        (Finished, (a, text, b, "committed")),
        (DeadLetter, (a, b, None, text.encode(), text)),
    ]
    for cls, args in cases:
        built = constructor(cls)(*args)
        assert type(built) is cls
        assert built == cls(*args)
    assert constructor(Committed)(txn).txn is txn


def test_the_fallback_backend_builds_with_the_class_itself() -> None:
    if codec.BACKEND == "compiled":
        assert constructor(Txn) is not Txn
    else:
        assert constructor(Txn) is Txn


@compiled
def test_wrong_argument_counts_and_keywords_are_refused_as_the_dataclass_refuses_them() -> None:
    make = constructor(Txn)
    with pytest.raises(TypeError, match="3 to 18 positional arguments, 2 given"):
        make(0, "x")
    with pytest.raises(TypeError, match="3 to 18 positional arguments, 19 given"):
        make(*range(19))
    with pytest.raises(TypeError):
        make(0, "x", 1, prefix=b"")
    with pytest.raises(TypeError):  # and so does the class
        Txn(0, "x")


@compiled
def test_classes_it_cannot_build_in_c_are_built_by_the_class() -> None:
    @dataclasses.dataclass
    class NoSlots:
        a: int

    @dataclasses.dataclass(slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    @dataclasses.dataclass(slots=True)
    class WithInitVar:
        a: int
        b: dataclasses.InitVar[int]

        def __post_init__(self, b: int) -> None:
            self.a += b

    class Plain:
        __slots__ = ("a",)

    module = codec.compiled_module()
    for cls in (NoSlots, KeywordOnly, WithInitVar, Plain):
        with pytest.raises(TypeError):
            module.SlottedInit(cls)
        assert constructor(cls) is cls


@compiled
def test_built_instances_are_freed_with_what_they_hold() -> None:
    make = constructor(EveryDefault)
    held = object()
    before = sys.getrefcount(held)
    for _ in range(1000):
        make(held)
    gc.collect()
    assert sys.getrefcount(held) == before
