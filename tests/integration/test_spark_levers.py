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
    from processor.testing.spark_synth import decoded_change, decoded_frame

    return decoded_frame(spark, [decoded_change("app.dv", *r) for r in rows])


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
