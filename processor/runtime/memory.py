"""Process-wide memory settings applied before any thread starts."""

from __future__ import annotations

import ctypes
import ctypes.util

M_ARENA_MAX = -8  # glibc mallopt parameter


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc malloc arenas. RocksDB and librdkafka threads otherwise each get an arena and the
    fragmentation alone costs ~50 MB of RSS on a huge transaction (measured). Same as
    MALLOC_ARENA_MAX, but needs no environment set before the interpreter starts."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        return bool(ctypes.CDLL(name).mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
