"""Drive a PartitionEngine and the Emitter in memory: the same dispatch path the runner uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from processor.core import events as ev
from processor.core.engine import Committed, DeadLetter, Filters, PartitionEngine
from processor.core.store import Store
from processor.runtime.emitter import Emitter
from processor.store.memory import MemoryStore
from processor.store.rocks import RocksStore
from processor.testing.memsink import MemorySink


def make_store(kind: str, tmp_path) -> Store:
    return MemoryStore() if kind == "memory" else RocksStore(tmp_path / "store")


class Record:
    """What a consumer hands the engine: offset(), key(), value()."""

    def __init__(self, offset: int, key: bytes | None, value: bytes | None):
        self._offset, self._key, self._value = offset, key, value

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


@dataclass
class Run:
    engine: PartitionEngine
    sink: MemorySink
    emitter: Emitter
    dead: list = field(default_factory=list)
    offset: int = 0

    def feed(self, *events_: dict | bytes) -> None:
        committed = []
        for e in events_:
            value = e if isinstance(e, bytes) else ev.encode_raw(e)
            key = None if isinstance(e, bytes) else e["xid"].encode()
            for action in self.engine.apply(self.offset, key, value):
                if isinstance(action, Committed):
                    committed.append(action.txn)
                elif isinstance(action, DeadLetter):
                    self.dead.append(action)
            self.offset += 1
        self.engine.flush_data()
        for txn in committed:
            self.emitter.release(self.engine, txn)
        self.emitter.advance()
        self.engine.checkpoint()

    @property
    def changes(self) -> list[dict]:
        return self.sink.change_events()

    @property
    def transactions(self) -> list[dict]:
        return self.sink.transaction_events()

    def ids(self) -> list[str]:
        return [c["event_id"] for c in self.changes]


def new_run(store: Store, filters: Filters = Filters(), partition: int = 0) -> Run:
    sink = MemorySink()
    return Run(PartitionEngine(partition, store, filters), sink, Emitter(sink))


def R(xid: str, op: str, seq: int, scn: int | None = None, **fields) -> dict:
    return ev.raw_event(xid, op, seq, scn if scn is not None else seq, **fields)


def ins(xid: str, seq: int, pk: int, table: str = "s.t", **fields) -> dict:
    after = fields.pop("after", {"id": pk, "v": f"{xid}-{seq}"})
    return R(xid, ev.INSERT, seq, table=table, key={"id": pk}, after=after, **fields)


def upd(xid: str, seq: int, pk: int, table: str = "s.t", **fields) -> dict:
    after = fields.pop("after", {"id": pk, "v": f"{xid}-{seq}"})
    return R(xid, ev.UPDATE, seq, table=table, key={"id": pk}, before={"id": pk}, after=after, **fields)


def dele(xid: str, seq: int, pk: int, table: str = "s.t", **fields) -> dict:
    return R(xid, ev.DELETE, seq, table=table, key={"id": pk}, before={"id": pk}, **fields)
