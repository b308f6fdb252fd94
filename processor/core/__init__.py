"""The pure transaction logic: events and codecs, transaction state, the engine, ordering, assembly.

Nothing here touches Kafka, disks or clocks; processor.store, processor.kafka and processor.runtime
build on it (DESIGN.md §5, checked by import-linter).
"""
