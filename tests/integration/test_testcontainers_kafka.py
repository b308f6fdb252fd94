"""The topic and produce/consume assertions on real Apache Kafka (testcontainers) and on the embedded broker.

The same `check_broker` runs against both, so what passes on Tansu here also holds on apache/kafka
wherever a Docker engine is reachable (CI with Docker, a developer's laptop). Without one the
Apache Kafka case skips and says why.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer

from processor.kafka.admin import ensure_topics, partition_count
from processor.kafka.client_config import CONSUMER_DEFAULTS, make_producer
from processor.kafka.end_offsets import end_offsets
from processor.kafka.produce import produce_all

pytestmark = pytest.mark.integration

KAFKA_IMAGE = "apache/kafka:4.1.1"  # the version the embedded broker runs (processor/kafka/embedded.py)


def docker_unreachable_reason() -> str | None:
    """None when a Docker engine answers a ping; else why not (the CLI alone is not enough)."""
    try:
        import docker
    except ImportError as exc:
        return f"no Docker engine reachable: docker SDK missing ({exc})"
    try:
        client = docker.from_env(timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # DockerException, requests errors, a missing socket: all mean "no engine"
        return f"no Docker engine reachable: {type(exc).__name__}: {exc}"
    return None


def apache_kafka_container():
    """testcontainers' KafkaContainer adapted to the apache/kafka image.

    KafkaContainer's boot script drives Confluent's /etc/confluent/docker scripts; apache/kafka
    configures itself from KAFKA_* variables in /etc/kafka/docker/run, so only the KRaft settings
    and the start script differ. The advertised listener still needs the mapped port, known only
    after the container starts, hence KafkaContainer's wait-for-script start.
    """
    from testcontainers.kafka import KafkaContainer

    class ApacheKafkaContainer(KafkaContainer):
        def configure(self) -> None:
            self.wait_for = __import__("re").compile(r".*Kafka Server started.*")
            self.with_env("CLUSTER_ID", self.cluster_id)
            self.with_env("KAFKA_NODE_ID", "1")
            self.with_env("KAFKA_PROCESS_ROLES", "broker,controller")
            self.with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9094")
            self.with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            self.with_env("KAFKA_LISTENERS", f"{self.listeners},CONTROLLER://0.0.0.0:9094")
            self.with_env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", f"{self.security_protocol_map},CONTROLLER:PLAINTEXT")
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")

        def tc_start(self) -> None:
            host, port = self.get_container_host_ip(), self.get_exposed_port(self.port)
            script = (
                f"export KAFKA_ADVERTISED_LISTENERS={self.listener_name}://{host}:{port},"
                f"BROKER://$(hostname -i | cut -d' ' -f1):9092\n"
                "exec /etc/kafka/docker/run\n"
            )
            self.create_file(script.encode(), KafkaContainer.TC_START_SCRIPT)

    return ApacheKafkaContainer(KAFKA_IMAGE)


@pytest.fixture(scope="module", params=["embedded", "apache-kafka"])
def bootstrap(request):
    if request.param == "embedded":
        from processor.kafka.embedded import EmbeddedKafka

        broker = EmbeddedKafka().start()
        try:
            yield broker.bootstrap
        finally:
            broker.stop()
        return
    reason = docker_unreachable_reason()
    if reason:
        pytest.skip(reason)
    container = apache_kafka_container()
    container.start(timeout=120)
    try:
        yield container.get_bootstrap_server()
    finally:
        container.stop()


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"smoke-{uuid.uuid4().hex[:8]}", **CONSUMER_DEFAULTS}
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(min(500, expected - len(got)), timeout=1.0):
                if msg.error() is None:
                    got.append(msg)
    finally:
        consumer.close()
    return got


def test_ensure_topics_creates_each_topic_with_its_partitions_and_is_idempotent(bootstrap):
    suffix = uuid.uuid4().hex[:8]
    topics = {f"raw-{suffix}": 4, f"changes-{suffix}": 2, f"dlq-{suffix}": 1}
    ensure_topics(bootstrap, topics)
    ensure_topics(bootstrap, topics)  # a second call finds them and changes nothing
    for name, n in topics.items():
        assert partition_count(bootstrap, name) == n
        assert end_offsets(bootstrap, name) == {p: 0 for p in range(n)}


def test_produce_consume_roundtrip_keeps_each_key_on_one_partition(bootstrap):
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: 4})
    records = [(f"xid-{i % 50}".encode(), f"event-{i}".encode(), None) for i in range(1000)]
    producer = make_producer(bootstrap)
    assert produce_all(producer, topic, records) == 1000

    ends = end_offsets(bootstrap, topic)
    assert set(ends) == {0, 1, 2, 3} and sum(ends.values()) == 1000

    got = consume_all(bootstrap, topic, 1000)
    assert sorted(m.value() for m in got) == sorted(v for _, v, _ in records)
    partitions_of_key: dict[bytes, set[int]] = {}
    for m in got:
        partitions_of_key.setdefault(m.key(), set()).add(m.partition())
    assert all(len(ps) == 1 for ps in partitions_of_key.values()), "a key was spread over partitions"
    per_partition = {}
    for m in got:
        per_partition[m.partition()] = per_partition.get(m.partition(), 0) + 1
    assert per_partition == {p: n for p, n in ends.items() if n}
    # Within a key (one XID), consumption order is production order.
    for key in partitions_of_key:
        values = [int(m.value().split(b"-")[1]) for m in got if m.key() == key]
        assert values == sorted(values)


def test_docker_detection_explains_itself():
    reason = docker_unreachable_reason()
    assert reason is None or reason.startswith("no Docker engine reachable: ")
