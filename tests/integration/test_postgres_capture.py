"""Live capture against a real PostgreSQL 15 cluster (`txbuffer capture postgres` as a subprocess).

- A concurrent workload with large streamed transactions, full rollbacks, nested savepoint rollbacks
  and updates/deletes of the same keys, over pre-existing rows, with the capture SIGKILLed and
  restarted: the raw topic, replayed through the reference model, reproduces every table.
- The initial snapshot: consistent with the slot, chunked, resumed after a kill without duplicates.
- TOAST: an update of another column keeps a 10 kB value, across capture and processor restarts.
- Slot progress on a database where nothing changes; reconnects; a dropped slot is lost state.
"""

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

import psycopg2
import psycopg2.errors
import pytest

from processor.core import events
from processor.sources.pg_state import CaptureState
from processor.sources.postgres import PLACEHOLDER
from processor.testing.reference import ReferenceModel

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TABLES = ("public.acct", "public.hist")


def start_capture(
    dsn: str, bootstrap: str, topic: str, log: Path, state_dir: Path, *extra: str, slot: str | None = None
) -> subprocess.Popen:
    """The capture as its own process. Slots are cluster-wide: the default one is named after the database."""
    slot = slot or dict(kv.split("=", 1) for kv in dsn.split())["dbname"]
    cmd = [
        sys.executable,
        "-m",
        "processor.cli",
        "--log-format",
        "json",
        "capture",
        "postgres",
        "--dsn",
        dsn,
        "--slot",
        slot,
        "--publication",
        "cap",
        "--state-dir",
        str(state_dir),
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
        "--reconnect-max",
        "2",
        *extra,
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def wait_log(log: Path, text: str, times: int = 1, timeout_s: float = 60.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count(text) >= times:
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"capture log never had {text!r} x{times}: {log.read_text()[-3000:] if log.exists() else ''}")


def wait_streaming(log: Path, times: int, timeout_s: float = 120.0) -> None:
    wait_log(log, "postgres.streaming", times, timeout_s)


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def new_database(postgres, prefix: str) -> str:
    db = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(postgres.dsn())
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    admin.close()
    return postgres.dsn(db)


def sql(dsn: str, *statements: str, args: tuple = ()) -> list:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    rows: list = []
    with conn.cursor() as cur:
        for st in statements:
            cur.execute(st, args or None)
            if cur.description is not None:
                rows = cur.fetchall()
    conn.close()
    return rows


def setup_schema(dsn: str, preexisting: int = 0) -> None:
    """acct (typed columns) and hist (REPLICA IDENTITY FULL); `preexisting` rows exist before capture."""
    sql(
        dsn,
        "CREATE TABLE acct (id int PRIMARY KEY, bal bigint, note text, flag bool, raw bytea, "
        "amount numeric(12,2), ratio float8)",
        "CREATE TABLE hist (id int PRIMARY KEY, v text)",
        "ALTER TABLE hist REPLICA IDENTITY FULL",
    )
    if preexisting:
        sql(
            dsn,
            "INSERT INTO acct SELECT g, g * 10, 'pre' || g, g % 2 = 0, '\\x0102'::bytea, g / 4.0, g * 0.5 "
            f"FROM generate_series(1000000, {1_000_000 + preexisting - 1}) g",
            f"INSERT INTO hist SELECT g, 'pre-h' || g FROM generate_series(1000000, {1_000_000 + preexisting // 2}) g",
        )


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


def commit_sentinel(dsn: str, table: str = "hist") -> str:
    """Commit a marker transaction (row id -1 of `table`); its xid tells readers the raw topic is complete."""
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT txid_current()")
        sentinel = str(cur.fetchone()[0])
        cur.execute(f"INSERT INTO {table} (id) VALUES (-1) ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id")
    conn.commit()
    conn.close()
    return sentinel


def read_raw(bootstrap: str, topic: str, until_xid: str, timeout_s: float = 90.0) -> list[tuple[int, int, dict]]:
    from confluent_kafka import Consumer, TopicPartition

    from processor.kafka.admin import partition_count
    from processor.kafka.client_config import CONSUMER_DEFAULTS

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


def read_all(bootstrap: str, topic: str, quiet_s: float = 3.0, timeout_s: float = 60.0) -> list[bytes]:
    """Every record value of a topic: read until nothing has arrived for `quiet_s`."""
    from confluent_kafka import Consumer, TopicPartition

    from processor.kafka.admin import partition_count
    from processor.kafka.client_config import CONSUMER_DEFAULTS

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}", **CONSUMER_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partition_count(bootstrap, topic))])
    out, last, deadline = [], time.monotonic(), time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
            for msg in consumer.consume(500, 0.3):
                if not msg.error():
                    out.append(msg.value())
                    last = time.monotonic()
    finally:
        consumer.close()
    return out


