"""Shared unit-test fixtures."""

from __future__ import annotations

import pytest

from ..enginekit import make_store


@pytest.fixture(params=["memory", "rocksdb"])
def store(request, tmp_path):
    """A fresh engine store, once in memory and once on RocksDB: every engine case runs on both.
    A module that wants one kind only defines a `store` of its own, which takes precedence."""
    s = make_store(request.param, tmp_path)
    yield s
    s.close()
