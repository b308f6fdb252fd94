"""`txbuffer status`: the processor's figures, from a running instance or from a state dir at rest.

Two sources, one report:
- a metrics URL: the Prometheus text a running processor serves (processor/metrics.py);
- a state dir: the RocksDB store opened read-only (no lock, so it works while a processor runs),
  each partition loaded with PartitionEngine.restore, as a restart would see it. A partition whose
  store was written past its last checkpoint (the AHEAD mark: engine.flush_data) is shown from that
  checkpoint with phase "written-ahead" and named in the totals: a processor that is not running
  would rebuild it from the committed offset (runtime.partitions.restore_partition), while a running
  one clears the mark at its next checkpoint.
"""

from __future__ import annotations

import struct
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from processor.core import keys
from processor.core.engine import PartitionEngine
from processor.core.store import Batch
from processor.store.rocks import RocksStore


class StatusError(RuntimeError):
    """The source cannot be read: unreachable URL, missing or unreadable state dir."""


@dataclass
class PartitionStatus:
    partition: int
    phase: str | None = None
    lag: int | None = None
    open_txns: int = 0
    pending_txns: int = 0
    oldest_open_age_s: float | None = None
    oldest_open_events: int = 0
    oldest_open_first_offset: int | None = None
    buffered_events: int = 0
    buffered_bytes: int = 0
    low_watermark: int | None = None
    next_offset: int | None = None
    watermark: int | None = None
    # State dir only: a restart re-reads from here to rebuild transactions that were staged in memory
    # (begun less than the staging bounds before the last checkpoint); the counts above omit them.
    reread_from: int | None = None


@dataclass
class Status:
    source: str
    partitions: list[PartitionStatus] = field(default_factory=list)
    totals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"source": self.source, "partitions": [asdict(p) for p in self.partitions], "totals": self.totals}


# --------------------------------------------------------------------------- metrics URL

_GAUGES = {  # metric family -> PartitionStatus field
    "txbuffer_consumer_lag": "lag",
    "txbuffer_open_transactions": "open_txns",
    "txbuffer_pending_transactions": "pending_txns",
    "txbuffer_oldest_open_transaction_age_seconds": "oldest_open_age_s",
    "txbuffer_oldest_open_transaction_events": "oldest_open_events",
    "txbuffer_oldest_open_transaction_first_offset": "oldest_open_first_offset",
    "txbuffer_buffered_events": "buffered_events",
    "txbuffer_buffered_bytes": "buffered_bytes",
    "txbuffer_low_watermark_offset": "low_watermark",
    "txbuffer_next_offset": "next_offset",
    "txbuffer_watermark_scn": "watermark",
}
_TOTALS = {  # sample name -> totals key (summed over partitions where labelled)
    "txbuffer_changes_emitted_total": "changes_emitted",
    "txbuffer_transactions_emitted_total": "transactions_emitted",
    "txbuffer_transactions_committed_total": "committed",
    "txbuffer_transactions_rolled_back_total": "rolled_back",
    "txbuffer_dead_letters_total": "dead_letters",
    "txbuffer_late_events_total": "late_events",
    "txbuffer_events_consumed_total": "events_consumed",
    "txbuffer_lost_state_events_total": "lost_events",
    "txbuffer_held_transactions": "held_txns",
    "txbuffer_oldest_held_age_seconds": "oldest_held_age_s",
    "txbuffer_broker_contact_age_seconds": "broker_contact_age_s",
    "txbuffer_unassigned_seconds": "unassigned_s",
    "process_resident_memory_bytes": "rss_bytes",
}


def scrape(url: str, timeout_s: float = 5.0) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.read().decode()
    except OSError as exc:
        raise StatusError(f"cannot scrape {url}: {exc}") from None


def from_metrics_text(text: str, source: str = "metrics") -> Status:
    from prometheus_client.parser import text_string_to_metric_families

    parts: dict[int, PartitionStatus] = {}
    totals: dict = {}
    updated = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            p = sample.labels.get("partition")
            if family.name in _GAUGES and p is not None:
                row = parts.setdefault(int(p), PartitionStatus(int(p)))
                attr = _GAUGES[family.name]
                setattr(row, attr, sample.value if attr == "oldest_open_age_s" else int(sample.value))
            elif family.name == "txbuffer_partition_phase" and p is not None and sample.value:
                parts.setdefault(int(p), PartitionStatus(int(p))).phase = sample.labels["phase"]
            elif sample.name in _TOTALS:
                key = _TOTALS[sample.name]
                totals[key] = totals.get(key, 0) + sample.value
            elif sample.name == "txbuffer_last_update_timestamp_seconds":
                updated = sample.value
    rows = sorted(parts.values(), key=lambda r: r.partition)
    totals = {k: (v if k.endswith("_s") else int(v)) for k, v in totals.items()}
    totals.update(_sums(rows))
    if updated:
        totals["figures_age_s"] = round(max(0.0, time.time() - updated), 1)
    return Status(source, rows, totals)


def from_url(url: str, timeout_s: float = 5.0) -> Status:
    return from_metrics_text(scrape(url, timeout_s), source=url)


# --------------------------------------------------------------------------- state dir


class ReadOnlyBatch(Batch):
    def put(self, key: bytes, value: bytes) -> None:
        raise StatusError("the status store is read-only")

    delete = delete_range = put  # type: ignore[assignment]

    def __len__(self) -> int:
        return 0


