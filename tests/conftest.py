"""Shared fixtures: one broker per test session.

`broker` is Apache Kafka everywhere: the embedded KRaft broker started from the official jars
(processor/kafka/embedded.py), or testcontainers' apache/kafka when a Docker engine answers and
TXBUFFER_TEST_BROKER=docker asks for it.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import pytest


@dataclass
class BrokerHandle:
    bootstrap: str
    kind: str = "apache-kafka"  # the only broker the suite runs on
    source: str = "embedded"  # "embedded" (EmbeddedKafka) or "docker" (testcontainers apache/kafka)
    embedded: object | None = None  # the EmbeddedKafka, for tests that stop, kill or pause it


def _docker_reachable() -> str | None:
    """None when a Docker engine answers a ping, else the reason."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # missing SDK, socket or daemon all mean "no engine"
        return f"{type(exc).__name__}: {exc}"
    return None


def _apache_kafka_container():
    """The apache/kafka adaptation of testcontainers' KafkaContainer, shared with its smoke test."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "integration" / "test_testcontainers_kafka.py"
    spec = importlib.util.spec_from_file_location("_txbuffer_tc_kafka", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.apache_kafka_container()


@pytest.fixture(scope="session")
def broker():
    wanted = os.environ.get("TXBUFFER_TEST_BROKER", "embedded")
    if wanted == "docker":
        reason = _docker_reachable()
        if reason is not None:
            pytest.skip(f"TXBUFFER_TEST_BROKER=docker but no Docker engine is reachable ({reason})")
        container = _apache_kafka_container()
        container.start(timeout=120)
        try:
            yield BrokerHandle(container.get_bootstrap_server(), source="docker")
        finally:
            container.stop()
        return
    from processor.kafka.embedded import EmbeddedKafka

    with EmbeddedKafka() as embedded:
        yield BrokerHandle(embedded.bootstrap, embedded=embedded)
        # Destroy clients that outlived their tests while the broker still answers; otherwise
        # librdkafka logs "connection refused" after pytest's closing summary.
        gc.collect()


@pytest.fixture(scope="session")
def spark():
    """One real local SparkSession for the session (the JVM start-up is the cost)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    pytest.importorskip("pyarrow", reason="pyarrow is required by the Spark stage")
    from processor.spark.job import spark_session

    # The tests are the launcher here: they choose master, parallelism and UI, as spark-submit would.
    session = spark_session(
        app="txbuffer-tests",
        conf={
            "spark.master": "local[2]",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "1g",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def changes_topic(broker):
    """A fresh 3-partition changes topic per test."""
    import uuid

    from processor.kafka.admin import ensure_topics

    name = f"changes-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {name: 3})
    return name
