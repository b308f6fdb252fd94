# Every target creates .venv on first use, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv test test-fast demo bench chaos clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,sources,test]'
	touch $(STAMP)

## The whole suite: unit, integration on the embedded broker, Spark, e2e.
test: venv
	$(PY) -m pytest -q -p no:cacheprovider tests

## Unit tests only (no broker): seconds.
test-fast: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

## End to end on the embedded broker: generate, buffer, emit, verify.
demo: venv
	$(VENV)/bin/txbuffer demo

## The benchmark harness (not part of the test suite).
bench: venv
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.run

## The kill campaign (1M events, 20 kills, 3 instances); see README.
chaos: venv
	$(PY) -m bench.chaos --events 1000000 --kills 20 --instances 3

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
