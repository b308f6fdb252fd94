"""Helpers for processor integration tests: per-test topics, workloads, runs as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from processor.kafka.rawtopic import RawTopicWriter
from processor.runtime.config import ProcessorConfig, load_config
from processor.testing.generator import WorkloadGenerator


@dataclass
class Topics:
    raw: str
    changes: str
    transactions: str
    dlq: str
    group: str

    @classmethod
    def fresh(cls) -> Topics:
        tag = uuid.uuid4().hex[:8]
        return cls(f"raw-{tag}", f"changes-{tag}", f"transactions-{tag}", f"dlq-{tag}", f"group-{tag}")


def config(bootstrap: str, topics: Topics, state_dir: Path, **overrides) -> ProcessorConfig:
    return load_config(
        env={},
        overrides={
            "bootstrap": bootstrap,
            "raw_topic": topics.raw,
            "changes_topic": topics.changes,
            "transactions_topic": topics.transactions,
            "dlq_topic": topics.dlq,
            "group": topics.group,
            "outcomes_topic": topics.raw.replace("raw-", "outcomes-", 1),
            "state_dir": state_dir,
            **overrides,
        },
    )


def write_workload(
    bootstrap: str, topic: str, expected_dir: Path, events: int, seed: int = 7, partitions: int = 4, **params
) -> dict:
    workload = WorkloadGenerator(events, seed=seed, expected_dir=expected_dir, **params)
    writer = RawTopicWriter(bootstrap, topic, partitions)
    writer.write_all(workload)
    writer.flush()
    return workload.summary()


def run_args(cfg: ProcessorConfig) -> list[str]:
    return [
        sys.executable,
        "-m",
        "processor.cli",
        "--log-format",
        "json",
        "run",
        "--bootstrap",
        cfg.bootstrap,
        "--raw-topic",
        cfg.raw_topic,
        "--changes-topic",
        cfg.changes_topic,
        "--transactions-topic",
        cfg.transactions_topic,
        "--dlq-topic",
        cfg.dlq_topic,
        "--group",
        cfg.group,
        "--outcomes-topic",
        cfg.outcomes_topic,
        "--state-dir",
        str(cfg.state_dir),
        "--guarantee",
        cfg.guarantee,
        *(["--transactional-id", cfg.transactional_id] if cfg.transactional_id else []),
    ]


def start_processor(cfg: ProcessorConfig, *extra: str, log_path: Path | None = None) -> subprocess.Popen:
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    return subprocess.Popen(run_args(cfg) + list(extra), stdout=out, stderr=out, env=dict(os.environ))


def read_with_headers(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[tuple[int, int, bytes, bytes, dict]]:
    """(partition, offset, key, value, headers) of every record, read to the true end."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from processor.kafka.clients import CONSUMER_DEFAULTS, end_offsets

    ends = {p: e for p, e in end_offsets(bootstrap, topic).items() if e > 0}
    out = []
    if not ends:
        return out
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kit-reader", **CONSUMER_DEFAULTS})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() or msg.partition() not in ends:
                    continue
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), dict(msg.headers() or [])))
                if msg.offset() + 1 >= ends[msg.partition()]:
                    del ends[msg.partition()]
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r[0], r[1]))
