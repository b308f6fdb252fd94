"""A Spark 4 Python streaming data source for Kafka, built on confluent-kafka.

Used when spark-sql-kafka is not on the classpath. It yields the same columns as
`format("kafka")`: topic, partition, offset, key, value, timestamp, timestampType, headers.

Offsets are JSON `{"<topic>": {"<partition>": next_offset}}`, as in the native source, and
every micro-batch is an explicit, replayable offset range, so Spark's checkpoint makes the
pipeline exactly-once. Readers use `assign()` and never join a consumer group.

Options:
  kafka.bootstrap.servers (or bootstrap)   required
  subscribe                                 topic (or comma-separated topics), required
  startingOffsets   earliest (default, the log start, not 0) | latest | JSON
  endingOffsets     JSON upper bound: the query stops growing there (available-now emulation)
  maxOffsetsPerTrigger   records per micro-batch, spread over partitions by backlog
  maxRecordsPerPartition split larger ranges into several Spark tasks (default 250000)
  failOnDataLoss    true (default): missing offsets raise KafkaOffsetOutOfRange
  pollTimeoutMs     how long read() waits for records it knows exist (default 30000)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SOURCE_NAME = "txbuffer-kafka"

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [
                        StructField("key", StringType(), True),
                        StructField("value", BinaryType(), True),
                    ]
                )
            ),
            True,
        ),
    ]
)

# Consumer settings for reads by assignment: no group is ever joined, nothing is committed.
_CONSUMER_CONF = {
    "group.id": "txbuffer-spark-unused",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "auto.offset.reset": "error",
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 10485760,
}


class KafkaOffsetOutOfRange(RuntimeError):
    """Requested offsets are no longer (or not yet) in the log."""


class KafkaRange(InputPartition):
    """Records [start, end) of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _flatten(offsets: dict) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nest(flat: dict[tuple[str, int], int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def rate_limit(start: dict[tuple[str, int], int], end: dict[tuple[str, int], int], limit: int) -> dict:
    """Cap the total advance at `limit` records, shared by backlog size (largest remainder first)."""
    backlog = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    share = {tp: limit * b // total for tp, b in backlog.items()}
    spare = limit - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: (-(limit * backlog[tp] % total), tp))[:spare]:
        share[tp] += 1
    return {tp: start.get(tp, end[tp]) + share[tp] for tp in end}


class KafkaClient:
    """Offset queries for the driver, through the one Kafka layer (processor.kafka.end_offsets).

    ListOffsets answers the true log start and end on Apache Kafka; the AdminClient it uses is
    created per call and never pickled with the reader."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0):
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s

    def partitions(self, topics: list[str]) -> list[tuple[str, int]]:
        from processor.kafka.end_offsets import topic_partitions

        out: list[tuple[str, int]] = []
        for topic in topics:
            try:
                out += topic_partitions(self.bootstrap, topic, self.timeout_s)
            except LookupError as exc:
                raise LookupError(f"{SOURCE_NAME}: {exc}") from exc
        return out

    def log_starts(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from processor.kafka.end_offsets import list_offsets

        return list_offsets(self.bootstrap, tps, "earliest", self.timeout_s)

    def log_ends(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from processor.kafka.end_offsets import list_offsets

        return list_offsets(self.bootstrap, tps, "latest", self.timeout_s)

    def close(self) -> None:
        """Nothing to release: every query uses a short-lived admin client."""


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]):
        opts = {k.lower(): v for k, v in options.items()}
        self.bootstrap = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap")
        if not self.bootstrap:
            raise ValueError(f"{SOURCE_NAME}: option kafka.bootstrap.servers is required")
        self.topics = [t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()]
        if not self.topics:
            raise ValueError(f"{SOURCE_NAME}: option subscribe is required")
        self.starting = opts.get("startingoffsets", "earliest").strip()
        ending = opts.get("endingoffsets")
        self.ending = _flatten(json.loads(ending)) if ending else None
        limit = opts.get("maxoffsetspertrigger")
        self.limit = int(limit) if limit else None
        self.split = int(opts.get("maxrecordsperpartition", 250_000))
        self.fail_on_data_loss = opts.get("failondataloss", "true").lower() != "false"
        self.poll_timeout_s = int(opts.get("polltimeoutms", 30_000)) / 1000
        self._client: KafkaClient | None = None
        # Where the next batch starts: set by initialOffset, then by partitions() (Spark plans
        # every batch there, and on restart calls partitions(last, last) with the checkpoint).
        self._cursor: dict[tuple[str, int], int] | None = None

    # Driver side: one reader lives for the whole query, so one client serves all calls.
    def _kafka(self) -> KafkaClient:
        if self._client is None:
            self._client = KafkaClient(self.bootstrap)
        return self._client

    def initialOffset(self) -> dict:
        kafka = self._kafka()
        tps = kafka.partitions(self.topics)
        if self.starting == "earliest":
            start = kafka.log_starts(tps)
        elif self.starting == "latest":
            start = kafka.log_ends(tps)
        else:
            given = _flatten(json.loads(self.starting))
            low, high = kafka.log_starts(tps), kafka.log_ends(tps)
            start = {}
            for tp in tps:
                off = given.get(tp, low[tp])
                off = {-2: low[tp], -1: high[tp]}.get(off, off)  # Kafka's earliest/latest markers
                if not low[tp] <= off <= high[tp]:
                    if self.fail_on_data_loss:
                        raise KafkaOffsetOutOfRange(
                            f"{SOURCE_NAME}: OffsetOutOfRange: startingOffsets {tp[0]}-{tp[1]}@{off} is outside "
                            f"the log [{low[tp]}, {high[tp]}); set failOnDataLoss=false to clamp"
                        )
                    off = min(max(off, low[tp]), high[tp])
                start[tp] = off
        self._cursor = dict(start)
        return _nest(start)

    def latestOffset(self) -> dict:
        kafka = self._kafka()
        tps = kafka.partitions(self.topics)
        end = kafka.log_ends(tps)
        if self.ending is not None:
            end = {tp: min(o, self.ending.get(tp, o)) for tp, o in end.items()}
        cursor = self._cursor if self._cursor is not None else _flatten(self.initialOffset())
        # A partition that appeared since the last batch is read from its log start.
        new = [tp for tp in end if tp not in cursor]
        if new:
            cursor.update(kafka.log_starts(new))
        end = {tp: max(o, cursor[tp]) for tp, o in end.items()}
        if self.limit is not None:
            end = rate_limit(cursor, end, self.limit)
        return _nest(end)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        s, e = _flatten(start), _flatten(end)
        self._cursor = dict(e)
        out = []
        for (topic, p), hi in sorted(e.items()):
            lo = s.get((topic, p), 0)
            while lo < hi:
                out.append(KafkaRange(topic, p, lo, min(hi, lo + self.split)))
                lo = out[-1].end
        return out

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing is committed to Kafka.
        pass

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # Executor side: called on a cloudpickled copy, so the consumer is created here.
    def read(self, partition: KafkaRange) -> Iterator[Any]:
        return read_range(self.bootstrap, partition, self.fail_on_data_loss, self.poll_timeout_s)


def read_range(
    bootstrap: str, part: KafkaRange, fail_on_data_loss: bool = True, poll_timeout_s: float = 30.0, chunk: int = 20_000
) -> Iterator[Any]:
    """Yield Arrow record batches for [part.start, part.end) of one partition."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(KAFKA_SCHEMA)
    consumer = Consumer({"bootstrap.servers": bootstrap, **_CONSUMER_CONF})
    try:
        tp = TopicPartition(part.topic, part.partition)
        low, _ = consumer.get_watermark_offsets(tp, timeout=10)
        pos = part.start
        if pos < low:
            if fail_on_data_loss:
                raise KafkaOffsetOutOfRange(
                    f"{SOURCE_NAME}: OffsetOutOfRange: {part.topic}-{part.partition} offsets [{pos}, {low}) are "
                    f"gone (log start is {low}; retention or deletion); set failOnDataLoss=false to skip them"
                )
            pos = low
        consumer.assign([TopicPartition(part.topic, part.partition, pos)])
        rows: list = []
        last_progress = time.monotonic()
        while pos < part.end:
            # consume() waits the whole timeout when fewer than n records remain: cap n.
            msgs = consumer.consume(min(10_000, part.end - pos, chunk - len(rows)), 0.5)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        raise KafkaOffsetOutOfRange(
                            f"{SOURCE_NAME}: OffsetOutOfRange reading {part!r} at {pos}: {err.str()}"
                        )
                    if err.fatal():
                        raise RuntimeError(f"{SOURCE_NAME}: fatal Kafka error reading {part!r}: {err.str()}")
                    continue
                off = msg.offset()
                if off >= part.end:
                    pos = part.end
                    break
                ts_type, ts = msg.timestamp()
                rows.append((msg.key(), msg.value(), off, ts, ts_type, msg.headers()))
                pos = off + 1
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > poll_timeout_s:
                raise TimeoutError(f"{SOURCE_NAME}: no records for {poll_timeout_s}s reading {part!r} at {pos}")
            if len(rows) >= chunk:
                yield _to_batch(rows, part, schema, pa)
                rows = []
        if rows:
            yield _to_batch(rows, part, schema, pa)
    finally:
        consumer.close()


def _to_batch(rows: list, part: KafkaRange, schema: Any, pa: Any) -> Any:
    keys, values, offsets, ts, ts_types, headers = zip(*rows)
    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([part.topic] * n, pa.string()),
            pa.array([part.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            # Kafka timestamps are ms; Spark timestamps are UTC microseconds.
            pa.array([t * 1000 if t >= 0 else None for t in ts], pa.timestamp("us", tz="UTC")),
            # confluent-kafka: 0 none, 1 create time, 2 log append; Spark: 0 create, 1 log append, -1 none.
            pa.array([tt - 1 if tt > 0 else -1 for tt in ts_types], pa.int32()),
            pa.array(
                [[{"key": k, "value": v} for k, v in h] if h else [] for h in headers], schema.field("headers").type
            ),
        ],
        schema=schema,
    )


class KafkaDataSource(DataSource):
    """`spark.readStream.format("txbuffer-kafka")`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)


def register(spark: Any) -> None:
    spark.dataSource.register(KafkaDataSource)
