"""The suite's broker is Apache Kafka, as the broker itself says over the wire.

The version comes from the broker's DescribeFeatures answer (metadata.version, finalized by the
KRaft controller), read with Kafka's own FeatureCommand, not from a config string of ours.
"""

from __future__ import annotations

import re
import subprocess

from processor.kafka import jars
from processor.kafka.embedded import KAFKA_VERSION


def test_the_suite_runs_on_apache_kafka(broker):
    libs = jars.ensure_bundle("kafka", KAFKA_VERSION, jars.bundle_pom("kafka"))
    out = subprocess.run(
        [
            jars.java_binary(),
            "-cp",
            jars.classpath(libs),
            "org.apache.kafka.tools.FeatureCommand",
            "--bootstrap-server",
            broker.bootstrap,
            "describe",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # e.g. "Feature: metadata.version  SupportedMinVersion: 3.3-IV3  SupportedMaxVersion: 4.1-IV1  FinalizedVersionLevel: 4.1-IV1"
    line = next(line for line in out.stdout.splitlines() if "metadata.version" in line)
    finalized = re.search(r"FinalizedVersionLevel:\s*(\d+\.\d+)", line)
    assert finalized, line
    assert finalized.group(1) == ".".join(KAFKA_VERSION.split(".")[:2]), line
    if broker.embedded is not None:
        # The broker process's own AppInfoParser line agrees with the pinned jars.
        assert broker.embedded.version == KAFKA_VERSION