def db_tables(dsn: str, tables=TABLES) -> dict[str, dict[str, dict]]:
    conn = psycopg2.connect(dsn)
    out = {}
    with conn.cursor() as cur:
        for table in tables:
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


def replayed_tables(records: list[tuple[int, int, dict]], tables=TABLES) -> tuple[dict, ReferenceModel]:
    """Apply the committed changes, in commit order, as a plain consumer would (no merging of images)."""
    model = ReferenceModel()
    for p, o, e in sorted(records, key=lambda r: (r[0], r[1])):
        model.feed(p, o, e)
    out: dict[str, dict] = {t: {} for t in tables}
    for txn in model.all_committed():  # in commit order
        for ch in txn.changes:
            t = out.setdefault(ch["source"]["table"], {})
            k = json.dumps(ch["key"])
            if ch["op"] in ("c", "u", "r"):
                t[k] = dict(ch["after"])
            elif ch["op"] == "d":
                t.pop(k, None)
            elif ch["op"] == "t":
                t.clear()
    return out, model


def assert_tables_equal(want: dict, got: dict, tables=TABLES) -> None:
    for table in tables:
        print(f"{table}: {len(want[table])} rows in PostgreSQL, {len(got[table])} replayed")
        missing = set(want[table]) - set(got[table])
        extra = set(got[table]) - set(want[table])
        assert not missing and not extra, (table, sorted(missing)[:5], sorted(extra)[:5])
        diff = [k for k in want[table] if want[table][k] != got[table][k]]
        assert not diff, (table, [(want[table][k], got[table][k]) for k in diff[:3]])


def test_capture_with_kills_reproduces_the_tables_including_preexisting_rows(postgres, broker, tmp_path):
    dsn = new_database(postgres, "cap")
    setup_schema(dsn, preexisting=300)
    topic = f"raw-pg-{uuid.uuid4().hex[:8]}"
    log, state = tmp_path / "capture.log", tmp_path / "state"
    capture = start_capture(dsn, broker.bootstrap, topic, log, state)
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
        scur.execute("UPDATE acct SET bal = -1 WHERE id BETWEEN 1000000 AND 1000020")  # pre-existing rows
        time.sleep(3)
        kill(capture)  # no clean shutdown: nothing acknowledged beyond what is durable
        time.sleep(1)
        capture = start_capture(dsn, broker.bootstrap, topic, log, state)
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
        stop(capture)

    ops = Counter(e["op"] for _, _, e in records)
    print(f"\nworkload: {dict(stats)}\nraw events: {dict(ops)}")
    assert stats["big"] >= 4 and stats["full_rollback"] >= 1 and stats["rollback_to_a"] + stats["rollback_to_b"] >= 2
    assert ops["SUBTXN_ABORT"] >= 1, "no streamed savepoint rollback was exercised"
    assert ops["HEARTBEAT"] >= 3
    assert ops["READ"] == 300 + 151, "every pre-existing row arrives once through the snapshot"
    streamed = {e["xid"] for _, _, e in records if e["subxid"] is not None}
    assert streamed, "no transaction was streamed before commit"
    restarted = [x for x, n in Counter(e["xid"] for _, _, e in records if e["op"] == "BEGIN").items() if n > 1]
    assert straddler_xid in restarted, "the open transaction was not streamed again from its start after the restart"
    row = next(e for _, _, e in records if e["op"] in ("INSERT", "READ") and e["table"] == "public.acct")
    types = json.loads(row["attrs"]["pg_columns"])
    assert [c[:2] for c in types] == [
        ["id", 23],
        ["bal", 20],
        ["note", 25],
        ["flag", 16],
        ["raw", 17],
        ["amount", 1700],
        ["ratio", 701],
    ]
    assert types[5][3] == "numeric(12,2)" and types[0][4:] == [1, 0]

    got, model = replayed_tables(records)
    assert model.dlq == []
    assert_tables_equal(db_tables(dsn), got)


