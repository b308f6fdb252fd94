"""The driver JVM's default Java options (processor.spark.session.default_java_options): the
throughput collector, only where it applies and the launcher chose no collector. No JVM here."""

from __future__ import annotations

import pytest

from processor.spark.session import (
    CODEGEN_CACHE,
    DEFAULT_JAVA_OPTIONS,
    DRIVER_JAVA_DEFAULTS,
    default_java_options,
    default_static_confs,
)

PARALLEL = {DEFAULT_JAVA_OPTIONS: DRIVER_JAVA_DEFAULTS}


def options(conf=None, jvm_running=False, **environ):
    environ.setdefault("SPARK_CONF_DIR", "/nonexistent-txbuffer-conf")  # no spark-defaults.conf
    return default_java_options(conf, environ, jvm_running=jvm_running)


def test_nothing_chosen_gives_the_parallel_collector():
    assert DRIVER_JAVA_DEFAULTS == "-XX:+UseParallelGC"
    assert options() == PARALLEL
    assert options({"spark.master": "local[2]", "spark.driver.memory": "2g"}) == PARALLEL


def test_launcher_options_without_a_collector_keep_the_default_beside_them():
    # Spark puts defaultJavaOptions before extraJavaOptions: both apply.
    assert options({"spark.driver.extraJavaOptions": "-XX:StartFlightRecording=filename=x.jfr"}) == PARALLEL


@pytest.mark.parametrize(
    "conf",
    [
        {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"},
        {"spark.driver.extraJavaOptions": "-Xss4m -XX:+UseSerialGC"},
        {"spark.driver.extraJavaOptions": "-XX:+UseZGC"},
        {"spark.driver.defaultJavaOptions": "-Xss4m"},  # the launcher's own default list
    ],
)
def test_a_collector_or_default_list_from_conf_wins(conf):
    assert options(conf) == {}


def test_the_launcher_environment_wins():
    assert options(PYSPARK_SUBMIT_ARGS="--driver-java-options -XX:+UseG1GC pyspark-shell") == {}
    assert options(PYSPARK_SUBMIT_ARGS="--conf spark.driver.defaultJavaOptions=-Xss4m pyspark-shell") == {}
    assert options(PYSPARK_SUBMIT_ARGS="--master local[2] pyspark-shell") == PARALLEL
    assert options(JAVA_TOOL_OPTIONS="-XX:+UseShenandoahGC") == {}
    assert options(JDK_JAVA_OPTIONS="-XX:+UseG1GC") == {}


def test_spark_defaults_conf_wins(tmp_path):
    conf_file = tmp_path / "spark-defaults.conf"
    conf_file.write_text("spark.driver.extraJavaOptions  -XX:+UseG1GC\n")
    assert options(SPARK_CONF_DIR=str(tmp_path)) == {}
    conf_file.write_text("spark.driver.defaultJavaOptions  -Xss4m\n")
    assert options(SPARK_CONF_DIR=str(tmp_path)) == {}
    conf_file.write_text("# spark.driver.extraJavaOptions -XX:+UseG1GC\nspark.master local[2]\n")
    assert options(SPARK_CONF_DIR=str(tmp_path)) == PARALLEL


def test_a_running_jvm_gets_nothing():
    assert options(jvm_running=True) == {}
    assert default_java_options(None, {"PYSPARK_GATEWAY_PORT": "4242", "SPARK_CONF_DIR": "/nonexistent"}) == {}


# ---- static SQL defaults (default_static_confs) ------------------------------------------------


def static(conf=None, jvm_running=False, **environ):
    environ.setdefault("SPARK_CONF_DIR", "/nonexistent-txbuffer-conf")
    return default_static_confs(conf, environ, jvm_running=jvm_running)


def test_the_generated_code_cache_holds_a_folds_classes():
    # Spark's default (100) is fewer classes than one fold compiles: each fold evicted the last one's.
    assert static() == {CODEGEN_CACHE: "2000"}
    assert int(static()[CODEGEN_CACHE]) > 100


def test_the_launchers_cache_size_wins(tmp_path):
    assert static({CODEGEN_CACHE: "50"}) == {}
    assert static(PYSPARK_SUBMIT_ARGS=f"--conf {CODEGEN_CACHE}=50 pyspark-shell") == {}
    conf_file = tmp_path / "spark-defaults.conf"
    conf_file.write_text(f"{CODEGEN_CACHE}  50\n")
    assert static(SPARK_CONF_DIR=str(tmp_path)) == {}
    conf_file.write_text(f"# {CODEGEN_CACHE} 50\nspark.master local[2]\n")
    assert static(SPARK_CONF_DIR=str(tmp_path)) == {CODEGEN_CACHE: "2000"}


def test_a_running_jvm_gets_no_static_default():
    assert static(jvm_running=True) == {}
    assert static(PYSPARK_GATEWAY_PORT="12345", jvm_running=None) == {}
