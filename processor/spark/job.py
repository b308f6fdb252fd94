"""The Spark Structured Streaming job: txbuffer.changes -> change log + current-state tables."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import structlog

from processor.spark.decode import decode_changes
from processor.spark.kafka_source import SOURCE_NAME, KafkaClient, _nest
from processor.spark.kafka_source import register as register_source
from processor.spark.sinks import BatchWriter

log = structlog.get_logger(__name__)

NATIVE_KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
DEFAULT_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"


def spark_session(
    app: str = "txbuffer-spark",
    master: str = "local[2]",
    packages: str | None = None,
    shuffle_partitions: int = 2,
    driver_memory: str = "2g",
) -> Any:
    """A SparkSession for this job. Settings that matter on first start are fixed here."""
    # Workers must run this interpreter (fastavro, confluent-kafka and pyarrow live in it).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app)
        .master(master)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # The event_id dedup state grows with the log: RocksDB keeps it off the JVM heap.
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
    )
    if packages:
        builder = builder.config("spark.jars.packages", packages)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def has_native_kafka(spark: Any) -> bool:
    """True when spark-sql-kafka is on the classpath, so format("kafka") works."""
    try:
        loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(NATIVE_KAFKA_CLASS)
        return True
    except Exception:  # py4j wraps ClassNotFoundException
        return False


def kafka_stream(
    spark: Any,
    bootstrap: str,
    topic: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    ending_offsets: dict | None = None,
    native: bool | None = None,
) -> Any:
    """A Kafka-shaped streaming DataFrame from the native source if present, else ours."""
    if native is None:
        native = has_native_kafka(spark)
    if native:
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
            .option("includeHeaders", "true")
        )
    else:
        register_source(spark)
        reader = (
            spark.readStream.format(SOURCE_NAME)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets)
        )
        if ending_offsets is not None:
            reader = reader.option("endingOffsets", json.dumps(ending_offsets))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    log.info("spark.source", path="native" if native else SOURCE_NAME, topic=topic)
    return reader.load()


def parse_trigger(trigger: str) -> tuple[str, str | None]:
    """'available-now' | 'processingTime=10 seconds' | 'continuous-interval=10s' -> (kind, interval)."""
    if trigger in ("available-now", "availableNow"):
        return "available-now", None
    kind, _, interval = trigger.partition("=")
    if kind in ("processingTime", "continuous-interval") and interval:
        interval = interval.strip()
        if interval[-1:] in "smh" and interval[:-1].replace(".", "").isdigit():
            interval = f"{interval[:-1]} {dict(s='seconds', m='minutes', h='hours')[interval[-1]]}"
        return "processing-time", interval
    raise ValueError(f"unknown trigger {trigger!r}: use available-now or processingTime=<interval>")


def run_job(
    bootstrap: str,
    topic: str,
    checkpoint: str,
    output: str,
    trigger: str = "available-now",
    max_offsets_per_trigger: int | None = None,
    packages: str | None = None,
    starting_offsets: str = "earliest",
    spark: Any = None,
    native: bool | None = None,
    timeout_s: float | None = None,
) -> dict:
    """Run the query. available-now returns once everything present at start is committed."""
    spark = spark or spark_session(packages=packages)
    native = has_native_kafka(spark) if native is None else native
    kind, interval = parse_trigger(trigger)
    ending = None
    if kind == "available-now" and not native:
        # Spark 4.0 Python sources lack SupportsTriggerAvailableNow (and Spark's fallback runs a
        # single batch, ignoring maxOffsetsPerTrigger), so snapshot the end now and cap there.
        client = KafkaClient(bootstrap)
        try:
            ending = _nest(client.log_ends(client.partitions([topic])))
        finally:
            client.close()
    changes = decode_changes(
        kafka_stream(spark, bootstrap, topic, starting_offsets, max_offsets_per_trigger, ending, native)
    )
    deduped = changes.dropDuplicates(["event_id"])
    writer = (
        deduped.writeStream.queryName(f"txbuffer-{topic}")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(BatchWriter(output))
    )
    if kind == "available-now" and native:
        writer = writer.trigger(availableNow=True)
    elif kind == "available-now":
        writer = writer.trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(processingTime=interval)
    started = time.monotonic()
    query = writer.start()
    log.info("spark.query.started", id=str(query.id), trigger=trigger, checkpoint=checkpoint, output=output)
    try:
        if kind == "available-now" and not native:
            query.processAllAvailable()
            query.stop()
        else:
            query.awaitTermination(timeout_s)
    except KeyboardInterrupt:
        query.stop()
    finally:
        if query.exception() is not None:
            raise RuntimeError(f"spark query failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    summary = {
        "batches": len([p for p in progress if p["numInputRows"]]),
        "input_rows": rows,
        "seconds": round(time.monotonic() - started, 3),
        "ending_offsets": ending,
    }
    log.info("spark.query.finished", **summary)
    return summary