class ReadOnlyRocksStore(RocksStore):
    """RocksStore's reads over a database opened read-only: takes no lock, never writes.

    It sees what was durable (flushed or in the WAL) when it was opened.
    """

    def __init__(self, path: str | Path) -> None:
        # Not super().__init__(): that creates the directory and takes the writer's lock.
        from rocksdict import AccessType, Options, Rdict, ReadOptions

        self._read_options = ReadOptions  # RocksStore's scans build theirs from it
        self.path = Path(path)
        if not (self.path / "CURRENT").is_file():
            raise StatusError(f"no txbuffer store at {self.path}")
        self.db = Rdict(str(self.path), Options(raw_mode=True), access_type=AccessType.read_only())

    def batch(self) -> ReadOnlyBatch:
        return ReadOnlyBatch()

    def write(self, batch: Batch) -> None:
        raise StatusError("the status store is read-only")


_P = struct.Struct(">I")


def stored_partitions(store) -> list[int]:
    """Partitions that have a persisted position (one POS key each)."""
    return [_P.unpack_from(k, len(keys.POS))[0] for k, _ in store.scan_prefix(keys.POS)]


def from_state_dir(state_dir: str | Path, now_ms: int | None = None) -> Status:
    state_dir = Path(state_dir)
    if not state_dir.is_dir():
        raise StatusError(f"state dir not found: {state_dir}")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    store = ReadOnlyRocksStore(state_dir / "store")
    rows, completed, unreadable, ahead = [], 0, [], []
    try:
        for p in stored_partitions(store):
            engine = PartitionEngine.restore(p, store)
            if engine is None:
                unreadable.append(p)  # another format version: a restart would rebuild it
                rows.append(PartitionStatus(p, phase="unknown-format"))
                continue
            rows.append(_engine_row(engine, now_ms))
            if PartitionEngine.written_ahead(p, store):
                ahead.append(p)
                rows[-1].phase = "written-ahead"
            completed += len(engine.completed)
    finally:
        store.close()
    totals = _sums(rows)
    totals["completed_index"] = completed
    totals["store_bytes"] = sum(f.stat().st_size for f in (state_dir / "store").iterdir() if f.is_file())
    if unreadable:
        totals["unknown_format_partitions"] = unreadable
    if ahead:
        totals["written_ahead_partitions"] = ahead
    return Status(str(state_dir), rows, totals)


def _engine_row(engine: PartitionEngine, now_ms: int) -> PartitionStatus:
    oldest = engine.oldest_open()
    age = None
    if oldest is not None and oldest.first_ts_ms > 0:  # source time; 0 means the source gave none
        age = max(0.0, (now_ms - oldest.first_ts_ms) / 1000)
    return PartitionStatus(
        engine.partition,
        phase="stored",
        open_txns=len(engine.open),
        pending_txns=len(engine.pending),
        oldest_open_age_s=age,
        oldest_open_events=oldest.events if oldest else 0,
        oldest_open_first_offset=oldest.first_offset if oldest else None,
        buffered_events=engine.buffered_events(),
        buffered_bytes=engine.buffered_bytes(),
        low_watermark=engine.low_watermark(),
        next_offset=engine.applied_to(),
        watermark=engine.watermark,
        reread_from=engine.next_offset if engine.next_offset < engine.applied_to() else None,
    )


def _sums(rows: list[PartitionStatus]) -> dict:
    totals = {
        k: sum(getattr(r, k) for r in rows) for k in ("open_txns", "pending_txns", "buffered_events", "buffered_bytes")
    }
    lags = [r.lag for r in rows if r.lag is not None]
    if lags:
        totals["lag"] = sum(lags)
    totals["partitions"] = len(rows)
    return totals


# --------------------------------------------------------------------------- rendering

_COLUMNS = [  # header, field, formatter
    ("PART", "partition", str),
    ("PHASE", "phase", str),
    ("LAG", "lag", str),
    ("OPEN", "open_txns", str),
    ("PENDING", "pending_txns", str),
    ("OLDEST AGE", "oldest_open_age_s", lambda v: _age(v)),
    ("OLDEST EVENTS", "oldest_open_events", str),
    ("BUF EVENTS", "buffered_events", str),
    ("BUF BYTES", "buffered_bytes", lambda v: _bytes(v)),
    ("LOW WM", "low_watermark", str),
    ("NEXT OFFSET", "next_offset", str),
    ("WATERMARK", "watermark", str),
]


def render(status: Status) -> str:
    header = [c[0] for c in _COLUMNS]
    body = [
        [("-" if getattr(r, f) is None else fmt(getattr(r, f))) for _, f, fmt in _COLUMNS] for r in status.partitions
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths)).rstrip()

    out = [f"source: {status.source}", line(header), *map(line, body)]
    if not body:
        out.append("(no partitions)")
    out.append("")
    out.append("totals: " + "  ".join(f"{k}={_total(k, v)}" for k, v in status.totals.items()))
    if status.totals.get("written_ahead_partitions"):
        out.append(
            f"NOTE: partitions {status.totals['written_ahead_partitions']} were written past their last checkpoint "
            "(shown as of that checkpoint): a processor that is not running rebuilds them from the committed "
            "offsets at its start; a running one clears this at its next checkpoint"
        )
    if not status.partitions and status.totals.get("unassigned_s"):
        out.append(
            f"WARNING: this instance has held no partition for {_age(status.totals['unassigned_s'])} "
            "(group coordinator unreachable, a stuck rebalance, or other members hold every partition)"
        )
    return "\n".join(out)


def _total(key: str, value) -> str:
    if key.endswith("bytes"):
        return _bytes(value)
    if key.endswith("_s"):
        return _age(value)
    return str(value)


def _age(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:  # NaN: never measured (no broker round-trip yet)
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)
