"""Two pipelines on one raw topic (own groups, own output topics, default outcomes topic) stay apart.

A pipeline writes the outcome of every transaction that emitted nothing (filtered, rolled back,
abandoned) and reads its outcomes back when it rebuilds its completed index on an empty disk. With
one default outcomes topic for every pipeline, a second pipeline took the first one's filtered
transaction as finished and dropped its events as late: it never emitted a transaction it should.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from processor.core import events as ev
from processor.kafka.rawtopic import RawTopicWriter
from processor.kafka.read import read_to_end

from .processor_kit import Topics, config, run_args

pytestmark = pytest.mark.integration


def _run(bootstrap: str, raw: str, tag: str, state_dir, *extra: str) -> None:
    topics = Topics(raw, f"changes-{tag}", f"transactions-{tag}", f"dlq-{tag}", f"group-{tag}")
    args = run_args(config(bootstrap, topics, state_dir), outcomes_topic=False)  # the default is under test
    done = subprocess.run([*args, "--available-now", *extra], capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


def _ended(bootstrap: str, tag: str) -> set[str]:
    records = [ev.decode_transaction(m.value()) for m in read_to_end(bootstrap, f"transactions-{tag}", "reader", 60)]
    return {r["id"] for r in records if r["status"] == "END"}


def test_a_second_pipeline_emits_what_the_first_one_filtered_out(broker, tmp_path):
    tag = uuid.uuid4().hex[:8]
    raw = f"raw-{tag}"
    writer = RawTopicWriter(broker.bootstrap, raw, 1)
    for xid, user, scn in (("keep", "app", 10), ("drop", "batch", 20)):
        row = {"table": "s.t", "key": {"ID": scn}, "after": {"ID": scn}}
        writer.write(ev.raw_event(xid, ev.BEGIN, 0, scn, user=user))
        writer.write(ev.raw_event(xid, ev.INSERT, 1, scn + 1, **row))
        writer.write(ev.raw_event(xid, ev.COMMIT, 2, scn + 2))
    writer.heartbeat(100)
    writer.flush()

    _run(broker.bootstrap, raw, f"a{tag}", tmp_path / "a", "--exclude-users", "batch")
    assert _ended(broker.bootstrap, f"a{tag}") == {"keep"}  # "drop" was filtered: an outcome, no END

    # The second pipeline starts on an empty disk, so it rebuilds its completed index.
    _run(broker.bootstrap, raw, f"b{tag}", tmp_path / "b")
    assert _ended(broker.bootstrap, f"b{tag}") == {"keep", "drop"}
