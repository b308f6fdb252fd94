"""The benchmark harness (`make bench`, `python -m bench.run`); not part of the test suite."""
