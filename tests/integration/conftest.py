"""Spark fixtures: one real local SparkSession for the whole session (JVM start-up is the cost)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    pytest.importorskip("pyarrow", reason="pyarrow is required by the Spark stage")
    from processor.spark.job import spark_session

    session = spark_session(app="txbuffer-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def changes_topic(broker):
    """A fresh 3-partition changes topic per test."""
    from processor.kafka_util import ensure_topics

    name = f"changes-{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {name: 3})
    return name
