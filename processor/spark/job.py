"""The Spark Structured Streaming job: txbuffer.changes -> Delta change log + current-state tables."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import structlog
from pyspark.sql import functions as F

from processor.spark.decode import decode_changes
from processor.spark.delta_sink import DeltaSinks
from processor.spark.kafka_source import SOURCE_NAME, KafkaClient, _nest
from processor.spark.kafka_source import register as register_source
from processor.spark.session import has_native_kafka, require_delta, spark_session

log = structlog.get_logger(__name__)

__all__ = ["has_native_kafka", "kafka_stream", "parse_trigger", "run_job", "spark_session", "changes_stream"]


def kafka_stream(
    spark: Any,
    bootstrap: str,
    topic: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    ending_offsets: dict | None = None,
    native: bool = True,
    kafka_options: dict[str, str] | None = None,
) -> Any:
    """A Kafka-shaped streaming DataFrame: format("kafka") when native, else the Python source."""
    if native:
        reader = spark.readStream.format("kafka").option("subscribe", topic).option("failOnDataLoss", "true")
    else:
        register_source(spark)
        reader = spark.readStream.format(SOURCE_NAME).option("subscribe", topic)
        if ending_offsets is not None:
            reader = reader.option("endingOffsets", json.dumps(ending_offsets))
    reader = reader.option("kafka.bootstrap.servers", bootstrap).option("startingOffsets", starting_offsets)
    for key, value in (kafka_options or {}).items():
        reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    log.info("spark.source", path="native" if native else SOURCE_NAME, topic=topic)
    return reader.load()


def changes_stream(spark: Any, bootstrap: str, topic: str, native: bool, **kw: Any) -> Any:
    """Decoded ChangeEvents (processor.spark.decode.CHANGE_COLUMNS) from either Kafka path."""
    return decode_changes(kafka_stream(spark, bootstrap, topic, native=native, **kw), native)


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


def app_id_for(checkpoint: str) -> str:
    """Delta's idempotent-write app id: one per checkpoint, the identity of the query's batch ids."""
    return "txbuffer-" + hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:16]


def _interrupted() -> bool:
    """True while an exception (a timeout, Ctrl-C) unwinds: the JVM may no longer answer then."""
    import sys

    return sys.exc_info()[0] is not None


def dropped_by_watermark(progress: list[dict]) -> int:
    return sum(op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p.get("stateOperators", []))


def batch_durations(progress: list[dict]) -> list[dict]:
    """Per micro-batch: its rows and where its time went (ms), from the query progress. addBatch is
    the Delta writes (foreachBatch); getBatch, latestOffset, walCommit and commitOffsets the source
    and the checkpoint; `started` the batch's start (ISO 8601, UTC)."""
    return [
        {"batch": p["batchId"], "rows": p["numInputRows"], "started": p.get("timestamp"), **p.get("durationMs", {})}
        for p in progress
    ]


STAGES = ("decode", "dedup", "changelog", "full")
FOLD_EVERY_CONF = "spark.txbuffer.state.foldEvery"


def _noop_write(df: Any, batch_id: int) -> None:
    """foreachBatch of a cut pipeline (run_job's `stage`): compute every row, write nothing."""
    df.write.format("noop").mode("overwrite").save()