def test_snapshot_resumes_after_a_kill_without_duplicate_chunks_and_the_stream_converges(postgres, broker, tmp_path):
    dsn = new_database(postgres, "snap")
    setup_schema(dsn, preexisting=20_000)
    topic = f"raw-snap-{uuid.uuid4().hex[:8]}"
    log, state = tmp_path / "capture.log", tmp_path / "state"
    capture = start_capture(dsn, broker.bootstrap, topic, log, state, "--snapshot-chunk-rows", "100")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # kill it in the middle of the first table
            cur = CaptureState.load(state)
            if cur.tables.get("public.acct") and cur.tables["public.acct"].chunks >= 20:
                break
            time.sleep(0.01)
        kill(capture)
        progress = CaptureState.load(state)
        assert progress.snapshot == "running" and not progress.tables["public.acct"].done, progress
        # Changes while the capture is down, on rows already sent and on rows not yet read.
        sql(
            dsn,
            "UPDATE acct SET bal = -bal WHERE id % 97 = 0",
            "DELETE FROM acct WHERE id % 89 = 0",
            "INSERT INTO acct (id, bal, note) SELECT g, 1, 'new' FROM generate_series(1, 50) g",
        )
        capture = start_capture(dsn, broker.bootstrap, topic, log, state, "--snapshot-chunk-rows", "100")
        wait_log(log, "postgres.snapshot_done", timeout_s=300, proc=capture)
        wait_streaming(log, 1)
        sql(dsn, "UPDATE acct SET note = 'after' WHERE id % 101 = 0")
        records = read_raw(broker.bootstrap, topic, commit_sentinel(dsn))
    finally:
        stop(capture)
    assert CaptureState.load(state).snapshot == "done"
    reads = [e for _, _, e in records if e["op"] == "READ"]
    ids = Counter((e["xid"], e["seq"]) for e in reads)
    resent = sum(n - 1 for n in ids.values())
    keys = Counter((e["table"], e["key"]["id"]) for e in {(e["xid"], e["seq"]): e for e in reads}.values())
    print(f"\nREAD events: {len(reads)}, re-sent (same xid and seq): {resent}, distinct rows: {len(keys)}")
    assert all(n == 1 for n in keys.values()), "a row arrived in two different snapshot chunks"
    copies: dict = {}
    for e in reads:  # a re-sent chunk is identical, so dedup on event_id loses nothing
        assert copies.setdefault((e["xid"], e["seq"]), e) == e
    got, model = replayed_tables(records)
    assert model.dlq == []
    assert_tables_equal(db_tables(dsn), got)


def test_snapshot_modes_never_and_initial_only(postgres, broker, tmp_path):
    dsn = new_database(postgres, "modes")
    setup_schema(dsn, preexisting=10)
    topic = f"raw-modes-{uuid.uuid4().hex[:8]}"
    only = start_capture(
        dsn, broker.bootstrap, topic, tmp_path / "only.log", tmp_path / "only", "--snapshot", "initial_only"
    )
    assert only.wait(60) == 0, (tmp_path / "only.log").read_text()[-2000:]
    slots = "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
    assert sql(dsn, slots)[0][0] == 0, "initial_only needs no slot"
    log = tmp_path / "never.log"
    never = start_capture(dsn, broker.bootstrap, topic, log, tmp_path / "never", "--snapshot", "never")
    try:
        wait_streaming(log, 1)
        records = read_raw(broker.bootstrap, topic, commit_sentinel(dsn))
    finally:
        stop(never)
    reads = [e for _, _, e in records if e["op"] == "READ"]
    assert len(reads) == 10 + 6 and {e["attrs"]["snapshot"] for e in reads} == {"true"}  # only from initial_only
    assert any(e["op"] == "INSERT" and e["key"] == {"id": -1} for _, _, e in records)  # streamed by `never`


