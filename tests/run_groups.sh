#!/usr/bin/env bash
# `make test`: the suite in three lanes run side by side (serially it takes over 30 minutes).
# tests/unit is CPU-bound and needs no broker; tests/e2e and tests/integration mostly wait on
# brokers, JVMs, PostgreSQL and restarts, each group on its own session broker. The Spark
# integration tests (tests/integration/test_spark_*.py, a third of the integration group's time)
# run after the unit tests, in the same lane: on a machine 3-4 times slower than usual the
# integration group alone took 28 of the suite's 30 minutes. The rest of the integration report
# streams; the other groups' are printed after it. Any group failing fails the run.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export TXBUFFER_CODEC=compiled  # a failed codec build fails the suite instead of falling back
pytest_args=(-q -rs -p no:cacheprovider)
spark_tests=(tests/integration/test_spark_*.py)
not_spark=()
for f in "${spark_tests[@]}"; do not_spark+=(--ignore="$f"); done

rm -f .unit-tests.log .spark-tests.log .e2e-tests.log .unit-tests.rc .spark-tests.rc
(
  "$PY" -m pytest "${pytest_args[@]}" tests/unit >.unit-tests.log 2>&1
  echo $? >.unit-tests.rc
  "$PY" -m pytest "${pytest_args[@]}" --durations=10 "${spark_tests[@]}" >.spark-tests.log 2>&1
  echo $? >.spark-tests.rc
) &
unit_then_spark=$!
"$PY" -m pytest "${pytest_args[@]}" --durations=10 tests/e2e >.e2e-tests.log 2>&1 &
e2e=$!
"$PY" -m pytest "${pytest_args[@]}" --durations=20 "${not_spark[@]}" tests/integration
integration_rc=$?
wait "$unit_then_spark"
wait "$e2e"; e2e_rc=$?
unit_rc=$(cat .unit-tests.rc 2>/dev/null || echo 1)
spark_rc=$(cat .spark-tests.rc 2>/dev/null || echo 1)
echo "--- unit tests (ran alongside) ---"; cat .unit-tests.log
echo "--- Spark integration tests (ran alongside, after the unit tests) ---"; cat .spark-tests.log
echo "--- end-to-end tests (ran alongside) ---"; cat .e2e-tests.log
echo "exit codes: integration $integration_rc, Spark integration $spark_rc, e2e $e2e_rc, unit $unit_rc"
[ "$integration_rc" -eq 0 ] && [ "$spark_rc" -eq 0 ] && [ "$e2e_rc" -eq 0 ] && [ "$unit_rc" -eq 0 ]
