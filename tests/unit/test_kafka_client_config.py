"""processor/kafka/client_config.py and dlq.py: pass-through properties, redaction, Java names, DLQ headers."""

from __future__ import annotations

import pytest

from processor.kafka.client_config import (
    KafkaClientConfig,
    env_properties,
    parse_pairs,
    read_properties_file,
    redact,
)
from processor.kafka.dlq import dlq_headers, read_dlq_headers

SECURE = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": 'p"w\\1',
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def test_every_client_gets_the_bootstrap_and_the_properties_with_call_overrides_last():
    client = KafkaClientConfig("b:9093", {"security.protocol": "SSL", "linger.ms": "50"})
    consumer = client.consumer_conf("g", **{"fetch.max.bytes": 1})
    producer = client.producer_conf(acks="all")
    assert consumer["bootstrap.servers"] == producer["bootstrap.servers"] == "b:9093"
    assert consumer["security.protocol"] == producer["security.protocol"] == "SSL"
    assert (consumer["group.id"], consumer["fetch.max.bytes"], consumer["enable.auto.commit"]) == ("g", 1, False)
    assert (producer["linger.ms"], producer["acks"], producer["partitioner"]) == ("50", "all", "murmur2_random")


def test_secrets_are_masked_in_repr_and_redacted_views():
    client = KafkaClientConfig("b:1", {**SECURE, "ssl.key.password": "k", "sasl.oauthbearer.client.secret": "s"})
    shown = client.redacted()
    assert shown["sasl.password"] == shown["ssl.key.password"] == shown["sasl.oauthbearer.client.secret"] == "***"
    assert shown["sasl.username"] == "app" and shown["security.protocol"] == "SASL_SSL"
    assert 'p"w' not in repr(client) and "***" in repr(client)
    assert redact({"sasl.jaas.config": "x", "on_commit": print}) == {"sasl.jaas.config": "***"}


def test_bootstrap_servers_is_not_a_property():
    with pytest.raises(ValueError, match="bootstrap"):
        KafkaClientConfig("a:1", {"bootstrap.servers": "b:2"})


def test_environment_names_map_to_dotted_properties():
    env = {"TXBUFFER_KAFKA_SECURITY_PROTOCOL": "SSL", "TXBUFFER_KAFKA_SSL_CA_LOCATION": "/ca", "TXBUFFER_GROUP": "g"}
    assert env_properties(env) == {"security.protocol": "SSL", "ssl.ca.location": "/ca"}


def test_properties_file_and_flag_pairs(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("# a comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.mechanism : SCRAM-SHA-512\n\nx.y=a=b\n")
    assert read_properties_file(f) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "x.y": "a=b"}
    (tmp_path / "bad.properties").write_text("no separator here\n")
    with pytest.raises(ValueError, match=r"bad.properties:1"):
        read_properties_file(tmp_path / "bad.properties")
    with pytest.raises(FileNotFoundError):
        read_properties_file(tmp_path / "absent.properties")
    assert parse_pairs(["a=1", "b = x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(ValueError, match="PROPERTY=VALUE"):
        parse_pairs(["sasl.password"])


def test_java_properties_for_spark_translate_scram_and_pem_trust():
    java = KafkaClientConfig("b:9093", SECURE).java_properties()
    assert java["sasl.mechanism"] == "SCRAM-SHA-512" and java["security.protocol"] == "SASL_SSL"
    assert java["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="p\\"w\\\\1";'
    )
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/etc/kafka/ca.pem")
    assert not {"sasl.username", "sasl.password", "ssl.ca.location"} & set(java)
    options = KafkaClientConfig("b:9093", SECURE).spark_options()
    assert options["kafka.bootstrap.servers"] == "b:9093" and "kafka.sasl.jaas.config" in options


def test_python_source_options_round_trip():
    client = KafkaClientConfig("b:9093", SECURE)
    options = {**client.options(), "subscribe": "t"}
    assert options["kafka.sasl.password"] == SECURE["sasl.password"]
    back = KafkaClientConfig.from_options(options)
    assert (back.bootstrap, dict(back.properties)) == ("b:9093", SECURE)
    with pytest.raises(ValueError, match=r"kafka\.bootstrap\.servers"):
        KafkaClientConfig.from_options({"subscribe": "t"})


def test_java_keystore_inlines_pem_files(tmp_path):
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    conf = {"ssl.certificate.location": str(tmp_path / "c.pem"), "ssl.key.location": str(tmp_path / "k.pem")}
    java = KafkaClientConfig("b:1", conf).java_properties()
    assert (java["ssl.keystore.type"], java["ssl.keystore.certificate.chain"], java["ssl.keystore.key"]) == (
        "PEM",
        "CERT",
        "KEY",
    )


def test_dead_letter_headers_have_one_documented_order_and_skip_unknowns():
    headers = dlq_headers("bad", "raw", xid="t1", offset=7, partition=2, line=None)
    assert [k for k, _ in headers] == ["reason", "source", "partition", "offset", "xid"]
    assert read_dlq_headers([*headers, ("junk", b"x")]) == {
        "reason": "bad",
        "source": "raw",
        "partition": "2",
        "offset": "7",
        "xid": "t1",
    }
    with pytest.raises(ValueError, match="unknown dead-letter headers"):
        dlq_headers("bad", "raw", topic="x")
    assert len(dict(dlq_headers("r" * 10_000, "raw"))["reason"]) == 2000
