#!/usr/bin/env bash
# `make test`: the suite in four lanes run side by side (serially it takes over 60 minutes).
# Most of the suite waits, not computes: on brokers, JVMs, PostgreSQL, kills and restarts (a
# rehearsal on a clean clone used 24 CPU-minutes in 26 wall-minutes on two cores), so the lanes
# overlap their waits. Each lane is one or more pytest runs in sequence, each run on its own session
# broker; tests/unit is CPU-bound and needs none. With three lanes the two longest took 24 minutes
# each and CI 28 of its 30: the integration group is now split in two halves by measured time
# (--durations), and the Spark integration tests, the longest file group, have a lane to themselves.
# Every lane's report is printed at the end, a line per finished run meanwhile; any run failing
# fails the suite.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export TXBUFFER_CODEC=compiled  # a failed codec build fails the suite instead of falling back
pytest_args=(-q -rs -p no:cacheprovider --durations=10)
LOGS=.test-lanes
rm -rf "$LOGS" && mkdir -p "$LOGS"

# The integration files outside Spark, in two halves of about equal time (the first half follows
# the unit tests in their lane). A new file lands in the second half unless listed here.
integration_first=(
  tests/integration/test_postgres_capture.py tests/integration/test_processor.py
  tests/integration/test_global_order.py tests/integration/test_liveness.py
  tests/integration/test_eos_rebalance.py tests/integration/test_broker_is_apache_kafka.py
  tests/integration/test_capture_metrics.py tests/integration/test_debezium_output.py
  tests/integration/test_embedded_kafka.py tests/integration/test_index_rebuild.py
)
integration_second=()
for f in tests/integration/test_*.py; do
  case " ${integration_first[*]} " in *" $f "*) continue ;; esac
  case "$f" in tests/integration/test_spark_*) continue ;; esac
  integration_second+=("$f")
done
spark_tests=(tests/integration/test_spark_*.py)

# run_step LANE NAME PATHS...: one pytest run; its report goes to $LOGS/NAME.log, its exit code
# to $LOGS/NAME.rc, and a line with its summary and time to the console.
run_step() {
  local lane=$1 name=$2
  shift 2
  local t0=$SECONDS
  "$PY" -m pytest "${pytest_args[@]}" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$rc" >"$LOGS/$name.rc"
  printf '[lane %s] %s: exit %s after %dm%02ds: %s\n' "$lane" "$name" "$rc" $(((SECONDS - t0) / 60)) \
    $(((SECONDS - t0) % 60)) "$(grep -E '(passed|failed|error)' "$LOGS/$name.log" | tail -1)"
}

steps=(unit integration-1 integration-2 spark e2e)
(run_step 1 unit tests/unit; run_step 1 integration-1 "${integration_first[@]}") &
(run_step 2 integration-2 "${integration_second[@]}") &
(run_step 3 spark "${spark_tests[@]}") &
(run_step 4 e2e tests/e2e) &
wait

failed=0
for name in "${steps[@]}"; do
  echo "--- $name ---"
  cat "$LOGS/$name.log"
  rc=$(cat "$LOGS/$name.rc" 2>/dev/null || echo 1)
  [ "$rc" -eq 0 ] || failed=1
done
for name in "${steps[@]}"; do
  printf '%s %s; ' "$name" "$(cat "$LOGS/$name.rc" 2>/dev/null || echo missing)"
done
echo "(exit codes)"
exit "$failed"
