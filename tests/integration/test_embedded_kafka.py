"""The embedded Apache Kafka broker (processor/kafka/embedded.py), against real clients, no mocks.

The module starts its own broker: these tests restart and kill it, which must not disturb the
session broker other modules share.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import psutil
import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from processor.kafka.embedded import KAFKA_VERSION, EmbeddedKafka, Listener

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka():
    with EmbeddedKafka() as broker:
        yield broker


def _topic(kafka: EmbeddedKafka, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0


def _read(
    bootstrap: str,
    topic: str,
    until: int,
    isolation: str = "read_committed",
    partition: int = 0,
    timeout_s: float = 30.0,
) -> list[bytes]:
    """Values of `topic`[partition] from its start until the record before offset `until`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    values, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            values.append(msg.value())
            if msg.offset() >= until - 1:
                return values
    finally:
        consumer.close()
    raise AssertionError(f"read {values} from {topic} before timing out short of offset {until}")


def _offsets(
    kafka: EmbeddedKafka,
    tp: TopicPartition,
    spec: OffsetSpec,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> int:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    return admin.list_offsets({tp: spec}, isolation_level=isolation)[tp].result(30).offset


def test_broker_reports_apache_kafka_4_1_1(kafka):
    assert kafka.version == KAFKA_VERSION == "4.1.1"
    brokers = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", kafka.port)]


def test_created_topic_round_trips_records(kafka):
    topic = _topic(kafka, partitions=3)
    values = [f"v{i}".encode() for i in range(20)]
    _produce(kafka.bootstrap, topic, values, partition=2)
    assert _read(kafka.bootstrap, topic, until=20, partition=2) == values


def test_read_committed_sees_committed_and_never_aborted_transactions(kafka):
    topic = _topic(kafka)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for values, commit in (([b"c1", b"c2", b"c3"], True), ([b"a1", b"a2"], False), ([b"c4"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # 3 records + marker, 2 aborted + marker, 1 record + marker: the log ends at offset 9.
    assert _read(kafka.bootstrap, topic, until=8) == [b"c1", b"c2", b"c3", b"c4"]
    assert _read(kafka.bootstrap, topic, until=8, isolation="read_uncommitted") == [
        b"c1",
        b"c2",
        b"c3",
        b"a1",
        b"a2",
        b"c4",
    ]
    assert _offsets(kafka, TopicPartition(topic, 0), OffsetSpec.latest()) == 9


def test_list_offsets_ends_at_high_watermark_and_at_last_stable_offset_under_open_txn(kafka):
    topic = _topic(kafka)
    tp = TopicPartition(topic, 0)
    _produce(kafka.bootstrap, topic, [b"x"] * 5)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.flush(30)
    assert _offsets(kafka, tp, OffsetSpec.latest()) == 6
    assert _offsets(kafka, tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED) == 5
    producer.commit_transaction(30)
    # commit_transaction returns once the coordinator logged the commit; it writes the marker into the
    # partition after that, so the last stable offset moves a moment later (seen under load: still 5).
    deadline, stable = time.monotonic() + 10, None
    while stable != 7 and time.monotonic() < deadline:
        stable = _offsets(kafka, tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
        if stable != 7:
            time.sleep(0.05)
    assert stable == 7
    assert _offsets(kafka, tp, OffsetSpec.earliest()) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "watermarks"})
    try:
        assert consumer.get_watermark_offsets(tp, timeout=10) == (0, 7)
    finally:
        consumer.close()


def test_delete_records_moves_log_start_offset(kafka):
    topic = _topic(kafka)
    tp = TopicPartition(topic, 0)
    _produce(kafka.bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 6)])
    assert deleted[TopicPartition(topic, 0, 6)].result(30).low_watermark == 6
    assert _offsets(kafka, tp, OffsetSpec.earliest()) == 6
    assert _offsets(kafka, tp, OffsetSpec.latest()) == 10
    assert _read(kafka.bootstrap, topic, until=10) == [b"v6", b"v7", b"v8", b"v9"]


def test_paused_broker_hangs_clients_until_resumed(kafka):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.list_topics(timeout=10)
    kafka.pause()
    try:
        # pause() returns only once every JVM thread is stopped, so no answer can race it
        assert psutil.Process(kafka.process.pid).status() == psutil.STATUS_STOPPED
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=1)
    finally:
        kafka.resume()
    assert admin.list_topics(timeout=10).brokers


def test_restart_on_same_data_dir_keeps_topics_and_records(kafka):
    topic = _topic(kafka, partitions=2)
    _produce(kafka.bootstrap, topic, [b"before-1", b"before-2"], partition=1)
    bootstrap, data_dir = kafka.bootstrap, kafka.data_dir
    kafka.restart()
    assert (kafka.bootstrap, kafka.data_dir, kafka.version) == (bootstrap, data_dir, KAFKA_VERSION)
    metadata = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics[topic].partitions) == 2
    _produce(kafka.bootstrap, topic, [b"after"], partition=1)
    assert _read(kafka.bootstrap, topic, until=3, partition=1) == [b"before-1", b"before-2", b"after"]


def test_killed_broker_restarts_with_acknowledged_records(kafka):
    topic = _topic(kafka)
    _produce(kafka.bootstrap, topic, [b"acked-1", b"acked-2"])
    pid = kafka.process.pid
    kafka.kill()
    assert kafka.process.returncode == -9 and not psutil.pid_exists(pid)
    kafka.restart()
    assert kafka.process.pid != pid
    _produce(kafka.bootstrap, topic, [b"after"])
    assert _read(kafka.bootstrap, topic, until=3) == [b"acked-1", b"acked-2", b"after"]


def test_extra_listener_serves_clients_and_stop_leaves_no_jvm():
    extra = Listener("EXTERNAL")
    broker = EmbeddedKafka(listeners=[extra], extra_config={"log.retention.ms": "3600000"})
    with broker:
        data_dir, pid = broker.data_dir, broker.process.pid
        admin = AdminClient({"bootstrap.servers": extra.bootstrap})
        assert extra.port not in (broker.port, broker.controller_port)
        assert admin.list_topics(timeout=10).brokers
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["log.retention.ms"].value == "3600000"
        del admin
    assert broker.process.returncode is not None
    assert not psutil.pid_exists(pid)
    assert not any(str(data_dir) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
    assert not data_dir.exists()


def test_broker_jvm_dies_with_a_sigkilled_parent(tmp_path):
    """The atexit hook cannot run on SIGKILL; the parent-death signal must stop the JVM instead."""
    script = (
        "import sys, time\n"
        "from processor.kafka.embedded import EmbeddedKafka\n"
        f"b = EmbeddedKafka(data_dir={str(tmp_path / 'kafka')!r}).start()\n"
        "print('JVM_PID', b.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = b""
        while not line.startswith(b"JVM_PID "):  # structlog writes to stdout too
            line = parent.stdout.readline()
            assert line, "the parent exited before starting the broker"
        jvm_pid = int(line.split()[1])
        assert psutil.pid_exists(jvm_pid)
    finally:
        parent.kill()
        parent.wait(10)
    jvm = psutil.Process(jvm_pid) if psutil.pid_exists(jvm_pid) else None
    if jvm is not None:
        try:
            jvm.wait(30)
        except psutil.TimeoutExpired:
            jvm.kill()
            pytest.fail("the broker JVM outlived its SIGKILLed parent by 30 s")
    assert not psutil.pid_exists(jvm_pid) or psutil.Process(jvm_pid).status() == psutil.STATUS_ZOMBIE
