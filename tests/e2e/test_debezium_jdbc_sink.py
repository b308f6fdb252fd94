"""The proof of the Debezium output mode with a consumer no one here wrote: Debezium's own JDBC sink.

PostgreSQL 15 (source database) -> `txbuffer capture postgres` -> raw topic -> processor with
`envelope: debezium` (Kafka Connect JSON with schemas) -> per-table topics -> Kafka Connect
standalone (Apache Kafka 4.1.1 jars) running io.debezium.connector.jdbc.JdbcSinkConnector with the
JsonConverter -> a second PostgreSQL database. The workload has a snapshot of existing rows,
inserts, updates, deletes, full rollbacks, savepoints (rolled back and released) and one
transaction of 100,000 rows; afterwards every target table equals its source table.

The broker is the real Apache Kafka (processor.kafka.embedded), because Kafka Connect needs it.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

from processor.core import events as ev
from processor.kafka.embedded import EmbeddedKafka, free_port
from processor.kafka.jars import bundle_pom, bundle_version, classpath, ensure_bundle, java_binary
from processor.runtime.runner import Runner
from tests.integration.processor_kit import Topics, config

psycopg2 = pytest.importorskip("psycopg2")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "dbz"
BIG_ROWS = int(os.environ.get("TXBUFFER_E2E_BIG_ROWS", "100000"))  # smaller only to debug
DDL = (
    "CREATE TABLE acct (id int PRIMARY KEY, bal bigint NOT NULL, note text, flag bool, raw bytea, "
    "amount numeric(12,2), ratio float8, created timestamptz, day date, uid uuid, doc jsonb)",
    "CREATE TABLE hist (id int PRIMARY KEY, v text)",
    "CREATE TABLE big (id int PRIMARY KEY, grp int NOT NULL, label varchar(40))",
)
TABLES = ("acct", "hist", "big")


def sql(dsn: str, *statements: str) -> list:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    rows: list = []
    with conn.cursor() as cur:
        for st in statements:
            cur.execute(st)
            rows = cur.fetchall() if cur.description is not None else rows
    conn.close()
    return rows


def new_database(postgres, prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    sql(postgres.dsn(), f"CREATE DATABASE {name}")
    return postgres.dsn(name)


def table_rows(dsn: str, table: str) -> list[tuple]:
    rows = sql(dsn, f"SELECT * FROM {table} ORDER BY id")
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]


# ---- the workload --------------------------------------------------------------------------------


def acct_values(rnd: random.Random, k: int) -> tuple:
    return (
        k,
        rnd.randint(-(10**12), 10**12),
        rnd.choice([None, f"note {rnd.random()}", "ünïcödé ✓"]),
        rnd.choice([None, True, False]),
        rnd.choice([None, bytes(rnd.getrandbits(8) for _ in range(5))]),
        Decimal(rnd.randint(-(10**8), 10**8)) / 100,
        rnd.random() * 1e6,
        f"2024-0{rnd.randint(1, 9)}-1{rnd.randint(0, 9)} 1{rnd.randint(0, 9)}:30:0{rnd.randint(0, 9)}.{rnd.randint(0, 999999):06d}+02",
        f"19{rnd.randint(70, 99)}-0{rnd.randint(1, 9)}-2{rnd.randint(0, 8)}",
        str(uuid.UUID(int=rnd.getrandbits(128))),
        rnd.choice([None, '{"a": 1, "b": [true, null]}', '"scalar"']),
    )


UPSERT_ACCT = (
    "INSERT INTO acct VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (id) DO UPDATE SET "
    "bal = EXCLUDED.bal, note = EXCLUDED.note, amount = EXCLUDED.amount, created = EXCLUDED.created"
)


def small_ops(cur, rnd: random.Random, stats: dict) -> None:
    for _ in range(rnd.randint(1, 5)):
        k, op = rnd.randint(0, 80), rnd.random()
        if op < 0.4:
            cur.execute(UPSERT_ACCT, acct_values(rnd, k))
        elif op < 0.6:
            cur.execute("UPDATE acct SET bal = bal + 1, flag = NOT flag, doc = NULL WHERE id = %s", (k,))
        elif op < 0.75:
            cur.execute("DELETE FROM acct WHERE id = %s", (k,))
        elif op < 0.92:
            cur.execute(
                "INSERT INTO hist VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
                (k, f"h{rnd.random()}"),
            )
        else:
            cur.execute("DELETE FROM hist WHERE id = %s", (k,))
        stats["ops"] = stats.get("ops", 0) + 1


def run_workload(dsn: str, seed: int = 17) -> dict:
    rnd = random.Random(seed)
    stats: dict = {}
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    for i in range(400):
        if rnd.random() < 0.3:  # savepoints, nested, rolled back or released
            small_ops(cur, rnd, stats)
            cur.execute("SAVEPOINT a")
            small_ops(cur, rnd, stats)
            cur.execute("SAVEPOINT b")
            small_ops(cur, rnd, stats)
            choice = rnd.random()
            cur.execute(
                "ROLLBACK TO SAVEPOINT b"
                if choice < 0.4
                else "ROLLBACK TO SAVEPOINT a"
                if choice < 0.7
                else "RELEASE a"
            )
            stats["savepoint_txns"] = stats.get("savepoint_txns", 0) + 1
        else:
            small_ops(cur, rnd, stats)
        if rnd.random() < 0.15:
            conn.rollback()
            stats["rollbacks"] = stats.get("rollbacks", 0) + 1
        else:
            conn.commit()
            stats["commits"] = stats.get("commits", 0) + 1
        if i == 200:  # the big one, in the middle of the small ones
            cur.execute("INSERT INTO big SELECT g, g %% 97, 'row ' || g FROM generate_series(1, %s) g", (BIG_ROWS,))
            cur.execute("SAVEPOINT s")
            cur.execute("DELETE FROM big WHERE id <= 5000")
            cur.execute("ROLLBACK TO SAVEPOINT s")
            cur.execute("UPDATE big SET label = 'updated' WHERE grp = 3")
            cur.execute("DELETE FROM big WHERE grp = 5")
            conn.commit()
            stats["big_txn_rows"] = BIG_ROWS
    conn.close()
    return stats


# ---- the pipeline --------------------------------------------------------------------------------


def start_capture(dsn: str, bootstrap: str, topic: str, state: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "processor.cli", "--log-format", "json", "capture", "postgres", "--dsn", dsn,
           "--slot", "dbzcap", "--publication", "dbzcap", "--state-dir", str(state), "--bootstrap", bootstrap,
           "--topic", topic, "--partitions", "3", "--ack-interval", "0.2", "--heartbeat-interval", "0.5"]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def wait_for(check, timeout_s: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def committed_on_raw(bootstrap: str, topic: str, xid: str, timeout_s: float = 180.0) -> None:
    """Wait until the raw topic holds the COMMIT of `xid` (routing fields only are decoded)."""
    from confluent_kafka import Consumer, TopicPartition

    from processor.kafka.admin import partition_count
    from processor.kafka.client_config import CONSUMER_DEFAULTS

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{uuid.uuid4().hex}", **CONSUMER_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partition_count(bootstrap, topic))])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                if msg.error():
                    continue
                head, _ = ev.decode_routing(msg.value())
                if head["xid"] == xid and head["op"] == ev.COMMIT:
                    return
    finally:
        consumer.close()
    raise AssertionError(f"the sentinel transaction {xid} never reached {topic}")


def sentinel(dsn: str) -> str:
    conn = psycopg2.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT txid_current()")
        xid = str(cur.fetchone()[0])
        cur.execute("INSERT INTO hist VALUES (-1, 'sentinel') ON CONFLICT (id) DO UPDATE SET v = 'sentinel'")
    conn.commit()
    conn.close()
    return xid


def write_connect_config(tmp: Path, bootstrap: str, target_port: int, target_db: str) -> tuple[Path, Path, Path]:
    worker, connector, log4j = tmp / "worker.properties", tmp / "jdbc-sink.properties", tmp / "log4j2.properties"
    worker.write_text(
        "\n".join(
            [
                f"bootstrap.servers={bootstrap}",
                "key.converter=org.apache.kafka.connect.json.JsonConverter",
                "value.converter=org.apache.kafka.connect.json.JsonConverter",
                "key.converter.schemas.enable=true",
                "value.converter.schemas.enable=true",
                f"offset.storage.file.filename={tmp / 'connect.offsets'}",
                f"listeners=http://127.0.0.1:{free_port()}",
                "plugin.discovery=only_scan",
                "consumer.max.poll.records=2000",
            ]
        )
    )
    connector.write_text(
        "\n".join(
            [
                "name=txbuffer-jdbc-sink",
                "connector.class=io.debezium.connector.jdbc.JdbcSinkConnector",
                "tasks.max=1",
                f"topics.regex={PREFIX}\\\\.public\\\\..*",
                f"connection.url=jdbc:postgresql://127.0.0.1:{target_port}/{target_db}",
                "connection.username=postgres",
                "connection.password=postgres",
                "insert.mode=upsert",
                "delete.enabled=true",
                "primary.key.mode=record_key",
                "schema.evolution=none",
                "use.time.zone=UTC",
                "batch.size=2000",
                # <prefix>.public.<table> -> <table>: the sink writes to the table named by the topic.
                "transforms=route",
                "transforms.route.type=org.apache.kafka.connect.transforms.RegexRouter",
                f"transforms.route.regex={PREFIX}\\\\.public\\\\.(.*)",
                "transforms.route.replacement=$1",
            ]
        )
    )
    log4j.write_text(
        "status = warn\nappender.out.type = Console\nappender.out.name = OUT\n"
        "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = info\nrootLogger.appenderRef.out.ref = OUT\n"
        "logger.hibernate.name = org.hibernate\nlogger.hibernate.level = warn\n"
    )
    return worker, connector, log4j


def start_connect(libs: Path, worker: Path, connector: Path, log4j: Path, log: Path) -> subprocess.Popen:
    # C1 only and the serial collector, as the embedded broker: a JVM that lives a minute or two spends
    # less of a shared machine's two cores compiling and collecting.
    cmd = [java_binary(), "-Xmx768m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
           f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(libs),
           "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), str(connector)]  # fmt: skip
    return subprocess.Popen(cmd, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def differences(source: str, target: str) -> str:
    """Per table: row counts and the first differing rows (for the failure message)."""
    out = []
    for table in TABLES:
        want, got = table_rows(source, table), table_rows(target, table)
        first = next(((w, g) for w, g in zip(want, got, strict=False) if w != g), None)
        out.append(f"{table}: source {len(want)} rows, target {len(got)} rows, first difference {first}")
    return "\n".join(out)


@pytest.mark.timeout(1800)
def test_debeziums_jdbc_sink_rebuilds_every_source_table_from_txbuffer_debezium_topics(postgres, tmp_path):
    libs = ensure_bundle("connect", bundle_version("connect"), bundle_pom("connect"))
    source = new_database(postgres, "dbzsrc")
    target = new_database(postgres, "dbztgt")
    target_db = target.split("dbname=")[1].split()[0]
    sql(source, *DDL, "ALTER TABLE hist REPLICA IDENTITY FULL")
    sql(target, *DDL)
    # Rows that exist before capture starts arrive through the snapshot, as op "r".
    sql(source, "INSERT INTO acct (id, bal, note) SELECT g, g * 10, 'pre ' || g FROM generate_series(50, 79) g")
    timings: dict[str, float] = {}

    with EmbeddedKafka(log_path=tmp_path / "kafka.log") as kafka:
        topics = Topics.fresh()
        capture = start_capture(source, kafka.bootstrap, topics.raw, tmp_path / "capture-state", tmp_path / "cap.log")
        try:
            wait_for(lambda: "postgres.streaming" in (tmp_path / "cap.log").read_text(), 90, "capture streaming")
            started = time.monotonic()
            stats = run_workload(source)
            timings["workload_s"] = time.monotonic() - started
            committed_on_raw(kafka.bootstrap, topics.raw, sentinel(source))
        finally:
            stop_process(capture)

        cfg = config(
            kafka.bootstrap,
            topics,
            tmp_path / "state",
            available_now=True,
            envelope="debezium",
            topic_prefix=PREFIX,
            serialization="json",
            # Per-row order across transactions that landed on different raw partitions, as a
            # Debezium consumer expects from a table topic.
            ordering="global",
        )
        started = time.monotonic()
        runner = Runner(cfg)  # envelope: debezium -> the runner's emitter writes through DebeziumSink
        summary = runner.run()
        timings["processor_s"] = time.monotonic() - started
        del runner  # its clients go before the broker does
        gc.collect()
        assert summary.changes_emitted > BIG_ROWS

        worker, connector, log4j = write_connect_config(tmp_path, kafka.bootstrap, postgres.port, target_db)
        started = time.monotonic()
        connect = start_connect(libs, worker, connector, log4j, tmp_path / "connect.log")
        try:

            def converged():
                log_text = (tmp_path / "connect.log").read_text()
                if connect.poll() is not None or " ERROR " in log_text:
                    raise AssertionError("Kafka Connect failed:\n" + log_text[log_text.find(" ERROR ") - 200 :][:6000])
                return all(table_rows(source, t) == table_rows(target, t) for t in TABLES)

            try:
                wait_for(
                    converged,
                    float(os.environ.get("TXBUFFER_E2E_CONVERGE_S", "900")),
                    "the JDBC sink to make every target table equal its source",
                    interval=3,
                )
            except AssertionError:
                print(differences(source, target))
                raise
            timings["connect_s"] = time.monotonic() - started
        finally:
            stop_process(connect)

    counts = {t: len(table_rows(source, t)) for t in TABLES}
    print(f"\nworkload {stats}\nrows {counts}\nchanges emitted {summary.changes_emitted}, timings {timings}")
    assert counts["big"] > 0.9 * BIG_ROWS and counts["acct"] > 0 and counts["hist"] > 0
    errors = [line for line in (tmp_path / "connect.log").read_text().splitlines() if " ERROR " in line]
    assert errors == []
