"""bench.spark_bench with a warm-up: both runs go through one query, JVM, checkpoint and lake, only
the second is the measured rate, and each run's correctness is checked (every record read, each
distinct event once in the change log, the state rows the generator's model expects)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]


def test_a_warm_up_run_precedes_the_measured_one_in_the_same_stream(spark, broker):
    from bench.spark_bench import bench_spark

    # Small: one warm-up batch, then two measured ones and their fold (a batch with MERGEs costs
    # seconds of a cold JVM on two cores).
    out = bench_spark(broker.bootstrap, 2000, 1000, tables=2, fold_every=2, warmup_changes=1000, spark=spark)
    warm, whole = out["warmup"], out["whole_run"]
    assert out["failed_checks"] == {} and warm["failed_checks"] == []
    # Each run read its own records only: the measured one starts where the warm-up ended.
    assert warm["input_rows"] == 1000 and out["input_rows"] == 2000 and out["records"] == 2000
    assert whole["input_rows"] == 3000 and whole["records"] == 3000
    assert whole["query_seconds"] == pytest.approx(warm["query_seconds"] + out["query_seconds"], abs=0.01)
    assert out["changes_per_s"] == pytest.approx(2000 / out["query_seconds"], abs=0.05)  # rounded to 0.1
    # The lake-wide figures grow from one run to the next, and the checks compare them.
    assert warm["source_records"] == 1000 and out["source_records"] == 3000
    assert 0 < warm["changelog_rows"] == warm["distinct_events"] < out["changelog_rows"] == out["distinct_events"]
    assert 0 < out["current_state_rows"] == out["expected_state_rows"]
    assert warm["current_state_rows"] == warm["expected_state_rows"] > 0
    # The measured batches continue the warm-up's batch ids (same checkpoint), each fold once.
    warm_ids = [b["batch"] for b in warm["batch_durations_ms"]]
    ids = [b["batch"] for b in out["batch_durations_ms"]]
    assert min(ids) == max(warm_ids) + 1
    assert spark.sparkContext._jsc is not None  # a given session is left running


def test_without_a_warm_up_the_measured_run_is_the_whole_run(spark, broker):
    from bench.spark_bench import bench_spark

    out = bench_spark(broker.bootstrap, 1500, 1000, tables=2, spark=spark)
    assert out["warmup"] is None and out["failed_checks"] == {}
    assert out["whole_run"]["changes_per_s"] == out["changes_per_s"] and out["input_rows"] == 1500
    assert out["current_state_rows"] == out["expected_state_rows"] > 0
