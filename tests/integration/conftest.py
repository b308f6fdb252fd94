"""Fixtures for integration tests.

- `postgres`: a throwaway PostgreSQL 15 cluster for capture tests: initdb in a temp dir as the `postgres`
  OS user, a free loopback port, wal_level=logical and the smallest logical_decoding_work_mem, so that
  modest transactions are streamed before they commit.
- `own_broker`: an Apache Kafka broker of the test module's own, for tests that pause, stop or restart it
  (the session `broker` must not be disturbed).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from processor.kafka.embedded import free_port

SETUP_HINT = "install them with deploy/setup/postgres.sh"


def find_pg_bin() -> Path:
    """The PostgreSQL 15 server binaries: $TXBUFFER_PG_BIN, the Debian location, else `initdb` on PATH."""
    candidates = [os.environ.get("TXBUFFER_PG_BIN"), "/usr/lib/postgresql/15/bin"]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for c in filter(None, candidates):
        if (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    pytest.fail(f"PostgreSQL server binaries (initdb, pg_ctl) not found in {candidates}: {SETUP_HINT}", pytrace=False)


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


def _require_postgres_user() -> None:
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail(
                f"running as root but there is no `postgres` OS user to run initdb: {SETUP_HINT}", pytrace=False
            )


@pytest.fixture(scope="session")
def postgres():
    pg_bin = find_pg_bin()
    _require_postgres_user()

    root = Path(tempfile.mkdtemp(prefix="txbuffer-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")  # by id: the group name lookup has failed under load
        os.chown(root, pw.pw_uid, pw.pw_gid)
    datadir, log = root / "data", root / "pg.log"
    port = free_port()
    _as_postgres(str(pg_bin / "initdb"), "-D", str(datadir), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
    opts = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c wal_level=logical "
        "-c logical_decoding_work_mem=64kB -c max_replication_slots=10 -c max_wal_senders=10 "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60"
    )
    _as_postgres(str(pg_bin / "pg_ctl"), "-D", str(datadir), "-o", opts, "-l", str(log), "-w", "-t", "60", "start")
    try:
        yield PgCluster(port, datadir)
    finally:
        _as_postgres(str(pg_bin / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory):
    """An embedded broker of this module's own, on a kept data dir: a test may pause (SIGSTOP) it, or stop
    and start it again on the same data and ports. It is resumed if left paused, then stopped."""
    from processor.kafka.embedded import EmbeddedKafka

    kafka = EmbeddedKafka(data_dir=tmp_path_factory.mktemp("kafka"), keep_data=True)
    kafka.start(timeout_s=180)  # generous: the suite shares two cores with other JVMs
    try:
        yield kafka
    finally:
        if kafka.running():
            kafka.resume()
        kafka.stop()
