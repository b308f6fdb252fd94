"""Tools that check the processor: reference model, workload generator, verifier, memory sink, demo.

Imported only by processor.cli and the tests; never by core, store, kafka or runtime.
"""
