"""`txbuffer status` over a state dir (read-only RocksDB) and over a metrics endpoint's text."""

from __future__ import annotations

import json

import pytest
import structlog
from prometheus_client import generate_latest

from processor.cli.app import main
from processor.core import events as ev
from processor.runtime.metrics import Metrics
from processor.runtime.status import from_metrics_text, from_state_dir
from processor.store.rocks import RocksStore

from ..enginekit import R, ins, new_run


@pytest.fixture(autouse=True)
def keep_log_config():
    """cli.main() points structlog at the captured stderr; later tests must not log into it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def state_dir(tmp_path):
    """Partition 0: a committed txn, then 'b' open from offset 3 (2 changes), 'c' open from offset 5.
    Partition 2: everything finished. The store stays open, as under a running processor."""
    store = RocksStore(tmp_path / "store")
    p0 = new_run(store, partition=0)
    p0.engine.stage_horizon = 0  # every open transaction in the store, as any open for a while is
    p0.feed(
        ins("a", 1, 1),
        ins("a", 2, 2),
        R("a", ev.COMMIT, 3, 10),  # offsets 0..2
        R("b", ev.BEGIN, 0, 11, ts_ms=1_000),
        ins("b", 1, 3),  # offsets 3, 4
        ins("c", 1, 4),
        ins("b", 2, 5),
        R("hb", ev.HEARTBEAT, 0, 20),
    )  # offsets 5..7
    p2 = new_run(store, partition=2)
    p2.feed(ins("x", 1, 9), R("x", ev.COMMIT, 2, 30), R("y", ev.BEGIN, 0, 31), R("y", ev.ROLLBACK, 1, 32))
    yield tmp_path
    store.close()


def test_state_dir_shows_open_transactions_and_low_watermark(state_dir):
    status = from_state_dir(state_dir, now_ms=31_000)
    p0, p2 = status.partitions
    assert (p0.partition, p0.open_txns, p0.pending_txns) == (0, 2, 0)
    assert p0.low_watermark == 3 and p0.next_offset == 8 and p0.watermark == 20
    assert p0.oldest_open_first_offset == 3 and p0.oldest_open_events == 2
    assert p0.oldest_open_age_s == 30.0
    assert p0.buffered_events == 3 and p0.buffered_bytes > 0
    assert (p2.partition, p2.open_txns, p2.low_watermark, p2.next_offset) == (2, 0, 4, 4)
    assert status.totals["open_txns"] == 2 and status.totals["partitions"] == 2
    assert status.totals["completed_index"] == 3  # a, x, y


def test_status_cli_prints_table_for_a_state_dir(state_dir, capsys):
    assert main(["status", "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    header, row0, row2 = out.splitlines()[1:4]
    assert header.split()[:5] == ["PART", "PHASE", "LAG", "OPEN", "PENDING"]
    cells = dict(zip(["PART", "PHASE", "LAG", "OPEN", "PENDING"], row0.split()))
    assert cells == {"PART": "0", "PHASE": "stored", "LAG": "-", "OPEN": "2", "PENDING": "0"}
    assert row0.split()[-3:] == ["3", "8", "20"]  # low watermark, next offset, watermark
    assert row2.split()[-3:] == ["4", "4", "32"]
    assert "open_txns=2" in out


def test_status_cli_json_for_a_state_dir(state_dir, capsys):
    assert main(["status", "--state-dir", str(state_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_part = {p["partition"]: p for p in doc["partitions"]}
    assert by_part[0]["open_txns"] == 2 and by_part[0]["low_watermark"] == 3
    assert by_part[2]["open_txns"] == 0 and by_part[2]["low_watermark"] == 4
    assert doc["totals"]["buffered_events"] == 3


def test_state_dir_status_says_where_a_restart_re_reads_staged_transactions(tmp_path):
    store = RocksStore(tmp_path / "store")
    run = new_run(store)  # default staging: 'b', open from offset 3, is still in memory at the checkpoint
    run.feed(ins("a", 1, 1), R("a", ev.COMMIT, 2, 10), R("hb", ev.HEARTBEAT, 0, 11), R("b", ev.BEGIN, 0, 12))
    run.feed(ins("b", 1, 2), R("hb", ev.HEARTBEAT, 0, 13))
    store.close()
    (p0,) = from_state_dir(tmp_path).partitions
    assert (p0.open_txns, p0.next_offset, p0.reread_from, p0.low_watermark) == (0, 6, 3, 3)


def test_state_dir_status_names_a_partition_written_past_its_checkpoint(tmp_path, capsys):
    store = RocksStore(tmp_path / "store")
    run = new_run(store)
    run.engine.stage_horizon = 0  # 'a' goes to the store at the checkpoint
    run.feed(R("a", ev.BEGIN, 0, 1), ins("a", 1, 2), R("hb", ev.HEARTBEAT, 0, 3))  # checkpointed
    assert from_state_dir(tmp_path).partitions[0].phase == "stored"
    run.engine.apply(3, b"a", ev.encode_raw(ev.raw_event("a", ev.ROLLBACK, 2, 4)))
    run.engine.flush_data()  # the rollback's delete lands before the next checkpoint: the AHEAD mark
    store.close()
    status = from_state_dir(tmp_path)
    (p0,) = status.partitions
    assert p0.phase == "written-ahead" and status.totals["written_ahead_partitions"] == [0]
    assert (p0.open_txns, p0.next_offset) == (1, 3)  # as of the last checkpoint
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    assert "partitions [0] were written past their last checkpoint" in capsys.readouterr().out


def test_state_dir_status_never_writes_to_the_store(state_dir):
    before = {f.name: f.stat().st_size for f in (state_dir / "store").iterdir()}
    from_state_dir(state_dir)
    after = {f.name: f.stat().st_size for f in (state_dir / "store").iterdir()}
    assert after == before


def test_missing_state_dir_is_a_clear_error(tmp_path, capsys):
    assert main(["status", "--state-dir", str(tmp_path / "nope")]) == 1
    assert main(["status", "--state-dir", str(tmp_path)]) == 1  # a dir, but no store in it
    assert capsys.readouterr().out == ""


def test_unreachable_metrics_url_is_a_clear_error(capsys):
    assert main(["status", "--metrics-url", "http://127.0.0.1:9/metrics", "--timeout", "1"]) == 1
    assert capsys.readouterr().out == ""


def test_metrics_text_gives_the_same_report():
    m = Metrics()
    m.update(
        {
            "changes_emitted": 12,
            "transactions_emitted": 4,
            "partitions": {
                0: {
                    "phase": "running",
                    "next_offset": 50,
                    "low_watermark": 20,
                    "open_txns": 2,
                    "pending_txns": 0,
                    "watermark": 77,
                    "buffered_events": 9,
                    "buffered_bytes": 900,
                    "oldest_open_first_offset": 20,
                    "oldest_open_events": 6,
                    "oldest_open_age_ms": 90_000,
                    "lag": 3,
                    "stats": {"committed": 4, "dead_letters": 1, "late_events": 2, "rolled_back": 1, "events": 50},
                }
            },
        }
    )
    status = from_metrics_text(generate_latest(m.registry).decode())
    (p0,) = status.partitions
    assert (p0.partition, p0.phase, p0.lag, p0.open_txns, p0.low_watermark, p0.next_offset) == (
        0,
        "running",
        3,
        2,
        20,
        50,
    )
    assert (p0.oldest_open_age_s, p0.oldest_open_events, p0.buffered_events, p0.buffered_bytes) == (90.0, 6, 9, 900)
    t = status.totals
    assert (t["changes_emitted"], t["transactions_emitted"], t["committed"], t["dead_letters"]) == (12, 4, 4, 1)
    assert (t["late_events"], t["rolled_back"], t["lag"], t["open_txns"]) == (2, 1, 3, 2)
    assert t["rss_bytes"] > 0
