"""An Apache Kafka broker with a SASL_SSL listener (SCRAM-SHA-512) and ACLs, for the security tests.

The test makes its own CA and broker certificate with openssl; the SCRAM credential is created by
Kafka's StorageTool at format time (--add-scram). The PLAINTEXT listener stays for the broker's
own traffic and for the test's admin, whose principal (User:ANONYMOUS) is a super user.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.embedded import EmbeddedKafka, Listener

USER = "txbuffer"
MECHANISM = "SCRAM-SHA-512"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@dataclass
class Tls:
    ca: Path
    broker_keystore: Path  # PEM: private key + certificate


def make_tls(directory: Path) -> Tls:
    """A throw-away CA and a broker certificate for 127.0.0.1 / localhost, signed by it."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=txbuffer-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost"
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "broker.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "broker.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    keystore = directory / "broker-keystore.pem"
    keystore.write_text((directory / "broker.key").read_text() + (directory / "broker.crt").read_text())
    return Tls(directory / "ca.pem", keystore)


def secure_broker(directory: Path, password: str) -> EmbeddedKafka:
    """An unstarted broker: PLAINTEXT (admin) + SASL_SSL (SCRAM-SHA-512) listeners, StandardAuthorizer."""
    tls = make_tls(directory / "tls")
    listener = Listener(
        name="SASL_SSL",
        protocol="SASL_SSL",
        config={
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.broker_keystore),
            "sasl.enabled.mechanisms": MECHANISM,
            f"{MECHANISM.lower()}.sasl.jaas.config": SCRAM_LOGIN,
        },
    )
    broker = EmbeddedKafka(
        listeners=[listener],
        extra_config={
            "sasl.enabled.mechanisms": MECHANISM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        },
        format_args=["--add-scram", f"{MECHANISM}=[name={USER},password={password}]"],
    )
    broker.tls = tls  # type: ignore[attr-defined]
    return broker


def client_properties(broker: EmbeddedKafka, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": USER,
        "sasl.password": password,
        "ssl.ca.location": str(broker.tls.ca),  # type: ignore[attr-defined]
    }


def secure_client(broker: EmbeddedKafka, password: str) -> KafkaClientConfig:
    return KafkaClientConfig(broker.listener("SASL_SSL").bootstrap, client_properties(broker, password))


def grant_documented_acls(broker: EmbeddedKafka, prefix: str = "txbuffer") -> None:
    """The ACLs docs/security.md lists for the processor, the sources and the tools, for User:txbuffer."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = KafkaClientConfig(broker.bootstrap).admin()
    principal = f"User:{USER}"

    def allow(kind: ResourceType, name: str, *operations: AclOperation) -> list[AclBinding]:
        return [
            AclBinding(kind, name, ResourcePatternType.PREFIXED, principal, "*", op, AclPermissionType.ALLOW)
            for op in operations
        ]

    bindings = [
        *allow(
            ResourceType.TOPIC,
            prefix + ".",
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.READ,
            AclOperation.WRITE,
        ),
        *allow(ResourceType.GROUP, prefix, AclOperation.READ, AclOperation.DESCRIBE),
        *allow(ResourceType.TRANSACTIONAL_ID, prefix, AclOperation.WRITE, AclOperation.DESCRIBE),
    ]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(30)
