"""A full state disk: the processor stops with a clear error and exit code 4, commits no input offset
past what its store holds, and after space is freed a restart resumes with nothing lost.

The state dir sits on a size-limited tmpfs the test mounts itself (the suite runs as root); a
filler file leaves the store a few hundred KB, which the workload's second half overruns.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from processor.cli.options import EXIT_STATE_STORE
from processor.core import events as ev
from processor.core import keys
from processor.kafka.client_config import KafkaClientConfig
from processor.kafka.end_offsets import end_offsets
from processor.kafka.rawtopic import RawTopicWriter
from processor.runtime.status import ReadOnlyRocksStore
from processor.store.rocks import free_bytes
from processor.testing.generator import WorkloadGenerator
from processor.testing.verify import verify
from tests.integration.processor_kit import Topics, config, run_args

pytestmark = pytest.mark.integration

FS_MB = 16
LEFT_FREE = 384 << 10  # what the filler leaves: ~2k raw events of WAL


@pytest.fixture
def small_fs(tmp_path):
    """A FS_MB tmpfs mounted at tmp_path/fs, unmounted afterwards."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _write(bootstrap: str, topic: str, events) -> None:
    writer = RawTopicWriter(bootstrap, topic, partitions=4)
    for event in events:
        if event["op"] == ev.HEARTBEAT:
            writer.heartbeat(event["scn"], ts_ms=event["ts_ms"])
        else:
            writer.write(event)
    writer.flush()


def _run(cfg, log: Path, timeout: float = 180) -> int:
    with open(log, "ab") as out:
        return subprocess.run(run_args(cfg) + ["--available-now"], stdout=out, stderr=out, timeout=timeout).returncode


def _committed(bootstrap: str, topics: Topics) -> dict[int, int]:
    consumer = KafkaClientConfig(bootstrap).consumer(topics.group)  # committed() asks for its own group; it never joins
    try:
        got = consumer.committed([TopicPartition(topics.raw, p) for p in range(4)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def _stored_positions(store_dir: Path) -> dict[int, int]:
    store = ReadOnlyRocksStore(store_dir)
    try:
        return {
            int.from_bytes(key[1:5], "big"): json.loads(raw)["next_offset"] for key, raw in store.scan_prefix(keys.POS)
        }
    finally:
        store.close()


def test_full_state_disk_stops_with_exit_4_commits_nothing_unstored_and_resumes(broker, small_fs, tmp_path):
    topics = Topics.fresh()
    state = small_fs / "state"
    cfg = config(broker.bootstrap, topics, state)
    log = tmp_path / "processor.log"
    expected = tmp_path / "expected"
    events = iter(WorkloadGenerator(30_000, seed=5, expected_dir=expected, open_txns=50))

    # 1. A first part with room to spare: processed, committed, stored.
    _write(broker.bootstrap, topics.raw, itertools.islice(events, 5_000))
    assert _run(cfg, log) == 0, log.read_text()[-3000:]
    before = _committed(broker.bootstrap, topics)
    assert before, "the first run committed nothing"

    # 2. The disk fills up while the rest streams in.
    filler = small_fs / "filler"
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free_bytes(small_fs) - LEFT_FREE))
    _write(broker.bootstrap, topics.raw, events)  # the generator finishes its expected files here
    code = _run(cfg, log)
    text = log.read_text()
    assert code == EXIT_STATE_STORE, text[-3000:]
    failure = [json.loads(line) for line in text.splitlines() if '"state_store.write_failed"' in line]
    assert failure and failure[0]["no_space"] is True, text[-3000:]
    assert "disk full" in failure[0]["error"] and "No space left on device" in failure[0]["error"]

    # 3. Nothing committed past what the store holds (a restart on this store resumes from it).
    stored = _stored_positions(state / "store")
    after = _committed(broker.bootstrap, topics)
    for p, offset in after.items():
        assert offset <= stored.get(p, 0), f"partition {p}: committed {offset} > stored next_offset {stored}"
    assert any(after[p] < end for p, end in end_offsets(broker.bootstrap, topics.raw).items()), "nothing was left to do"

    # 4. Space is back: the same command resumes and the output is exact after dedup.
    filler.unlink()
    assert _run(cfg, log) == 0, log.read_text()[-3000:]
    rep = verify(broker.bootstrap, expected, topics.changes, topics.transactions)
    assert rep.ok, rep.summary()
    assert rep.expected > 5_000
