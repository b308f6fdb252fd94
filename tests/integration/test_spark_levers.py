"""Throughput levers of the Spark stage that change what is written or how it is read: a lake whose
tables carry deletion vectors reads back without the rows those vectors delete."""

from __future__ import annotations

import pytest

from processor.spark.delta_sink import DeltaSinks
from processor.spark.readback import read_changelog, read_state, row_counts, state_tables

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

DV_DEFAULT = "spark.databricks.delta.properties.defaults.enableDeletionVectors"


def frame(spark, rows: list[tuple]):
    """Decoded changes of table app.dv: (key, op, commit_scn, value)."""
    from processor.spark.decode import CHANGE_COLUMNS, union_member

    def change(k, op, scn, v):
        return {
            "event_id": f"1:{scn}:x:{k}",
            "table": "app.dv",
            "op": op,
            "key": {"id": union_member(k)},
            "after": None if op == "d" else {"id": union_member(k), "v": union_member(v)},
            "xid": "x",
            "seq": k,
            "scn": scn,
            "commit_scn": scn,
            "commit_ts_ms": 0,
            "ts_ms": 0,
            "thread": 1,
        }

    changes = [change(*r) for r in rows]
    return spark.createDataFrame(
        [{f.name: c.get(f.name) for f in CHANGE_COLUMNS.fields} for c in changes], CHANGE_COLUMNS
    )


def test_tables_with_deletion_vectors_read_back_without_the_deleted_rows(spark, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable

    out = tmp_path / "out"
    spark.conf.set(DV_DEFAULT, "true")  # every table this session creates gets deletion vectors
    try:
        sinks = DeltaSinks(out.as_uri(), "dv-test", merge_threads=1)
        sinks(frame(spark, [(k, "c", 10, f"v{k}") for k in range(1, 9)]), 0)
        sinks(frame(spark, [(2, "d", 20, None), (5, "d", 20, None), (3, "u", 20, "new")]), 1)
    finally:
        spark.conf.unset(DV_DEFAULT)

    table = DeltaTable(str(state_tables(out)["app.dv"]))
    assert "deletionVectors" in (table.protocol().reader_features or [])
    # The MERGE marked rows deleted in the old file instead of rewriting it: the case a plain
    # parquet read of the add actions gets wrong.
    assert pa.table(table.deletion_vectors()).num_rows >= 1
    expected = {f'{{"id":{k}}}': {"id": k, "v": f"v{k}"} for k in (1, 4, 6, 7, 8)}
    expected['{"id":3}'] = {"id": 3, "v": "new"}
    assert read_state(out) == {"app.dv": expected}
    assert row_counts(out) == {"app.dv": 6}
    assert read_changelog(out, ["event_id"]).num_rows == 11
