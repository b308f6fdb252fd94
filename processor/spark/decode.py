"""Decode ChangeEvent Avro (schemas/change_event.avsc) into typed Spark columns, in mapInArrow.

Row maps (`key`, `before`, `after`) hold a typed union per column (null, boolean, long, double,
string, bytes). Spark has no such union type, so they become **type-preserving JSON strings**:
null/true/false, integers as JSON integers, doubles always with a fraction or exponent (1.0),
strings as JSON strings, and bytes as `{"$bytes": "<hex>"}` (the union has no map branch, so
an object can only mean bytes). Keys are sorted and separators compact, so `key` is a canonical
primary-key identity, byte-for-byte `processor.expected.key_string`. `row_from_json` inverts it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from pyspark.sql.types import (
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

CHANGE_COLUMNS = StructType(
    [
        StructField("event_id", StringType(), False),
        StructField("table", StringType(), True),
        StructField("op", StringType(), False),
        StructField("key", StringType(), True),
        StructField("before", StringType(), True),
        StructField("after", StringType(), True),
        StructField("ddl", StringType(), True),
        StructField("xid", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("scn", LongType(), False),
        StructField("commit_scn", LongType(), False),
        StructField("commit_ts_ms", LongType(), False),
        StructField("ts_ms", LongType(), False),
        StructField("thread", IntegerType(), False),
        StructField("user", StringType(), True),
        StructField("row_id", StringType(), True),
        StructField("attrs", MapType(StringType(), StringType()), True),
        StructField("tx_total_order", LongType(), True),
        StructField("tx_data_collection_order", LongType(), True),
        StructField("kafka_partition", IntegerType(), True),
        StructField("kafka_offset", LongType(), True),
        StructField("kafka_timestamp", TimestampType(), True),
    ]
)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$double": repr(value)}  # JSON has no NaN/inf
    return value


def row_to_json(row: dict | None) -> str | None:
    if row is None:
        return None
    return json.dumps({k: _jsonable(v) for k, v in row.items()}, sort_keys=True, separators=(",", ":"))


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        if "$bytes" in value:
            return bytes.fromhex(value["$bytes"])
        return float(value["$double"])
    return value


def row_from_json(text: str | None) -> dict | None:
    """Inverse of row_to_json: the typed Python values fastavro produced."""
    if text is None:
        return None
    return {k: _typed(v) for k, v in json.loads(text).items()}


def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow function: Kafka rows (value, partition, offset, timestamp) -> CHANGE_COLUMNS.

    Tombstones (null values, written after deletes for compacted topics) carry no change and are
    skipped. A record that does not decode fails the batch: it cannot be dropped silently, and the
    processor's DLQ is where bad input belongs, not the changes topic.
    """
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
            cols["key"].append(row_to_json(ev["key"]))
            cols["before"].append(row_to_json(ev["before"]))
            cols["after"].append(row_to_json(ev["after"]))
            cols["ddl"].append(ev["ddl"])
            cols["xid"].append(src["xid"])
            cols["seq"].append(src["seq"])
            cols["scn"].append(src["scn"])
            cols["commit_scn"].append(src["commit_scn"])
            cols["commit_ts_ms"].append(src["commit_ts_ms"])
            cols["ts_ms"].append(ev["ts_ms"])
            cols["thread"].append(src["thread"])
            cols["user"].append(src["user"])
            cols["row_id"].append(src["row_id"])
            cols["attrs"].append(list(src["attrs"].items()))
            cols["tx_total_order"].append(tx["total_order"] if tx else None)
            cols["tx_data_collection_order"].append(tx["data_collection_order"] if tx else None)
            cols["kafka_partition"].append(parts[i])
            cols["kafka_offset"].append(offsets[i])
        cols["kafka_timestamp"] = stamps.take(pa.array(keep, pa.int64())) if keep else pa.array([], stamps.type)
        arrays = [
            cols[f.name] if f.name == "kafka_timestamp" else pa.array(cols[f.name], out_schema.field(f.name).type)
            for f in CHANGE_COLUMNS.fields
        ]
        arrays[-1] = arrays[-1].cast(out_schema.field("kafka_timestamp").type)
        yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def decode_changes(kafka_df: Any) -> Any:
    """Kafka-shaped DataFrame (either source path) -> one typed row per ChangeEvent."""
    return kafka_df.select("value", "partition", "offset", "timestamp").mapInArrow(decode_batches, CHANGE_COLUMNS)
