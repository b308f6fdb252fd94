"""Helpers for processor integration tests: per-test topics, workloads, runs as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from processor.kafka.client_config import KafkaClientConfig
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


def feed(writer: RawTopicWriter, events: Iterator[dict], n: int | None = None) -> None:
    """The next n events of a workload iterator (all that are left: None) onto the raw topic, then flush.
    Pass an iterator (iter(WorkloadGenerator(...))), not the generator: each call goes on where the last
    one stopped."""
    writer.write_all(events if n is None else islice(events, n))
    writer.flush()


def run_args(cfg: ProcessorConfig, outcomes_topic: bool = True) -> list[str]:
    """`txbuffer run` for cfg; outcomes_topic=False leaves --outcomes-topic out, so the processor's
    default applies."""
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
        *(["--outcomes-topic", cfg.outcomes_topic] if outcomes_topic else []),
        "--state-dir",
        str(cfg.state_dir),
        "--guarantee",
        cfg.guarantee,
        *(["--transactional-id", cfg.transactional_id] if cfg.transactional_id else []),
    ]


def start_processor(cfg: ProcessorConfig, *extra: str, log_path: Path | None = None) -> subprocess.Popen:
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    return subprocess.Popen(run_args(cfg) + list(extra), stdout=out, stderr=out, env=dict(os.environ))


def committed_offsets(
    bootstrap: str, topics: Topics, partitions: Iterable[int], timeout_s: float = 10
) -> dict[int, int]:
    """The group's committed offset on each of these raw topic partitions (OFFSET_INVALID: none yet), asked
    without joining the group."""
    from confluent_kafka import TopicPartition

    consumer = KafkaClientConfig(bootstrap).consumer(topics.group)
    try:
        tps = [TopicPartition(topics.raw, p) for p in partitions]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=timeout_s)}
    finally:
        consumer.close()


def log_events(path: Path, event: str) -> list[dict]:
    """The records of a processor's JSON log (--log-format json) whose line names `event`, in order.
    A last line with no newline yet is still being written: it is left for the next read."""
    lines = path.read_text(errors="replace").split("\n")[:-1]
    return [json.loads(line) for line in lines if line.startswith("{") and f'"{event}"' in line]


def read_with_headers(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[tuple[int, int, bytes, bytes, dict]]:
    """(partition, offset, key, value, headers) of every record, read to the end (transaction markers
    included: completion is judged by the consumer's position)."""
    from processor.kafka.read import read_to_end

    out = [
        (msg.partition(), msg.offset(), msg.key(), msg.value(), dict(msg.headers() or []))
        for msg in read_to_end(bootstrap, topic, "kit-reader", timeout_s)
    ]
    return sorted(out, key=lambda r: (r[0], r[1]))
