"""Source adapters: database logs -> RawEvents on the raw topic."""
