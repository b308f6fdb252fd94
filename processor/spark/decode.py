"""Decode ChangeEvent Avro (schemas/change_event.avsc) into typed Spark columns, on either Kafka path.

Native path: `from_avro` (spark-avro) in the JVM. Fallback: fastavro in `mapInArrow`. Both give
CHANGE_COLUMNS, row for row, and a test holds them equal.

Row maps (`key`, `before`, `after`) keep the Avro union per column, as Spark-avro writes it with
stable identifiers: map<string, struct<member_boolean, member_long, member_double, member_string,
member_bytes>>, exactly one member set (a null value is a null struct). The Delta sinks turn them
into typed columns (processor.spark.row_types).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Avro union branch -> (struct member, Spark type), in the schema's branch order.
MEMBERS = {
    "boolean": ("member_boolean", BooleanType()),
    "long": ("member_long", LongType()),
    "double": ("member_double", DoubleType()),
    "string": ("member_string", StringType()),
    "bytes": ("member_bytes", BinaryType()),
}
VALUE_TYPE = StructType([StructField(name, t, True) for name, t in MEMBERS.values()])
ROW_MAP = MapType(StringType(), VALUE_TYPE, True)

CHANGE_COLUMNS = StructType(
    [
        StructField("event_id", StringType(), True),
        StructField("table", StringType(), True),
        StructField("op", StringType(), True),
        StructField("key", ROW_MAP, True),
        StructField("before", ROW_MAP, True),
        StructField("after", ROW_MAP, True),
        StructField("ddl", StringType(), True),
        StructField("xid", StringType(), True),
        StructField("seq", LongType(), True),
        StructField("scn", LongType(), True),
        StructField("commit_scn", LongType(), True),
        StructField("commit_ts_ms", LongType(), True),
        StructField("ts_ms", LongType(), True),
        StructField("thread", IntegerType(), True),
        StructField("user", StringType(), True),
        StructField("row_id", StringType(), True),
        StructField("attrs", MapType(StringType(), StringType(), True), True),
        StructField("tx_total_order", LongType(), True),
        StructField("tx_data_collection_order", LongType(), True),
        StructField("kafka_partition", IntegerType(), True),
        StructField("kafka_offset", LongType(), True),
        StructField("kafka_timestamp", TimestampType(), True),
    ]
)


@functools.cache
def change_schema_json() -> str:
    import json

    from processor.core.events import change_schema

    return json.dumps(change_schema())


def decode_native(kafka_df: Any) -> Any:
    """format("kafka") rows -> CHANGE_COLUMNS with from_avro. A record that does not decode fails
    the query (FAILFAST): the processor's DLQ is where bad input belongs, not the changes topic."""
    from pyspark.sql.avro.functions import from_avro

    e = F.col("e")
    ev = from_avro(
        F.col("value"), change_schema_json(), {"mode": "FAILFAST", "enableStableIdentifiersForUnionType": "true"}
    )
    return (
        kafka_df.where(F.col("value").isNotNull())  # tombstones after deletes carry no change
        .select(ev.alias("e"), "partition", "offset", "timestamp")
        .select(
            e.event_id.alias("event_id"),
            e.source.table.alias("table"),
            e.op.alias("op"),
            e.key.alias("key"),
            e.before.alias("before"),
            e.after.alias("after"),
            e.ddl.alias("ddl"),
            e.source.xid.alias("xid"),
            e.source.seq.alias("seq"),
            e.source.scn.alias("scn"),
            e.source.commit_scn.alias("commit_scn"),
            e.source.commit_ts_ms.alias("commit_ts_ms"),
            e.ts_ms.alias("ts_ms"),
            e.source.thread.alias("thread"),
            e.source.user.alias("user"),
            e.source.row_id.alias("row_id"),
            e.source.attrs.alias("attrs"),
            e.transaction.total_order.alias("tx_total_order"),
            e.transaction.data_collection_order.alias("tx_data_collection_order"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
            F.col("timestamp").alias("kafka_timestamp"),
        )
    )


def union_member(value: Any) -> dict | None:
    """A Python value as the union struct (bool before int: bool is an int in Python)."""
    if value is None:
        return None
    if isinstance(value, bool):
        branch = "boolean"
    elif isinstance(value, int):
        branch = "long"
    elif isinstance(value, float):
        branch = "double"
    elif isinstance(value, str):
        branch = "string"
    elif isinstance(value, (bytes, bytearray)):
        branch = "bytes"
    else:
        raise TypeError(f"no Avro union branch for {type(value).__name__}")
    return {MEMBERS[branch][0]: value}


def member_value(member: Any) -> Any:
    """Inverse of union_member, for a struct read back as a Row or dict."""
    if member is None:
        return None
    items = member.asDict() if hasattr(member, "asDict") else member
    for name, _ in MEMBERS.values():
        v = items.get(name)
        if v is not None:
            return bytes(v) if isinstance(v, bytearray) else v
    return None


def _row_map(row: dict | None) -> list | None:
    return None if row is None else [(k, union_member(v)) for k, v in row.items()]


def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow function of the fallback path: Kafka rows -> CHANGE_COLUMNS, with fastavro."""
    import io

    import fastavro
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from processor.core.events import change_schema

    schema = change_schema()
    out_schema = to_arrow_schema(CHANGE_COLUMNS)
    reader = fastavro.schemaless_reader
    for batch in batches:
        values = batch.column("value").to_pylist()
        parts = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        stamps = batch.column("timestamp")
        cols: dict[str, list] = {f.name: [] for f in CHANGE_COLUMNS.fields}
        keep = []
        for i, value in enumerate(values):
            if value is None:
                continue
            try:
                ev = reader(io.BytesIO(value), schema, None)
            except Exception as exc:  # fastavro raises many types for bad bytes
                raise ValueError(f"undecodable ChangeEvent at partition {parts[i]} offset {offsets[i]}: {exc}") from exc
            src, tx = ev["source"], ev["transaction"]
            keep.append(i)
            cols["event_id"].append(ev["event_id"])
            cols["table"].append(src["table"])
            cols["op"].append(ev["op"])
            cols["key"].append(_row_map(ev["key"]))
            cols["before"].append(_row_map(ev["before"]))
            cols["after"].append(_row_map(ev["after"]))
            cols["ddl"].append(ev["ddl"])
            for name in ("xid", "seq", "scn", "commit_scn", "commit_ts_ms", "thread", "user", "row_id"):
                cols[name].append(src[name])
            cols["ts_ms"].append(ev["ts_ms"])
            cols["attrs"].append(list(src["attrs"].items()))
            cols["tx_total_order"].append(tx["total_order"] if tx else None)
            cols["tx_data_collection_order"].append(tx["data_collection_order"] if tx else None)
            cols["kafka_partition"].append(parts[i])
            cols["kafka_offset"].append(offsets[i])
        ts_type = out_schema.field("kafka_timestamp").type
        taken = stamps.take(pa.array(keep, pa.int64())) if keep else pa.array([], stamps.type)
        arrays = [
            taken.cast(ts_type)
            if f.name == "kafka_timestamp"
            else pa.array(cols[f.name], out_schema.field(f.name).type)
            for f in CHANGE_COLUMNS.fields
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def decode_python(kafka_df: Any) -> Any:
    return kafka_df.select("value", "partition", "offset", "timestamp").mapInArrow(decode_batches, CHANGE_COLUMNS)


def decode_changes(kafka_df: Any, native: bool) -> Any:
    """Kafka-shaped DataFrame -> one typed row per ChangeEvent, from_avro on the native path."""
    return decode_native(kafka_df) if native else decode_python(kafka_df)
