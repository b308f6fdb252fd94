"""Types of the compiled codec (processor/core/_avro_fast.pyx)."""

from collections.abc import Callable, Iterable
from typing import Any

class Malformed(ValueError): ...

CHANGE_SIGNATURE: tuple[Any, ...]
RAW_BODY_SIGNATURE: tuple[Any, ...]

def utf8_valid_py(data: bytes) -> bool: ...

class Codec:
    name: str
    def __init__(
        self,
        name: str,
        schema: Any,
        fallback_encode: Callable[[Any], bytes],
        decode_error: type[Exception],
    ) -> None: ...
    def signature(self) -> Any: ...
    def decode(self, data: bytes) -> dict[str, Any]: ...
    def encode(self, record: Any) -> bytes: ...

class RawView:
    raw: bytes
    body_at: int
    xid: str
    op: str
    seq: int
    scn: int
    thread: int
    ts_ms: int
    undo: bool
    row_id: str | None
    subxid: str | None
    savepoint: str | None
    user: str | None
    client: str | None
    table: str | None
    lob_column: str | None
    lob_offset: int | None
    lob_length: int | None
    lob_data: str | bytes | None
    attrs: dict[str, str]
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    ddl: str | None
    def __getitem__(self, name: str) -> Any: ...
    def get(self, name: str, default: Any = None) -> Any: ...
    def __contains__(self, name: object) -> bool: ...
    def keys(self) -> tuple[str, ...]: ...
    def to_dict(self) -> dict[str, Any]: ...

class RawCodec(Codec):
    def view(self, data: bytes) -> RawView: ...
    def view_batch(self, values: Iterable[bytes | None]) -> list[RawView | Exception]: ...

def enable_change_writer(
    raw: Codec,
    change: Codec,
    envelope_op: dict[str, str],
    spliced_fallback: Callable[[dict[str, Any], bytes | memoryview, dict[str, Any]], bytes],
) -> None: ...

class ChangeWriter:
    xid: str
    commit_scn: int
    commit_ts_ms: int
    thread: int
    user: str | None
    def __init__(self, xid: str, commit_scn: int, commit_ts_ms: int, thread: int, user: str | None) -> None: ...
    def encode(
        self,
        op: str,
        seq: int,
        scn: int,
        ts_ms: int,
        table: str | None,
        row_id: str | None,
        attrs: dict[str, str],
        raw: bytes,
        body_at: int,
        total_order: int,
        collection_order: int,
    ) -> bytes: ...

def enable_change_key(fallback: Callable[[str | None, dict[str, Any] | None], bytes]) -> None: ...
def change_key(table: str | None, key: dict[str, Any] | None) -> bytes: ...

class Emission:
    engine: Any
    txn: Any
    stream: Any
    last_seq: int | None
    all_sent: bool
    end_sent: bool
    end_acked: bool
    changes_settled: bool
    def __init__(self, engine: Any, txn: Any, stream: ChangeStream | None = None) -> None: ...
    def settle(self) -> None: ...
    def transaction_bytes(self, status: str, ordering: str) -> bytes: ...

def settle_all(emissions: list[Any]) -> None: ...

class ChangeStream:
    writer: ChangeWriter
    produced: int
    tables: dict[str, int]
    def __init__(self, writer: ChangeWriter, produced: int, tables: dict[str, int]) -> None: ...
    def number(self, table: str | None) -> tuple[int, int]: ...
    sent: int
    last_seq: int | None
    def send_all(
        self,
        pairs: Iterable[tuple[bytes, Any]],
        send: Callable[[bytes, bytes | None, Any], None],
        failed: Any,
        tombstone_after: str | None,
        direct: Any = None,  # (call, a, b) or a ChangeSender capsule (contracts.Sink.direct_change_sender)
    ) -> None: ...
    def send_staged(
        self,
        staged: dict[bytes, Any],
        prefix: bytes,
        after_seq: int,
        send: Callable[[bytes, bytes | None, Any], None],
        failed: Any,
        tombstone_after: str | None,
        direct: Any = None,
    ) -> bool: ...
    def next(self, raw: bytes) -> tuple[bytes, bytes, int, str, str] | None: ...

def enable_lane(row_ops: Iterable[str], begin: str, commit: str, rollback: str) -> None: ...
def enable_txn_slots(cls: type) -> bool: ...
def enable_commit_slots(cls: type) -> bool: ...
def scan_both_ways(data: bytes, whole: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None: ...
def buffer_changes(
    engine: Any,
    records: Any,  # a list of records, or a run exporting raw record views (the native fetch's RecordRun)
    i: int,
    open_txns: dict[str, Any],
    put: Callable[[bytes, bytes], None],
    actions: list[Any],
) -> int: ...
def recording_change_sender(log: list[Any], refuse: Any) -> Any: ...
def partition_runs(records: list[Any]) -> tuple[dict[int, list[Any]], list[Any]]: ...
def change_key_of_avro_key(table: str | None, data: bytes) -> bytes | None: ...
def enable_transaction_writer(fallback: Callable[..., bytes]) -> None: ...
def transaction_bytes(
    status: str,
    xid: str,
    scn: int,
    ts_ms: int,
    thread: int,
    event_count: int | None,
    tables: dict[str, int] | None,
    partition: int | None,
    offset: int | None,
    ordering: str | None,
) -> bytes: ...
def staged_range(staged: dict[bytes, Any], begin: bytes, end: bytes) -> list[tuple[bytes, Any]]: ...

class SlottedInit:
    """cls(*args) for a dataclass(slots=True) with a generated __init__, built in C (construct.py)."""

    cls: type
    def __init__(self, cls: type) -> None: ...
    def __call__(self, *args: Any) -> Any: ...
