"""The pipeline over SASL_SSL + SCRAM-SHA-512 on Apache Kafka, with the ACLs docs/security.md lists.

Client settings reach every command three ways: environment (generate), a properties file (run)
and the typed config object (verify). A wrong password is a clear error within seconds, and the
password shows up in no log line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from processor.kafka.admin import KafkaAuthError, check_connection
from processor.testing.verify import verify

from .secure_kafka import (
    client_properties,
    grant_documented_acls,
    secure_broker,
    secure_client,
)

PASSWORD = "pw-Zq8-never-logged"
CLI = [sys.executable, "-m", "processor.cli", "--log-format", "json"]


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    broker = secure_broker(tmp_path_factory.mktemp("secure-kafka"), PASSWORD)
    broker.start(timeout_s=180)  # generous: the suite shares two cores with JVMs
    try:
        grant_documented_acls(broker)
        yield broker
    finally:
        broker.stop()


def _env_for(properties: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXBUFFER_")}
    env.update({"TXBUFFER_KAFKA_" + k.upper().replace(".", "_"): v for k, v in properties.items()})
    return env


def test_wrong_password_is_a_clear_error_within_seconds(secure):
    started = time.monotonic()
    with pytest.raises(KafkaAuthError, match=r"SASL authentication error.*invalid credentials"):
        check_connection(secure_client(secure, "not-the-password"), timeout_s=30)
    assert time.monotonic() - started < 10


def test_a_command_with_a_wrong_password_exits_with_the_reason_and_never_prints_it(secure):
    bad = client_properties(secure, "wrong-" + PASSWORD)
    bootstrap = secure.listener("SASL_SSL").bootstrap
    started = time.monotonic()
    proc = subprocess.run(
        [*CLI, "generate", "--bootstrap", bootstrap, "--events", "10"],
        env=_env_for(bad),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "invalid credentials" in proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr


def test_generate_run_verify_over_sasl_ssl(secure, tmp_path):
    bootstrap = secure.listener("SASL_SSL").bootstrap
    props = client_properties(secure, PASSWORD)
    expected = tmp_path / "expected"
    # generate: settings from TXBUFFER_KAFKA_* variables
    gen = subprocess.run(
        [*CLI, "generate", "--bootstrap", bootstrap, "--events", "3000", "--open-txns", "20",
         "--partitions", "3", "--expected-dir", str(expected)],
        env=_env_for(props), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr[-3000:]
    # run: settings from a properties file, as the k8s Secret mounts it
    properties_file = tmp_path / "client.properties"
    properties_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXBUFFER_")}
    run = subprocess.run(
        [*CLI, "run", "--bootstrap", bootstrap, "--client-properties", str(properties_file),
         "--available-now", "--state-dir", str(tmp_path / "state")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    for output in (gen.stdout + gen.stderr, run.stdout + run.stderr):
        assert PASSWORD not in output
    logged = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    shown = next(e["kafka"] for e in logged if e.get("event") == "run.config")
    assert shown["sasl.password"] == "***" and shown["security.protocol"] == "SASL_SSL"
    status = subprocess.run(
        [*CLI, "status", "--state-dir", str(tmp_path / "state"), "--json"], capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0 and PASSWORD not in status.stdout + status.stderr
    # verify: the typed config object
    report = verify(secure_client(secure, PASSWORD), expected, timeout_s=120)
    assert report.ok, report.summary()
    assert report.expected > 0 and report.lost == 0
