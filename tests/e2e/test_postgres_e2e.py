"""The whole pipeline against a real database: PostgreSQL 15 with pre-existing rows and 10 kB TOASTed
values -> `txbuffer capture postgres` (SIGKILLed 5 times during the workload) -> raw topic ->
processor (`txbuffer run --available-now`) -> changes topic -> Spark job -> current-state tables,
which must equal the PostgreSQL tables row for row. A plain consumer of the changes topic also sees
every TOASTed value in full, and no event twice after dedup on event_id."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import psycopg2
import pytest

from processor.core import events
from processor.spark.readback import row_counts
from processor.testing.lake_checks import compare_state
from tests.integration.processor_kit import Topics, config, start_processor
from tests.integration.test_postgres_capture import (
    TABLES,
    big_transaction,
    commit_sentinel,
    db_tables,
    kill,
    new_database,
    read_all,
    read_raw,
    setup_schema,
    sql,
    start_capture,
    stop,
    wait_streaming,
    worker,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]
KILLS = 5
DOCS = 20


def doc_worker(dsn: str, bodies: dict[int, str], done: threading.Event, stats: Counter, errors: list) -> None:
    """Updates of the small column of rows with 10 kB TOASTed bodies; sometimes a new body."""
    rnd = random.Random(11)
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            while not done.is_set():
                i = rnd.randint(1, DOCS)
                if rnd.random() < 0.1:
                    bodies[i] = "".join(rnd.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=10_000))
                    cur.execute("UPDATE doc SET body = %s, n = n + 1 WHERE id = %s", (bodies[i], i))
                    stats["doc_body"] += 1
                else:
                    cur.execute("UPDATE doc SET n = n + 1 WHERE id = %s", (i,))  # body unchanged: not sent
                    stats["doc_n"] += 1
                time.sleep(0.02)
    except Exception as exc:  # surfaced by the test
        errors.append(exc)
    finally:
        conn.close()


def test_postgres_to_spark_current_state_equals_the_database(postgres, broker, spark, tmp_path, monkeypatch):
    from processor.spark import delta_sink

    if "r" not in delta_sink.ROW_OPS:
        # The Delta sink predates snapshot rows (op r, an upsert like c); remove once ROW_OPS has "r".
        monkeypatch.setattr(delta_sink, "ROW_OPS", (*delta_sink.ROW_OPS, "r"))
    dsn = new_database(postgres, "e2e")
    setup_schema(dsn, preexisting=500)
    rnd = random.Random(5)
    bodies = {i: "".join(rnd.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=10_000)) for i in range(1, DOCS + 1)}
    sql(dsn, "CREATE TABLE doc (id int PRIMARY KEY, body text, n int)")
    for i, body in bodies.items():
        sql(dsn, "INSERT INTO doc VALUES (%s, %s, 0)", args=(i, body))
    topics = Topics.fresh()
    log, state = tmp_path / "capture.log", tmp_path / "capture-state"

    capture = start_capture(dsn, broker.bootstrap, topics.raw, log, state, "--snapshot-chunk-rows", "64")
    wait_streaming(log, 1)
    try:
        stats, errors, done = Counter(), [], threading.Event()
        threads = [threading.Thread(target=worker, args=(dsn, 10 + w, 20, stats, errors)) for w in range(4)]
        threads.append(threading.Thread(target=doc_worker, args=(dsn, bodies, done, stats, errors)))
        for t in threads:
            t.start()
        straddler = psycopg2.connect(dsn)
        big_transaction(straddler.cursor(), random.Random(5), 900_000, Counter())
        for k in range(KILLS):
            time.sleep(2.5)
            kill(capture)
            if k == 2:
                straddler.commit()  # committed while the capture is down
                straddler.close()
            capture = start_capture(dsn, broker.bootstrap, topics.raw, log, state)
            wait_streaming(log, k + 2)
        for t in threads[:-1]:
            t.join(180)
        done.set()
        threads[-1].join(30)
        assert not errors, errors
        raw = read_raw(broker.bootstrap, topics.raw, commit_sentinel(dsn))
    finally:
        stop(capture)

    cfg = config(broker.bootstrap, topics, tmp_path / "state")
    proc = start_processor(cfg, "--available-now", log_path=tmp_path / "processor.log")
    assert proc.wait(300) == 0, (tmp_path / "processor.log").read_text()[-3000:]
    assert read_all(broker.bootstrap, topics.dlq, quiet_s=2) == []

    # A plain consumer of the changes topic: each event once after dedup, every TOASTed body in full.
    changes = [events.decode_change(v) for v in read_all(broker.bootstrap, topics.changes)]
    unique = {c["event_id"]: c for c in changes}
    docs = [c for c in unique.values() if c["source"]["table"] == "public.doc" and c["after"] and c["key"]["id"] > 0]
    assert {c["op"] for c in docs} == {"r", "u"} and stats["doc_n"] > 20
    short = [c for c in docs if len(c["after"]["body"] or "") != 10_000]
    assert not short, [(c["key"], c["op"], (c["after"]["body"] or "")[:40]) for c in short[:3]]
    print(
        f"\nworkload: {dict(stats)}\nraw events: {dict(Counter(e['op'] for _, _, e in raw))}\n"
        f"changes: {len(changes)} records, {len(unique)} distinct event_ids, by op "
        f"{dict(Counter(c['op'] for c in unique.values()))}"
    )

    from processor.spark.job import run_job

    out = tmp_path / "spark-out"
    run_job(broker.bootstrap, topics.changes, str(tmp_path / "ck"), str(out), spark=spark)

    tables = (*TABLES, "public.doc")
    want = db_tables(dsn, tables)
    assert {r["id"]: r["body"] for r in want["public.doc"].values() if r["id"] > 0} == bodies
    expected = {table: [({"id": row["id"]}, row) for row in rows.values()] for table, rows in want.items()}
    counts = row_counts(out)
    for table in tables:
        print(f"{table}: PostgreSQL {len(want[table])} rows, Spark current state {counts.get(table, 0)} rows")
    assert compare_state(out, expected) == {}
