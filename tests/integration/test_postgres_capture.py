"""Live capture against a real PostgreSQL 15 cluster: a concurrent workload with large streamed
transactions, full rollbacks, nested savepoint rollbacks and updates/deletes of the same keys, with
the capture process SIGKILLed and restarted in the middle. The RawEvents on the raw topic, replayed
through the reference model of the transaction semantics, must reproduce every table row for row."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from processor.core import events
from processor.sources.postgres import check_setup
from processor.testing.reference import ReferenceModel

psycopg2 = pytest.importorskip("psycopg2")
pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TABLES = ("public.acct", "public.hist")

# Runs `txbuffer capture postgres` from the command module (the console script may list commands
# that other work has not landed yet).
CAPTURE = (
    "import argparse, sys\n"
    "from processor.logs import configure_logging\n"
    "from processor.commands import capture_cmd\n"
    "p = argparse.ArgumentParser(); capture_cmd.register(p.add_subparsers())\n"
    "configure_logging('json', 'INFO')\n"
    "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n"
)


def start_capture(dsn: str, bootstrap: str, topic: str, log: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-c",
        CAPTURE,
        "capture",
        "postgres",
        "--dsn",
        dsn,
        "--slot",
        "cap",
        "--publication",
        "cap",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        "3",
        "--ack-interval",
        "0.2",
        "--heartbeat-interval",
        "0.5",
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def wait_streaming(log: Path, times: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count("postgres.streaming") >= times:
            return
        time.sleep(0.1)
    raise AssertionError(f"capture did not start streaming: {log.read_text() if log.exists() else ''}")


def setup_schema(dsn: str) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE acct (id int PRIMARY KEY, bal bigint, note text, flag bool, raw bytea, "
            "amount numeric(12,2), ratio float8)"
        )
        cur.execute("CREATE TABLE hist (id int PRIMARY KEY, v text)")
        cur.execute("ALTER TABLE hist REPLICA IDENTITY FULL")
    conn.close()


def worker(dsn: str, wid: int, iterations: int, stats: Counter, errors: list) -> None:
    rnd = random.Random(wid)
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute("SET lock_timeout = '2s'")
    conn.commit()
    own = 100_000 * (wid + 1)  # keys only this worker touches in big transactions
    try:
        for it in range(iterations):
            try:
                kind = rnd.random()
                if kind < 0.25:
                    big_transaction(cur, rnd, own + it * 1000, stats)
                else:
                    small_transaction(cur, rnd, stats)
                if rnd.random() < 0.15:
                    conn.rollback()
                    stats["full_rollback"] += 1
                else:
                    conn.commit()
                    stats["commit"] += 1
                time.sleep(rnd.uniform(0.02, 0.12))  # spread the workload over the capture restart
            except (psycopg2.errors.DeadlockDetected, psycopg2.errors.LockNotAvailable):
                conn.rollback()
                stats["conflict_rollback"] += 1
    except Exception as exc:  # surfaced by the test
        errors.append(exc)
    finally:
        conn.close()


def small_transaction(cur, rnd: random.Random, stats: Counter) -> None:
    for _ in range(rnd.randint(1, 6)):
        k = rnd.randint(0, 60)  # a small shared key range: the same keys are updated and deleted often
        op = rnd.random()
        if op < 0.4:
            cur.execute(
                "INSERT INTO acct VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                "bal = acct.bal + 1, note = EXCLUDED.note",
                (
                    k,
                    rnd.randint(-(10**12), 10**12),
                    f"n{rnd.random()}",
                    rnd.random() < 0.5,
                    bytes(rnd.getrandbits(8) for _ in range(4)),
                    Decimal(rnd.randint(0, 10**6)) / 100,
                    rnd.random(),
                ),
            )
        elif op < 0.7:
            cur.execute("UPDATE acct SET bal = bal * 2, flag = NOT flag, note = NULL WHERE id = %s", (k,))
        elif op < 0.85:
            cur.execute("DELETE FROM acct WHERE id = %s", (k,))
        else:
            cur.execute(
                "INSERT INTO hist VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
                (k, f"h{k}-{rnd.random()}"),
            )
            if rnd.random() < 0.3:
                cur.execute("DELETE FROM hist WHERE id = %s", (k,))
        stats["small_ops"] += 1


def big_transaction(cur, rnd: random.Random, base: int, stats: Counter) -> None:
    """Large enough (> 64kB of changes) to be streamed; nested savepoints, some rolled back."""
    pad = "x" * 150
    cur.execute(
        "INSERT INTO acct SELECT g, g, %s || g, true, NULL, 1.5, 0.25 FROM generate_series(%s, %s) g",
        (pad, base, base + 399),
    )
    cur.execute("SAVEPOINT a")
    cur.execute("INSERT INTO hist SELECT g, %s || g FROM generate_series(%s, %s) g", (pad, base, base + 299))
    cur.execute("SAVEPOINT b")
    cur.execute("UPDATE acct SET bal = -bal WHERE id BETWEEN %s AND %s", (base, base + 199))
    cur.execute("DELETE FROM hist WHERE id BETWEEN %s AND %s", (base, base + 49))
    choice = rnd.random()
    if choice < 0.4:
        cur.execute("ROLLBACK TO SAVEPOINT b")  # inner rollback: keep a's inserts
        stats["rollback_to_b"] += 1
    elif choice < 0.7:
        cur.execute("ROLLBACK TO SAVEPOINT a")  # outer rollback drops b's work too (nested)
        stats["rollback_to_a"] += 1
    else:
        cur.execute("RELEASE SAVEPOINT a")
    cur.execute("UPDATE acct SET note = 'after-savepoints' WHERE id BETWEEN %s AND %s", (base + 300, base + 399))
    cur.execute("DELETE FROM acct WHERE id BETWEEN %s AND %s", (base + 350, base + 399))
    stats["big"] += 1


def commit_sentinel(dsn: str) -> str:
    """Commit a marker transaction after the workload; its xid tells readers the raw topic is complete."""
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT txid_current()")
        sentinel = str(cur.fetchone()[0])
        cur.execute("INSERT INTO hist VALUES (-1, 'sentinel')")
    conn.commit()
    conn.close()
    return sentinel


def read_raw(bootstrap: str, topic: str, until_xid: str, timeout_s: float = 60.0) -> list[tuple[int, int, dict]]:
    from confluent_kafka import Consumer, TopicPartition

    from processor.kafka.clients import CONSUMER_DEFAULTS, partition_count

    n = partition_count(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}", **CONSUMER_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
    out, seen_end, deadline = [], None, time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                if seen_end is not None and time.monotonic() - seen_end > 2.0:
                    break
                continue
            e = events.decode_raw(msg.value())
            out.append((msg.partition(), msg.offset(), e))
            if e["xid"] == until_xid and e["op"] == "COMMIT" and seen_end is None:
                seen_end = time.monotonic()
    finally:
        consumer.close()
    assert seen_end is not None, f"the sentinel transaction {until_xid} never reached the raw topic"
    return out


def db_tables(dsn: str) -> dict[str, dict[str, dict]]:
    conn = psycopg2.connect(dsn)
    out = {}
    with conn.cursor() as cur:
        for table in TABLES:
            cur.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cur.description]
            rows = {}
            for r in cur.fetchall():
                row = {
                    n: (str(v) if isinstance(v, Decimal) else bytes(v) if isinstance(v, memoryview) else v)
                    for n, v in zip(names, r)
                }
                rows[json.dumps({"id": row["id"]})] = row
            out[table] = rows
    conn.close()
    return out


def replayed_tables(records: list[tuple[int, int, dict]]) -> tuple[dict, ReferenceModel]:
    model = ReferenceModel()
    for p, o, e in sorted(records, key=lambda r: (r[0], r[1])):
        model.feed(p, o, e)
    tables: dict[str, dict] = {t: {} for t in TABLES}
    for txn in model.all_committed():
        for ch in txn.changes:
            t = tables.setdefault(ch["source"]["table"], {})
            k = json.dumps(ch["key"])
            if ch["op"] == "c":
                t[k] = dict(ch["after"])
            elif ch["op"] == "u":
                t[k] = {**t.get(k, {}), **ch["after"]}  # an update may omit unchanged TOAST values
            elif ch["op"] == "d":
                t.pop(k, None)
            elif ch["op"] == "t":
                t.clear()
    return tables, model


def test_capture_with_restart_reproduces_the_tables(postgres, broker, tmp_path):
    db = f"cap_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(postgres.dsn())
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    admin.close()
    dsn = postgres.dsn(db)
    setup_schema(dsn)
    topic = f"raw-pg-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "capture.log"

    # The slot must exist before the workload: creating it waits for running transactions to end.
    check_setup(dsn, "cap", "cap", create=True)
    capture = start_capture(dsn, broker.bootstrap, topic, log)
    wait_streaming(log, 1)
    try:
        stats, errors = Counter(), []
        threads = [threading.Thread(target=worker, args=(dsn, w, 24, stats, errors)) for w in range(4)]
        for t in threads:
            t.start()
        # A transaction that stays open across the restart: streamed before the kill, re-sent after it.
        straddler = psycopg2.connect(dsn)
        scur = straddler.cursor()
        scur.execute("SELECT txid_current()")
        straddler_xid = str(scur.fetchone()[0])
        big_transaction(scur, random.Random(99), 900_000, Counter())
        time.sleep(3)
        # Kill the capture mid-workload (no clean shutdown, nothing acknowledged beyond what is durable).
        capture.send_signal(signal.SIGKILL)
        capture.wait(10)
        time.sleep(1)
        capture = start_capture(dsn, broker.bootstrap, topic, log)
        wait_streaming(log, 2)
        scur.execute("SAVEPOINT late")
        scur.execute("UPDATE acct SET note = 'straddler' WHERE id BETWEEN 900000 AND 900099")
        scur.execute("ROLLBACK TO SAVEPOINT late")
        scur.execute("UPDATE acct SET bal = 7 WHERE id BETWEEN 900100 AND 900149")
        straddler.commit()
        straddler.close()
        for t in threads:
            t.join(120)
        assert not errors, errors
        records = read_raw(broker.bootstrap, topic, commit_sentinel(dsn))
    finally:
        capture.send_signal(signal.SIGTERM)
        capture.wait(15)

    ops = Counter(e["op"] for _, _, e in records)
    print(f"\nworkload: {dict(stats)}\nraw events: {dict(ops)}")
    assert stats["big"] >= 4 and stats["full_rollback"] >= 1 and stats["rollback_to_a"] + stats["rollback_to_b"] >= 2
    assert ops["SUBTXN_ABORT"] >= 1, "no streamed savepoint rollback was exercised"
    assert ops["HEARTBEAT"] >= 3
    streamed = {e["xid"] for _, _, e in records if e["subxid"] is not None}
    assert streamed, "no transaction was streamed before commit"
    restarted = [x for x, n in Counter(e["xid"] for _, _, e in records if e["op"] == "BEGIN").items() if n > 1]
    print(
        f"streamed transactions: {len(streamed)}, transactions begun twice (re-sent after the restart): {len(restarted)}"
    )
    assert straddler_xid in restarted, "the open transaction was not streamed again from its start after the restart"

    got, model = replayed_tables(records)
    assert model.dlq == []
    want = db_tables(dsn)
    for table in TABLES:
        print(f"{table}: {len(want[table])} rows in PostgreSQL, {len(got[table])} replayed")
        missing = set(want[table]) - set(got[table])
        extra = set(got[table]) - set(want[table])
        assert not missing and not extra, (table, sorted(missing)[:5], sorted(extra)[:5])
        diff = [k for k in want[table] if want[table][k] != got[table][k]]
        assert not diff, (table, [(want[table][k], got[table][k]) for k in diff[:3]])