# ---- TOAST ---------------------------------------------------------------------------------------


def toast_updates(records: list, doc_ids: set[int]) -> list[dict]:
    return [
        e for _, _, e in records if e["op"] == "UPDATE" and e["table"] == "public.doc" and e["key"]["id"] in doc_ids
    ]


def test_unchanged_toast_values_survive_capture_and_processor_restarts(postgres, broker, tmp_path):
    from tests.integration.processor_kit import Topics, config, start_processor

    dsn = new_database(postgres, "toast")
    rnd = random.Random(3)
    body = {i: "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(10_000)) for i in (1, 2)}
    sql(dsn, "CREATE TABLE doc (id int PRIMARY KEY, body text, n int)")
    sql(dsn, "INSERT INTO doc VALUES (1, %s, 0)", args=(body[1],))  # before capture: its image is the snapshot's
    ext = sql(dsn, "SELECT pg_column_size(body) FROM doc WHERE id = 1")[0][0]
    assert ext > 2000, "the value must be stored out of line (TOASTed)"
    topics = Topics.fresh()
    log, state = tmp_path / "capture.log", tmp_path / "state"
    capture = start_capture(dsn, broker.bootstrap, topics.raw, log, state)
    try:
        wait_streaming(log, 1)
        sql(dsn, "INSERT INTO doc VALUES (2, %s, 0)", args=(body[2],))  # its image comes from the stream
        sql(dsn, "UPDATE doc SET n = 1")  # body unchanged: pgoutput does not send it
        kill(capture)
        capture = start_capture(dsn, broker.bootstrap, topics.raw, log, state)
        wait_streaming(log, 2)
        sql(dsn, "UPDATE doc SET n = 2")
        first = read_raw(broker.bootstrap, topics.raw, commit_sentinel(dsn, "doc"))

        # The processor on one disk, then again on an empty disk, after more updates.
        proc = start_processor(
            config(broker.bootstrap, topics, tmp_path / "p1"), "--available-now", log_path=tmp_path / "p1.log"
        )
        assert proc.wait(180) == 0, (tmp_path / "p1.log").read_text()[-3000:]
        sql(dsn, "UPDATE doc SET n = 3")
        stop(capture)
        capture = start_capture(dsn, broker.bootstrap, topics.raw, log, state)
        wait_streaming(log, 3)
        sql(dsn, "UPDATE doc SET n = 4")
        raw = read_raw(broker.bootstrap, topics.raw, commit_sentinel(dsn, "doc"))
        proc = start_processor(
            config(broker.bootstrap, topics, tmp_path / "p2"), "--available-now", log_path=tmp_path / "p2.log"
        )
        assert proc.wait(180) == 0, (tmp_path / "p2.log").read_text()[-3000:]
    finally:
        stop(capture)
    updates = toast_updates(raw, {1, 2})
    assert len(updates) == 8 and len(toast_updates(first, {1, 2})) == 4
    for e in updates:
        assert e["after"]["body"] == body[e["key"]["id"]], (e["key"], e["after"]["n"], e["attrs"])
    assert all("toast_placeholder" not in e["attrs"] for e in updates)

    changes = [events.decode_change(v) for v in read_all(broker.bootstrap, topics.changes)]
    doc = [c for c in changes if c["source"]["table"] == "public.doc"]
    latest = {}
    for c in doc:
        latest.setdefault(c["event_id"], c)
    ups = [c for c in latest.values() if c["op"] == "u" and c["after"]["id"] in (1, 2)]
    assert sorted((c["after"]["id"], c["after"]["n"]) for c in ups) == [(i, n) for i in (1, 2) for n in (1, 2, 3, 4)]
    assert all(c["after"]["body"] == body[c["after"]["id"]] for c in ups)
    assert [(c["op"], c["after"]["body"] == body[1]) for c in latest.values() if c["op"] == "r"] == [("r", True)]


def test_placeholder_mode_writes_the_debezium_placeholder(postgres, broker, tmp_path):
    dsn = new_database(postgres, "toastp")
    sql(dsn, "CREATE TABLE doc (id int PRIMARY KEY, body text, n int)")
    sql(
        dsn,
        "INSERT INTO doc VALUES (1, %s, 0)",
        args=("".join(random.Random(1).choices("abcdef0123456789", k=10_000)),),
    )
    topic, log = f"raw-{uuid.uuid4().hex[:8]}", tmp_path / "capture.log"
    capture = start_capture(dsn, broker.bootstrap, topic, log, tmp_path / "state", "--toast", "placeholder")
    try:
        wait_streaming(log, 1)
        sql(dsn, "UPDATE doc SET n = 1")
        records = read_raw(broker.bootstrap, topic, commit_sentinel(dsn, "doc"))
    finally:
        stop(capture)
    (update,) = toast_updates(records, {1})
    assert update["after"]["body"] == PLACEHOLDER and update["attrs"]["toast_placeholder"] == "body"
    assert '"msg_toast_placeholder": 1' in log.read_text()


# ---- slot progress, reconnects, lost slot ----------------------------------------------------------


def slot_position(postgres, slot: str) -> tuple[int, int]:
    """(confirmed_flush_lsn, retained WAL bytes) of the slot."""
    rows = sql(
        postgres.dsn(),
        "SELECT confirmed_flush_lsn - '0/0'::pg_lsn, pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots "
        "WHERE slot_name = %s",
        args=(slot,),
    )
    return int(rows[0][0]), int(rows[0][1])


def test_slot_advances_while_only_another_database_is_written(postgres, broker, tmp_path):
    dsn, other = new_database(postgres, "idle"), new_database(postgres, "busy")
    sql(dsn, "CREATE TABLE quiet (id int PRIMARY KEY)")
    sql(other, "CREATE TABLE churn (id serial PRIMARY KEY, pad text)")
    topic, log = f"raw-{uuid.uuid4().hex[:8]}", tmp_path / "capture.log"
    capture = start_capture(dsn, broker.bootstrap, topic, log, tmp_path / "state", slot="idle")
    try:
        wait_streaming(log, 1)
        time.sleep(3)
        start_lsn, start_retained = slot_position(postgres, "idle")
        wal_start = int(sql(postgres.dsn(), "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])
        busy = psycopg2.connect(other)
        busy.autocommit = True
        deadline, retained, next_sample = time.monotonic() + 60, [], 0.0
        with busy.cursor() as cur:
            while time.monotonic() < deadline:
                cur.execute("INSERT INTO churn (pad) SELECT repeat('x', 500) FROM generate_series(1, 200)")
                cur.execute("DELETE FROM churn WHERE id % 3 = 0")
                if time.monotonic() >= next_sample:
                    retained.append(slot_position(postgres, "idle")[1])
                    next_sample = time.monotonic() + 5
                time.sleep(0.02)
        busy.close()
        time.sleep(2)
        end_lsn, end_retained = slot_position(postgres, "idle")
        wal_end = int(sql(postgres.dsn(), "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])
    finally:
        stop(capture)
    print(
        f"\nWAL written: {(wal_end - wal_start) >> 20} MB; confirmed_flush moved {(end_lsn - start_lsn) >> 10} kB; "
        f"retained WAL {start_retained >> 10} kB -> {end_retained >> 10} kB, at most {max(retained) >> 10} kB"
    )
    assert wal_end - wal_start > 20 << 20, "the other database did not write enough WAL to tell"
    assert end_lsn - start_lsn > (wal_end - wal_start) // 2
    # Retained WAL ends where it started; meanwhile it only spans the gap between two xl_running_xacts
    # records (restart_lsn moves with them), never the WAL written.
    # restart_lsn only moves at an xl_running_xacts record, which the bgwriter logs every 15 s, so up to
    # ~20 s of this test's WAL (a third of 60 s) may be retained at the end; a slot that did not advance
    # would retain all of it.
    assert end_retained <= max(start_retained, 16 << 20, (wal_end - wal_start) // 3)
    assert max(retained) <= (wal_end - wal_start) * 0.6


def test_lost_connection_reconnects_and_a_dropped_slot_is_lost_state(postgres, broker, tmp_path):
    dsn = new_database(postgres, "recon")
    sql(dsn, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    topic, log = f"raw-{uuid.uuid4().hex[:8]}", tmp_path / "capture.log"
    capture = start_capture(dsn, broker.bootstrap, topic, log, tmp_path / "state", slot="recon")
    terminate = "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'recon'"
    try:
        wait_streaming(log, 1)
        sql(dsn, "INSERT INTO t VALUES (1, 'before')")
        sql(postgres.dsn(), terminate)
        sql(dsn, "INSERT INTO t VALUES (2, 'while reconnecting')")
        wait_log(log, "postgres.connection_lost")
        wait_streaming(log, 2)
        records = read_raw(broker.bootstrap, topic, commit_sentinel(dsn, "t"))
        inserted = {e["key"]["id"] for _, _, e in records if e["op"] == "INSERT" and e["table"] == "public.t"}
        assert inserted == {-1, 1, 2}
        # Drop the slot between two reconnect attempts: the capture must stop, not re-create it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sql(postgres.dsn(), terminate)
            try:
                sql(postgres.dsn(), "SELECT pg_drop_replication_slot('recon')")
                break
            except psycopg2.errors.ObjectInUse:
                time.sleep(0.05)
        assert capture.wait(30) == 4
    finally:
        if capture.poll() is None:
            stop(capture)
    text = log.read_text()
    assert "capture.slot_lost" in text and "was dropped" in text
    assert sql(postgres.dsn(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'recon'")[0][0] == 0
    # And a restart with the same state refuses as well.
    again = start_capture(dsn, broker.bootstrap, topic, log, tmp_path / "state", slot="recon")
    assert again.wait(30) == 4


class _Crash(Exception):
    pass


class _RecordingWriter:
    """Collects raw events; `crash_at_flush=n` dies on the n-th flush, after the chunk was "sent"."""

    def __init__(self, crash_at_flush: int | None = None):
        self.events: list[dict] = []
        self.flushes = 0
        self.crash_at_flush = crash_at_flush

    def write(self, event: dict) -> None:
        self.events.append(event)

    def flush(self) -> None:
        self.flushes += 1
        if self.flushes == self.crash_at_flush:
            raise _Crash


def test_a_chunk_in_flight_at_a_kill_is_sent_again_byte_for_byte(postgres, tmp_path):
    from processor.sources.pg_snapshot import Snapshotter

    dsn = new_database(postgres, "chunk")
    setup_schema(dsn, preexisting=1000)
    sql(dsn, "CREATE PUBLICATION cap FOR ALL TABLES")
    state = CaptureState.load(tmp_path)
    state.slot_lsn, state.snapshot_ts_ms = 1 << 24, 1
    state.save()
    conn = psycopg2.connect(dsn)
    first = _RecordingWriter(crash_at_flush=3)
    with pytest.raises(_Crash):  # chunk 2 reached Kafka, its progress was not recorded
        Snapshotter(conn, first, state, "cap", chunk_rows=100).run(None)
    conn.close()
    state = CaptureState.load(tmp_path)
    assert state.tables["public.acct"].chunks == 2
    # The rows of the in-flight chunk change before the restart: the re-sent chunk must not.
    sql(dsn, "DELETE FROM acct WHERE id BETWEEN 1000200 AND 1000250")
    conn = psycopg2.connect(dsn)
    second = _RecordingWriter()
    Snapshotter(conn, second, state, "cap", chunk_rows=100).run(None)
    conn.close()
    in_flight = [e for e in first.events if e["xid"].endswith("public.acct:2")]
    assert len(in_flight) == 102 and second.events[:102] == in_flight
    reads = {(e["xid"], e["seq"]): e for e in first.events + second.events if e["op"] == "READ"}
    keys = Counter((e["table"], e["key"]["id"]) for e in reads.values())
    assert all(n == 1 for n in keys.values())
    assert len([k for k in keys if k[0] == "public.acct"]) == 1000  # deleted rows were in the resent chunk
    assert CaptureState.load(tmp_path).tables["public.hist"].done
