"""Lost state: input the processor needed was deleted, or the log it knew no longer exists.

Never continued silently: the incident is reported as a RESYNC_REQUIRED transaction record and a
dead letter, then the partition fails (`lost_state_policy: fail`) or starts over at the log start
with empty state (`skip`, the loss is counted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from processor.core import events as ev
from processor.core.engine import Filters, PartitionEngine
from processor.core.store import Store

log = structlog.get_logger(__name__)


class LostStateError(RuntimeError):
    """The committed low watermark is below the raw topic's log start: input was deleted unread."""


def below_log_start(partition: int, start: int, log_start: int) -> str:
    return (
        f"raw partition {partition}: low watermark {start} is below log start {log_start}; {log_start - start} "
        f"events of open transactions were deleted before they were processed"
    )


def beyond_log_end(partition: int, start: int, end: int) -> str:
    return (
        f"raw partition {partition}: position {start} is beyond the log end {end}; the raw topic was "
        f"recreated or truncated, the state for it no longer matches the log"
    )


def handle_lost_state(
    cfg: Any,
    sink: Any,
    standalone: Callable[[Callable[[], None]], None],
    store: Store,
    filters: Filters,
    partition: int,
    start: int,
    log_start: int,
    reason: str,
    lost: int,
    metrics: Any = None,
) -> PartitionEngine:
    """Report, then raise LostStateError (fail) or return an empty engine at the log start (skip)."""
    log.error(
        "partition.lost_state",
        partition=partition,
        low_watermark=start,
        log_start=log_start,
        lost=lost,
        policy=cfg.lost_state_policy,
        reason=reason,
    )
    resync = {
        "status": "RESYNC_REQUIRED",
        "id": f"partition-{partition}",
        "commit_scn": -1,
        "ts_ms": 0,
        "thread": 1,
        "event_count": lost,
        "data_collections": None,
        "input_partition": partition,
        "commit_offset": start,
        "ordering": cfg.ordering,
        "reason": reason,
    }

    def report() -> None:
        sink.send_transaction(f"partition-{partition}".encode(), ev.encode_transaction(resync), lambda err: None)
        sink.dead_letter(cfg.raw_topic, partition, start, None, None, reason)

    standalone(report)
    if metrics is not None:
        metrics.lost_state(partition, lost)
    if cfg.lost_state_policy == "fail":
        raise LostStateError(reason)
    PartitionEngine.wipe(partition, store)  # what was open is gone with its events
    engine = PartitionEngine(partition, store, filters, cfg.completed_index_min_entries)
    engine.next_offset = log_start
    return engine
