"""The whole pipeline against a real database: PostgreSQL 15 -> `txbuffer capture postgres` (killed and
restarted mid-way) -> raw topic -> processor (`txbuffer run --available-now`) -> changes topic ->
Spark job -> current-state tables, which must equal the PostgreSQL tables row for row."""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections import Counter

import pytest

from processor.sources.postgres import check_setup
from processor.spark.readback import row_counts
from processor.testing.lake_checks import compare_state
from tests.integration.processor_kit import Topics, config, read_with_headers, start_processor
from tests.integration.test_postgres_capture import (
    TABLES,
    big_transaction,
    commit_sentinel,
    db_tables,
    read_raw,
    setup_schema,
    start_capture,
    wait_streaming,
    worker,
)

psycopg2 = pytest.importorskip("psycopg2")
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def test_postgres_to_spark_current_state_equals_the_database(postgres, broker, spark, tmp_path):
    db = f"e2e_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(postgres.dsn())
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    admin.close()
    dsn = postgres.dsn(db)
    setup_schema(dsn)
    check_setup(dsn, "cap", "cap", create=True)
    topics = Topics.fresh()
    log = tmp_path / "capture.log"

    capture = start_capture(dsn, broker.bootstrap, topics.raw, log)
    wait_streaming(log, 1)
    try:
        stats, errors = Counter(), []
        threads = [threading.Thread(target=worker, args=(dsn, 10 + w, 20, stats, errors)) for w in range(4)]
        for t in threads:
            t.start()
        straddler = psycopg2.connect(dsn)
        big_transaction(straddler.cursor(), random.Random(5), 900_000, Counter())
        time.sleep(3)
        capture.send_signal(signal.SIGKILL)
        capture.wait(10)
        capture = start_capture(dsn, broker.bootstrap, topics.raw, log)
        wait_streaming(log, 2)
        straddler.commit()
        straddler.close()
        for t in threads:
            t.join(120)
        assert not errors, errors
        raw = read_raw(broker.bootstrap, topics.raw, commit_sentinel(dsn))
    finally:
        capture.send_signal(signal.SIGTERM)
        capture.wait(15)

    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    proc = start_processor(cfg, "--available-now", log_path=tmp_path / "processor.log")
    assert proc.wait(240) == 0, (tmp_path / "processor.log").read_text()[-3000:]
    assert read_with_headers(broker.bootstrap, topics.dlq, timeout_s=10) == []

    from processor.spark.job import run_job

    out = tmp_path / "spark-out"
    run_job(broker.bootstrap, topics.changes, str(tmp_path / "ck"), str(out), spark=spark)

    want = db_tables(dsn)
    expected = {table: [({"id": row["id"]}, row) for row in rows.values()] for table, rows in want.items()}
    counts = row_counts(out)
    print(f"\nworkload: {dict(stats)}\nraw events: {dict(Counter(e['op'] for _, _, e in raw))}")
    for table in TABLES:
        print(f"{table}: PostgreSQL {len(want[table])} rows, Spark current state {counts.get(table, 0)} rows")
    assert compare_state(out, expected) == {}
