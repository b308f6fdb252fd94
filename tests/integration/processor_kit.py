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
    """(partition, offset, key, value, headers) of every record, read to the end (transaction markers
    included: completion is judged by the consumer's position)."""
    from processor.kafka.read import read_to_end

    out = [
        (msg.partition(), msg.offset(), msg.key(), msg.value(), dict(msg.headers() or []))
        for msg in read_to_end(bootstrap, topic, "kit-reader", timeout_s)
    ]
    return sorted(out, key=lambda r: (r[0], r[1]))
