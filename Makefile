# Every target sets up what it needs, so a fresh clone needs only `make demo` or `make test`.
# Setup = .venv (Python deps, compiled codec), the JVM jars resolved from Maven Central into
# ~/.cache/txbuffer (reused), and the PostgreSQL 15 server package when initdb is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BUNDLES ?= kafka spark connect

.PHONY: venv setup jars jars-clean postgres lint test test-fast demo bench chaos fuzz clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(wildcard setup.py)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,sources,debezium,test]'
	touch $(STAMP)

## JVM jars (Apache Kafka, Spark connectors + Delta, Kafka Connect + Debezium JDBC sink), once.
jars: venv
	$(PY) -m processor.kafka.jars $(BUNDLES)

jars-clean: venv
	$(PY) -c "import shutil; from processor.kafka import jars; shutil.rmtree(jars.cache_root(), ignore_errors=True)"

## The PostgreSQL 15 server binaries (Debian package) for the capture tests, if missing.
postgres:
	bash deploy/setup/postgres.sh

setup: venv jars postgres

## Layering (import-linter), lint and format (ruff), types (mypy strict on core/ and store/).
lint: venv
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## The whole suite: unit, property, integration (real Kafka, RocksDB, Spark, PostgreSQL), e2e.
# TXBUFFER_CODEC=compiled: a failed codec build fails the suite instead of falling back to fastavro.
# Three lanes run side by side (tests/run_groups.sh), each pytest run with its own broker: the Spark
# integration tests then a few other integration files; the other integration tests; the unit tests
# (CPU, no broker) then the end-to-end tests. Reports land in .test-lanes/ and are printed at the end.
# Any run failing fails.
test: setup
	@PY=$(PY) bash tests/run_groups.sh

## Unit tests only (no broker): seconds.
test-fast: venv
	TXBUFFER_CODEC=compiled $(PY) -m pytest -q -p no:cacheprovider tests/unit

## End to end on the embedded Apache Kafka broker: generate, buffer, emit, verify, land with Spark.
demo: setup
	$(VENV)/bin/txbuffer demo

## The benchmark harness (not part of the test suite).
bench: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.run

## The kill campaign (see docs/reliability.md).
chaos: setup
	$(PY) -m bench.chaos --events 1000000 --kills 20 --instances 3 --broker-kills 2 --guarantee both
	$(PY) -m bench.chaos --storm

## Fuzzed input (see docs/reliability.md).
fuzz: setup
	$(PY) -m bench.fuzz --records 100000

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
