#!/usr/bin/env bash
# `make test`: the suite in three groups run side by side (serially it takes over 30 minutes).
# tests/unit is CPU-bound and needs no broker; tests/e2e and tests/integration mostly wait on
# brokers, JVMs, PostgreSQL and restarts, each group on its own session broker. The integration
# report streams; the other two are printed after it. Any group failing fails the run.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export TXBUFFER_CODEC=compiled  # a failed codec build fails the suite instead of falling back
pytest_args=(-q -rs -p no:cacheprovider)

rm -f .unit-tests.log .e2e-tests.log
"$PY" -m pytest "${pytest_args[@]}" tests/unit >.unit-tests.log 2>&1 &
unit=$!
"$PY" -m pytest "${pytest_args[@]}" --durations=10 tests/e2e >.e2e-tests.log 2>&1 &
e2e=$!
"$PY" -m pytest "${pytest_args[@]}" --durations=20 tests/integration
integration_rc=$?
wait "$unit"; unit_rc=$?
wait "$e2e"; e2e_rc=$?
echo "--- unit tests (ran alongside) ---"; cat .unit-tests.log
echo "--- end-to-end tests (ran alongside) ---"; cat .e2e-tests.log
echo "exit codes: integration $integration_rc, e2e $e2e_rc, unit $unit_rc"
[ "$integration_rc" -eq 0 ] && [ "$e2e_rc" -eq 0 ] && [ "$unit_rc" -eq 0 ]
