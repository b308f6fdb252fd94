"""The SparkSession of the Spark stage: the launcher's settings, plus the connector jars and Delta.

Master, shuffle partitions, UI, memory: none of them is set here (one JVM default, the driver's
garbage collector, applies only when the launcher chose none: default_java_options; so does one
static SQL conf, the size of the generated-code cache: default_static_confs). They come from whoever launches
the job: spark-submit flags, PYSPARK_SUBMIT_ARGS, $SPARK_CONF_DIR/spark-defaults.conf, the MASTER
environment variable, or `txbuffer spark --conf key=value` (passed in as `conf`). Without any of
them Spark's own default applies (spark-submit's local[*]).

What this module does add is what the job cannot run without:
  * the connector jars (spark-sql-kafka, spark-avro, delta-spark and their runtime closure),
    resolved once from Maven Central into the txbuffer cache (deploy/maven/spark/pom.xml) and put
    on the session as local paths with spark.jars; no Ivy download at run time;
  * Delta's SQL extension and catalog.
A deployment whose image already has the jars (deploy/spark/Dockerfile) sets
TXBUFFER_SPARK_JARS=none and nothing is resolved.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

# One Spark release for pyspark and every connector (the pyspark pin in pyproject's `spark` extra).
SPARK_VERSION = "4.0.0"
CONNECTORS_BUNDLE = "spark"
NATIVE_KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
AVRO_CLASS = "org.apache.spark.sql.avro.functions"
DELTA_CLASS = "io.delta.tables.DeltaTable"

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")

# The driver JVM's collector when this module starts the JVM and the launcher chose none: the
# throughput collector. G1's concurrent and barrier work costs CPU that two cores lack (change-log
# stage 37.8-38.1 against 41.9-43.0 us/change, docs/lakehouse.md, session 26).
DRIVER_JAVA_DEFAULTS = "-XX:+UseParallelGC"
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
_JAVA_OPTION_KEYS = (DEFAULT_JAVA_OPTIONS, "spark.driver.extraJavaOptions")
_GC_CHOICE = re.compile(r"-XX:\+Use\w*GC\b")


# Spark's cache of compiled generated classes (static: before the JVM's first query). Its default,
# 100, is fewer than one fold's classes (ten tables' sources and MERGEs, inspect), so each fold
# evicted the last one's and Janino and then the JIT compiled the same code again
# (docs/lakehouse.md, sessions 28 and 29). A class is a few kB to ~100 kB of metaspace.
CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"
STATIC_DEFAULTS = {CODEGEN_CACHE: "2000"}


def _spark_defaults_file(environ: dict[str, str]) -> Path | None:
    """The spark-defaults.conf pyspark's launcher reads: $SPARK_CONF_DIR, else $SPARK_HOME/conf."""
    conf_dir = environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = environ.get("SPARK_HOME")
        if not home:
            try:
                import pyspark

                home = str(Path(pyspark.__file__).parent)
            except ImportError:
                return None
        conf_dir = str(Path(home) / "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    return path if path.is_file() else None


def _spark_defaults(environ: dict[str, str]) -> list[tuple[str, str]]:
    """(key, line) of each setting in the launcher's spark-defaults.conf (comments and blanks skipped)."""
    path = _spark_defaults_file(environ)
    lines = path.read_text().splitlines() if path is not None else []
    return [(line.split(None, 1)[0], line) for line in lines if line.strip() and not line.strip().startswith("#")]


def _jvm_running(environ: dict[str, str]) -> bool:
    if environ.get("PYSPARK_GATEWAY_PORT"):
        return True  # spark-submit launched this interpreter: the driver JVM runs already
    try:
        from pyspark import SparkContext
    except ImportError:
        return False
    return SparkContext._active_spark_context is not None


def default_java_options(
    conf: dict[str, str] | None, environ: dict[str, str] | None = None, jvm_running: bool | None = None
) -> dict[str, str]:
    """{spark.driver.defaultJavaOptions: -XX:+UseParallelGC} when it would apply and the launcher
    has not chosen: {} when a JVM already runs (spark-submit started it, or a SparkContext is
    active), when the launcher sets spark.driver.defaultJavaOptions itself, or when any Java
    options it gives (--conf, PYSPARK_SUBMIT_ARGS, spark-defaults.conf, JAVA_TOOL_OPTIONS,
    JDK_JAVA_OPTIONS, _JAVA_OPTIONS) select a collector. Other launcher options (extraJavaOptions
    without a collector) keep theirs: Spark puts defaultJavaOptions before them."""
    env = dict(os.environ if environ is None else environ)
    conf = conf or {}
    if (_jvm_running(env) if jvm_running is None else jvm_running) or conf.get(DEFAULT_JAVA_OPTIONS) is not None:
        return {}
    texts = [conf.get(key, "") for key in _JAVA_OPTION_KEYS]
    submit_args = env.get("PYSPARK_SUBMIT_ARGS", "")
    if "defaultJavaOptions" in submit_args:
        return {}
    texts.append(submit_args)
    for key, line in _spark_defaults(env):
        if key == DEFAULT_JAVA_OPTIONS:
            return {}
        if key in _JAVA_OPTION_KEYS:
            texts.append(line)
    texts += [env.get(k, "") for k in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")]
    if any(_GC_CHOICE.search(t) for t in texts):
        return {}
    return {DEFAULT_JAVA_OPTIONS: DRIVER_JAVA_DEFAULTS}


def default_static_confs(
    conf: dict[str, str] | None, environ: dict[str, str] | None = None, jvm_running: bool | None = None
) -> dict[str, str]:
    """STATIC_DEFAULTS that apply: the static confs the launcher has not set itself (in `conf`,
    PYSPARK_SUBMIT_ARGS or spark-defaults.conf); {} when a JVM already runs (a static conf no longer
    changes then)."""
    env = dict(os.environ if environ is None else environ)
    if _jvm_running(env) if jvm_running is None else jvm_running:
        return {}
    chosen = set(conf or {}) | {key for key, _ in _spark_defaults(env)}
    submit_args = env.get("PYSPARK_SUBMIT_ARGS", "")
    return {k: v for k, v in STATIC_DEFAULTS.items() if k not in chosen and k not in submit_args}


def _artifact(jar_name: str) -> str:
    m = _VERSIONED_JAR.match(jar_name)
    return m.group("artifact") if m else jar_name


def pyspark_jar_artifacts() -> set[str]:
    """Artifacts pyspark ships itself: a second copy of any of them would conflict on the classpath."""
    import pyspark

    return {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def connector_jars() -> list[str]:
    """Local jar paths of the connector bundle, minus what pyspark ships; [] when unavailable.

    TXBUFFER_SPARK_JARS=none turns resolution off (the image has them); any other value is taken
    as a comma list of jars. Without Maven or a JDK the job falls back to the Python Kafka source
    and says so, and the Delta sinks then fail with a clear error when they run.
    """
    setting = os.environ.get("TXBUFFER_SPARK_JARS")
    if setting is not None:
        return [] if setting.strip().lower() in ("", "none") else [j for j in setting.split(",") if j]
    from processor.kafka.jars import BundleError, bundle_pom, ensure_bundle

    try:
        libs = ensure_bundle(CONNECTORS_BUNDLE, SPARK_VERSION, bundle_pom(CONNECTORS_BUNDLE))
    except BundleError as exc:
        log.warning("spark.connectors.unavailable", reason=str(exc))
        return []
    shipped = pyspark_jar_artifacts()
    jars = sorted(p for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)
    return [str(p) for p in jars]


def spark_session(app: str = "txbuffer-spark", conf: dict[str, str] | None = None, connectors: bool = True) -> Any:
    """getOrCreate with the launcher's settings; `conf` (e.g. from --conf flags) on top."""
    # Python workers must run this interpreter (fastavro, confluent-kafka and pyarrow live in it).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if master := os.environ.get("MASTER"):
        builder = builder.master(master)  # pyspark's launcher ignores MASTER; spark-submit honours it
    # Before the launcher's confs: a JVM default, set only where the launcher chose nothing.
    for key, value in {**default_java_options(conf), **default_static_confs(conf)}.items():
        builder = builder.config(key, value)
    jars = connector_jars() if connectors else []
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
        for key, value in DELTA_CONF.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TXBUFFER_SPARK_LOG_LEVEL", "WARN"))
    # Job-level defaults (not launcher choices), applied only where the launcher left them unset.
    defaults = {
        # The bounded event_id dedup state lives off the JVM heap.
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        # Each batch then uploads the state changes only, not a RocksDB snapshot of the whole window.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Counting the state's rows costs a RocksDB read before every write; the dedup reads each
        # id once already. Off: 16.8-18.1 against 20.9-21.2 us/change for decode + dedup
        # (docs/lakehouse.md); the query progress's numRowsTotal of the dedup is then not kept.
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Delta rebuilds table snapshots with this many tasks (default 50): far too many for the
        # few small log files of a streaming sink between checkpoints.
        "spark.databricks.delta.snapshotPartitions": str(max(1, spark.sparkContext.defaultParallelism)),
    }
    explicit = spark.sparkContext.getConf()
    for key, value in defaults.items():
        if not explicit.contains(key):
            spark.conf.set(key, value)
    log.info(
        "spark.session",
        master=spark.sparkContext.master,
        connectors=len(jars),
        shuffle_partitions=spark.conf.get("spark.sql.shuffle.partitions"),
        driver_default_java_options=spark.sparkContext.getConf().get(DEFAULT_JAVA_OPTIONS, None),
    )
    return spark


def has_class(spark: Any, name: str) -> bool:
    try:
        loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(name)
        return True
    except Exception:  # py4j wraps ClassNotFoundException
        return False


def has_native_kafka(spark: Any) -> bool:
    """True when spark-sql-kafka and spark-avro are on the classpath: format("kafka") + from_avro."""
    return has_class(spark, NATIVE_KAFKA_CLASS) and has_class(spark, AVRO_CLASS)


def require_delta(spark: Any) -> None:
    if not has_class(spark, DELTA_CLASS):
        raise RuntimeError(
            "delta-spark is not on the Spark classpath: install Maven and a JDK so txbuffer can resolve "
            "deploy/maven/spark/pom.xml, or pass the jars with spark-submit --jars / TXBUFFER_SPARK_JARS"
        )