def run_job(
    bootstrap: str,
    topic: str,
    checkpoint: str,
    output: str,
    trigger: str = "available-now",
    max_offsets_per_trigger: int | None = None,
    starting_offsets: str = "earliest",
    spark: Any = None,
    native: bool | None = None,
    timeout_s: float | None = None,
    dedup_horizon: str = "1 hour",
    kafka_options: dict[str, str] | None = None,
    until_rows: int | None = None,
    merge_threads: int = 4,
    stage: str = "full",
    fold_every: int | None = None,
) -> dict:
    """Run the query. available-now returns once everything present at start is committed.

    Duplicates of an event_id (the processor's at-least-once redeliveries) are dropped while the
    commit-time watermark (newest commit seen minus `dedup_horizon`) has not passed them; the dedup
    state holds only that window. Spark drops a change whose commit time is already behind the
    watermark; the job reports any such drop as an error (`numRowsDroppedByWatermark`).
    `timeout_s` and `until_rows` (benchmarks) stop a processing-time run. `merge_threads`: how many
    current-state tables a batch MERGEs at once (processor.spark.delta_sink). `stage` (benchmarks)
    cuts the pipeline short to measure its parts: "decode" (Kafka read and decode into a no-op
    write), "dedup" (and the event_id dedup), "changelog" (and the batch's cache, inspect aggregate
    and change-log append), "full" (and the current-state MERGEs). `fold_every` (default: the
    session conf spark.txbuffer.state.foldEvery, else 1): MERGE the current-state tables every that
    many micro-batches, from what the change log gathered meanwhile, instead of every batch; when
    the query ends, what is left is folded before this returns.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: one of {', '.join(STAGES)}")
    spark = spark or spark_session()
    require_delta(spark)
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
    changes = changes_stream(
        spark,
        bootstrap,
        topic,
        native,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
        ending_offsets=ending,
        kafka_options=kafka_options,
    )
    deduped = (
        changes.withColumn("commit_ts", F.timestamp_millis("commit_ts_ms"))
        .withWatermark("commit_ts", dedup_horizon)
        .dropDuplicatesWithinWatermark(["event_id"])
    )
    if fold_every is None:
        fold_every = int(spark.conf.get(FOLD_EVERY_CONF, "1") or "1")
    if fold_every < 1:
        raise ValueError(f"fold_every must be at least 1, not {fold_every}")
    sinks = DeltaSinks(
        output, app_id_for(checkpoint), merge_threads=merge_threads, state=stage == "full", fold_every=fold_every
    )
    target: Any = sinks if stage in ("changelog", "full") else _noop_write
    stream = changes if stage == "decode" else deduped
    writer = (
        stream.writeStream.queryName(f"txbuffer-{topic}").option("checkpointLocation", checkpoint).foreachBatch(target)
    )
    if kind == "available-now" and native:
        writer = writer.trigger(availableNow=True)
    elif kind == "available-now":
        writer = writer.trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(processingTime=interval)
    started = time.monotonic()
    query = writer.start()
    log.info(
        "spark.query.started", id=str(query.id), trigger=trigger, native=native, checkpoint=checkpoint, output=output
    )
    reported = 0
    try:
        if kind == "available-now" and not native:
            query.processAllAvailable()
            query.stop()
        else:
            deadline = None if timeout_s is None else started + timeout_s
            while query.isActive and (deadline is None or time.monotonic() < deadline):
                query.awaitTermination(5 if deadline is None else max(0.1, min(5, deadline - time.monotonic())))
                dropped = dropped_by_watermark(query.recentProgress)
                if dropped > reported:
                    log.error("spark.rows_dropped_by_watermark", rows=dropped, horizon=dedup_horizon)
                    reported = dropped
                if until_rows is not None and sum(p["numInputRows"] for p in query.recentProgress) >= until_rows:
                    break
            if query.isActive:
                query.stop()  # a deadline or a row budget ended a processing-time run
    except KeyboardInterrupt:
        query.stop()
    finally:
        failure = None if _interrupted() else query.exception()
        if failure is not None:
            raise RuntimeError(f"spark query failed: {failure}")
    progress = query.recentProgress
    if sinks.state and sinks.fold_every > 1 and progress and failure is None:
        # Fold the batches after the last fold. Only completed batches (those in the progress): a
        # batch the stop interrupted is replayed by the next run and folded there.
        flushed = sinks.fold(spark, max(p["batchId"] for p in progress))
        if flushed:
            log.info("spark.state.folded_at_end", **{k: v for k, v in flushed.items() if k != "merge_jobs"})
    summary = {
        "native": native,
        "batches": len([p for p in progress if p["numInputRows"]]),
        "input_rows": sum(p["numInputRows"] for p in progress),
        "dropped_by_watermark": dropped_by_watermark(progress),
        "batch_seconds": [round(p["durationMs"].get("triggerExecution", 0) / 1000, 2) for p in progress],
        "batch_durations": batch_durations(progress),
        "seconds": round(time.monotonic() - started, 3),
        "ending_offsets": ending,
        "merge_threads": merge_threads,
        "fold_every": fold_every,
        "writes": sinks.written,  # per batch: inspect, change log, MERGE seconds and Spark jobs per table
    }
    if summary["dropped_by_watermark"]:
        log.error("spark.rows_dropped_by_watermark", rows=summary["dropped_by_watermark"], horizon=dedup_horizon)
    log.info("spark.query.finished", **{k: v for k, v in summary.items() if k != "writes"})
    return summary
