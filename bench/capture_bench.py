"""PostgreSQL capture throughput: `python -m bench.capture_bench [--transactions N] [--clients C] [--dsn DSN]`.

What it measures: row changes per second from PostgreSQL's WAL to the raw topic, acknowledged by
Kafka and confirmed to the slot (pgoutput decoding, mapping, TOAST image store, Avro encoding,
produce, flush, standby status update).

How: a slot is created first, then `pgbench` (TPC-B-like: 3 UPDATEs and 1 INSERT a transaction)
runs its load with the capture stopped, so the WAL holds a backlog. The capture then starts and
drains it; rows/s = row changes on the raw topic / seconds until the slot confirmed the last
commit. Load generation is not timed, so the figure is the capture's own ceiling. On a shared
machine the wall-clock rate depends on other load: rows per CPU second of the capture process
(and the load average) are reported beside it. Without `--dsn`
it starts a throwaway PostgreSQL 15 cluster (initdb in a temp dir). `run()` returns a dict for the
bench harness (bench.run); it needs a broker bootstrap.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PG_BIN = Path(os.environ.get("TXBUFFER_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(*cmd: str) -> None:
    if os.geteuid() == 0:
        cmd = ("runuser", "-u", "postgres", "--", *cmd)
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@contextmanager
def throwaway_cluster() -> Iterator[str]:
    """A PostgreSQL 15 cluster with wal_level=logical on a free loopback port; yields its DSN."""
    root = Path(tempfile.mkdtemp(prefix="txbuffer-pgbench-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")  # by id: the group name lookup has failed under load
        os.chown(root, pw.pw_uid, pw.pw_gid)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    _as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
    opts = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_wal_size=2GB "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "pg.log"), "-w", "start")
    try:
        yield f"host=127.0.0.1 port={port} dbname=postgres user=postgres"
    finally:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _pgbench(dsn: str, *args: str) -> str:
    params = dict(kv.split("=", 1) for kv in dsn.split())
    cmd = [str(PG_BIN / "pgbench"), "-h", params["host"], "-p", params["port"], "-U", params["user"], *args]
    return subprocess.run([*cmd, params["dbname"]], check=True, capture_output=True, text=True).stdout


def run(bootstrap: str, dsn: str | None = None, transactions: int = 20_000, clients: int = 4) -> dict:
    if dsn is None:
        with throwaway_cluster() as local:
            return run(bootstrap, local, transactions, clients)
    import psycopg2

    from processor.kafka.rawtopic import RawTopicWriter
    from processor.sources.pg_capture import CaptureOptions, PostgresCapture, check_setup, parse_lsn

    tag = uuid.uuid4().hex[:8]
    slot, topic = f"bench_{tag}", f"bench-pg-raw-{tag}"
    _pgbench(dsn, "-i", "-q", "-s", "1")
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY")  # keyed like every table
    check_setup(dsn, slot, create=True, tables=[f"pgbench_{t}" for t in ("accounts", "tellers", "branches", "history")])
    with tempfile.TemporaryDirectory(prefix="txbuffer-capbench-") as state:
        options = CaptureOptions(slot=slot, publication=slot, state_dir=Path(state), snapshot="never")
        writer = RawTopicWriter(bootstrap, topic, 4)
        capture = PostgresCapture(dsn, writer, options)
        capture.prepare().close()  # the slot exists before the load: the load is the backlog
        t0 = time.monotonic()
        per_client = max(1, transactions // clients)
        _pgbench(dsn, "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(per_client), "-n")
        load_s = time.monotonic() - t0
        cur.execute("SELECT pg_current_wal_lsn()::text")
        target = parse_lsn(cur.fetchone()[0])
        cur.execute("SELECT count(*) FROM pgbench_history")
        history = cur.fetchone()[0]

        started, cpu0 = time.monotonic(), time.process_time()
        thread = threading.Thread(target=capture.run, daemon=True)
        thread.start()
        while capture.acked_lsn < target and thread.is_alive() and time.monotonic() - started < 600:
            time.sleep(0.02)
        drain_s = time.monotonic() - started
        cpu_s = time.process_time() - cpu0  # this process only: capture, librdkafka and libpq threads
        capture.stop()
        thread.join(30)
        capture.close()
        cur.execute(f"SELECT pg_drop_replication_slot('{slot}')")
        cur.execute(f"DROP PUBLICATION {slot}")
    conn.close()
    rows = capture.mapper.stats["Update"] + capture.mapper.stats["Insert"] + capture.mapper.stats["Delete"]
    assert capture.acked_lsn >= target, f"the capture did not catch up in {drain_s:.0f}s"
    return {
        "transactions": per_client * clients,
        "rows": rows,
        "history_rows": history,
        "raw_events": capture.events,
        "load_seconds": round(load_s, 2),
        "drain_seconds": round(drain_s, 2),
        "rows_per_s": round(rows / drain_s),
        "events_per_s": round(capture.events / drain_s),
        "cpu_seconds": round(cpu_s, 2),
        "rows_per_cpu_s": round(rows / cpu_s),
        "load_average": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.capture_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--dsn", default=None, help="an existing database (wal_level=logical); default: a throwaway one")
    ap.add_argument("--bootstrap", default=None, help="Kafka bootstrap; default: start the embedded broker")
    args = ap.parse_args(argv)
    if args.bootstrap:
        result = run(args.bootstrap, args.dsn, args.transactions, args.clients)
    else:
        from processor.kafka.embedded import EmbeddedKafka

        with EmbeddedKafka() as broker:
            result = run(broker.bootstrap, args.dsn, args.transactions, args.clients)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
