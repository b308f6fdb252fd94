"""The completed-index rebuild reads every record of the transactions topic; only ENDs prove a
commit, so the others are skipped by their first byte (the status enum) without an Avro decode."""

from __future__ import annotations

from processor.core import codec
from processor.core import events as ev
from processor.core.assemble import transaction_event
from processor.core.txn import Commit, Txn
from processor.runtime import index_rebuild


def record(status: str, xid: str, partition: int, offset: int) -> bytes:
    txn = Txn(partition, xid, offset - 2, commit=Commit(7, 1_700_000_000_000, 1, offset))
    return ev.encode_transaction(transaction_event(status, txn, "partition", 1, {"s.t": 1}))


def test_only_ends_are_decoded_and_noted(monkeypatch):
    topics = {
        "transactions": [
            record("BEGIN", "a", 0, 5),
            record("END", "a", 0, 5),
            record("RESYNC_REQUIRED", "r", 1, 9),
            record("BEGIN", "b", 1, 12),
            record("END", "b", 1, 12),
            b"\x02not avro",  # an END's first byte, then garbage: skipped as undecodable
        ],
        "outcomes": [ev.encode_outcome({"xid": "c", "input_partition": 0, "offset": 20, "outcome": "rolled_back"})],
    }
    monkeypatch.setattr(index_rebuild, "_read_all", lambda _client, topic: iter(topics[topic]))
    decoded = []
    decode = codec.decode_transaction  # the compiled decoder (fastavro when not built)
    monkeypatch.setattr(codec, "decode_transaction", lambda value: decoded.append(value) or decode(value))
    noted = []
    read = index_rebuild._read_finished("b:9092", "transactions", "outcomes", lambda *a: noted.append(a))
    assert read == 7
    assert noted == [(0, "a", 5, "committed"), (1, "b", 12, "committed"), (0, "c", 20, "rolled_back")]
    assert len(decoded) == 3  # the two ENDs and the garbage: no BEGIN, no RESYNC_REQUIRED


def test_the_end_byte_follows_the_schema():
    symbols = ev.transaction_schema()["fields"][0]["type"]["symbols"]
    assert bytes([2 * symbols.index("END")]) == index_rebuild._END_STATUS  # zigzag varint
    assert record("END", "x", 0, 1)[:1] == index_rebuild._END_STATUS  # as the encoder writes it
