"""Buffer stores: implementations of processor.core.store.Store."""

from processor.store.memory import MemoryStore
from processor.store.rocks import RocksStore

__all__ = ["MemoryStore", "RocksStore"]
