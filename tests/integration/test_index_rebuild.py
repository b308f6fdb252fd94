"""The completed-index rebuild (processor/runtime/index_rebuild.py) on Apache Kafka, next to an open
Kafka transaction: it says it waits, and it finishes once the transaction is resolved."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from structlog.testing import capture_logs

from processor.core import events as ev
from processor.kafka.admin import ensure_topics
from processor.kafka.client_config import KafkaClientConfig
from processor.runtime.index_rebuild import completed_from_records

pytestmark = pytest.mark.integration


def _end(xid: str, offset: int) -> bytes:
    return ev.encode_transaction(
        {
            "status": "END",
            "id": xid,
            "commit_scn": offset,
            "ts_ms": 0,
            "thread": 1,
            "event_count": 1,
            "data_collections": [{"name": "s.t", "event_count": 1}],
            "input_partition": 0,
            "commit_offset": offset,
            "ordering": "partition",
            "reason": None,
        }
    )


def test_rebuild_next_to_an_open_transaction_logs_the_wait_and_finishes_once_it_is_aborted(broker):
    client = KafkaClientConfig(broker.bootstrap)
    tag = uuid.uuid4().hex[:8]
    transactions, outcomes = f"transactions-{tag}", f"outcomes-{tag}"
    ensure_topics(client, {transactions: 1, outcomes: 1})
    committed = client.producer(**{"transactional.id": f"rebuild-{tag}-a"})
    committed.init_transactions(30)
    committed.begin_transaction()
    committed.produce(transactions, _end("done", 5), b"done")
    committed.commit_transaction(30)
    # A second instance's batch, left open: its END sits above the last stable offset.
    open_txn = client.producer(**{"transactional.id": f"rebuild-{tag}-b"})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce(transactions, _end("in-flight", 9), b"in-flight")
    assert open_txn.flush(30) == 0

    abort_started: list[float] = []

    def abort_later() -> None:
        time.sleep(3)
        abort_started.append(time.monotonic())
        open_txn.abort_transaction(30)

    aborter = threading.Thread(target=abort_later)
    aborter.start()
    with capture_logs() as logs:
        found = completed_from_records(client, transactions, outcomes, {0: 0})
    finished = time.monotonic()
    aborter.join()

    assert found == {0: [("done", 5, "committed")]}  # the aborted END is not read
    assert abort_started and finished > abort_started[0]  # read_committed waited for the abort
    waits = [e for e in logs if e["event"] == "index.rebuild_waits"]
    assert [(w["topic"], w["partitions"]) for w in waits] == [(transactions, {0: {"stable": 2, "end": 3}})]
    assert any(e["event"] == "index.rebuilt" for e in logs)


def test_rebuild_makes_one_admin_client_for_both_topics(broker, monkeypatch):
    """Each AdminClient costs a connection and a metadata round trip (~50 ms): the rebuild's look-ups
    share one, so a processor taking partitions over from empty outputs starts at once."""
    import processor.kafka.admin as admin_module

    client = KafkaClientConfig(broker.bootstrap)
    tag = uuid.uuid4().hex[:8]
    transactions, outcomes, absent = f"transactions-{tag}", f"outcomes-{tag}", f"absent-{tag}"
    ensure_topics(client, {transactions: 2, outcomes: 2})
    producer = client.producer()
    producer.produce(transactions, _end("done", 5), b"done", partition=1)
    assert producer.flush(30) == 0

    made = []
    original = admin_module.Admin.__init__

    def counting(self, target):
        made.append(target)
        original(self, target)

    monkeypatch.setattr(admin_module.Admin, "__init__", counting)
    assert completed_from_records(client, transactions, outcomes, {0: 0}) == {0: [("done", 5, "committed")]}
    assert len(made) == 1
    made.clear()
    assert completed_from_records(client, transactions, absent, {0: 0}) == {0: [("done", 5, "committed")]}
    assert len(made) == 1  # an absent outcomes topic reads as empty, with the same client
