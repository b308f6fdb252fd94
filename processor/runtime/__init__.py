"""The running processor: consumer loop, partition lifecycle, emitter, index rebuild, status, metrics."""
