#!/usr/bin/env bash
# `make test`: the suite in three lanes run side by side (serially it takes over an hour). Each lane
# is pytest runs in sequence, each run on its own session broker: the Spark integration tests, then
# a few other integration files; the rest of the integration tests; the unit tests (CPU-bound, no
# broker), then the end-to-end tests. The lanes were balanced by each run's time in a clean-clone
# rehearsal (--durations): with the integration group whole in one lane it took 24 of the suite's 26
# minutes, and a fourth lane only made every lane slower (two cores). A line per finished run shows
# progress; every report is printed at the end; any run failing fails the suite.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export TXBUFFER_CODEC=compiled  # a failed codec build fails the suite instead of falling back
pytest_args=(-q -rs -p no:cacheprovider --durations=10)
LOGS=.test-lanes
rm -rf "$LOGS" && mkdir -p "$LOGS"

# The integration file that follows the Spark tests in their lane (about two minutes); every other
# integration file outside Spark, a new one too, runs in the integration lane.
after_spark=(tests/integration/test_failover.py)
integration=()
for f in tests/integration/test_*.py; do
  case " ${after_spark[*]} " in *" $f "*) continue ;; esac
  case "$f" in tests/integration/test_spark_*) continue ;; esac
  integration+=("$f")
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
    $(((SECONDS - t0) % 60)) "$(grep -aE '^[0-9]+ (passed|failed|errors?|skipped)' "$LOGS/$name.log" | tail -1)"
}

# The package also runs without the compiled codec (no C compiler: processor.core.codec falls back to
# fastavro and the Python lane); unit-fastavro runs the engine and emission tests on that fallback.
# Not test_codec_properties.py: it compares the compiled codec with fastavro and with the fallback's
# own stream and writer by name, whatever TXBUFFER_CODEC says, so a second run repeated the first
# (54 s alone, about 90 s beside the other lanes).
fallback_tests=(
  tests/unit/test_engine.py tests/unit/test_engine_properties.py
  tests/unit/test_engine_staging.py tests/unit/test_emitter_settlement.py
)
steps=(spark integration-after-spark integration unit unit-fastavro e2e)
(run_step 1 spark "${spark_tests[@]}"; run_step 1 integration-after-spark "${after_spark[@]}") &
(run_step 2 integration "${integration[@]}") &
(run_step 3 unit tests/unit; TXBUFFER_CODEC=fastavro run_step 3 unit-fastavro "${fallback_tests[@]}"
  run_step 3 e2e tests/e2e) &
wait

failed=0
codes=()
for name in "${steps[@]}"; do
  echo "--- $name ---"
  cat "$LOGS/$name.log"
  rc=$(cat "$LOGS/$name.rc" 2>/dev/null || echo missing)
  codes+=("$name $rc;")
  [ "$rc" = 0 ] || failed=1
done
echo "${codes[*]} (exit codes)"
exit "$failed"
