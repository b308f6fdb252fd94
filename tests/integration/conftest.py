"""A throwaway PostgreSQL 15 cluster for capture tests: initdb in a temp dir as the `postgres` OS user,
a free loopback port, wal_level=logical and the smallest logical_decoding_work_mem, so that modest
transactions are streamed before they commit."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("TXBUFFER_PG_BIN", "/usr/lib/postgresql/15/bin"))


@dataclass
class PgCluster:
    port: int
    datadir: Path

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user}"


def _as_postgres(*cmd: str, **kw) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        cmd = ("runuser", "-u", "postgres", "--", *cmd)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def _unavailable() -> str | None:
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL binaries in {PG_BIN}"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root but there is no `postgres` OS user to run initdb"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (the `sources` extra)"
    return None


@pytest.fixture(scope="session")
def postgres():
    reason = _unavailable()
    if reason:
        pytest.skip(f"PostgreSQL cluster unavailable: {reason}")
    from processor.kafka.tansu import free_port

    root = Path(tempfile.mkdtemp(prefix="txbuffer-pg-"))
    shutil.chown(root, "postgres", "postgres") if os.geteuid() == 0 else None
    datadir, log = root / "data", root / "pg.log"
    port = free_port()
    _as_postgres(str(PG_BIN / "initdb"), "-D", str(datadir), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
    opts = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c wal_level=logical "
        "-c logical_decoding_work_mem=64kB -c max_replication_slots=10 -c max_wal_senders=10 "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-o", opts, "-l", str(log), "-w", "-t", "60", "start")
    try:
        yield PgCluster(port, datadir)
    finally:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
