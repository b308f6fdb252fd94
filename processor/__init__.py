"""txbuffer: holds CDC changes in RocksDB until COMMIT, then emits them in order."""

__version__ = "0.1.0"
