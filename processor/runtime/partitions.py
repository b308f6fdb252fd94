"""A raw partition's life on this instance: assigned -> restoring -> running -> revoking -> closed.

Restoring decides whether the local store can be trusted or the partition is rebuilt from the
committed low watermark (the raw topic is the source of truth; the store is a cache).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import structlog

from processor.core.engine import Filters, PartitionEngine
from processor.core.store import Store

log = structlog.get_logger(__name__)


class Phase(enum.Enum):
    ASSIGNED = "assigned"
    RESTORING = "restoring"
    RUNNING = "running"
    REVOKING = "revoking"
    CLOSED = "closed"


_NEXT = {
    Phase.ASSIGNED: {Phase.RESTORING, Phase.REVOKING},
    Phase.RESTORING: {Phase.RUNNING, Phase.REVOKING},
    Phase.RUNNING: {Phase.REVOKING},
    Phase.REVOKING: {Phase.CLOSED},
    Phase.CLOSED: set(),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class Restored:
    engine: PartitionEngine
    start_offset: int
    source: str  # "local", "rebuild-empty", "rebuild-stale"


class PartitionState:
    def __init__(self, partition: int):
        self.partition = partition
        self.phase = Phase.ASSIGNED
        self.engine: PartitionEngine | None = None

    def move(self, phase: Phase) -> None:
        if phase not in _NEXT[self.phase]:
            raise IllegalTransition(f"partition {self.partition}: {self.phase.value} -> {phase.value}")
        self.phase = phase


def restore_partition(
    partition: int,
    store: Store,
    filters: Filters,
    min_completed: int,
    committed: int | None,
    log_start: int,
    trust_local: bool = True,
) -> Restored:
    """Local state if present and consistent with the committed low watermark, else a rebuild.

    `committed` is the group's committed offset (the low watermark) or None. With
    trust_local=False (exactly_once) the store is always rebuilt from the committed offset.
    """
    local = PartitionEngine.restore(partition, store, filters, min_completed) if trust_local else None
    if local is not None:
        if committed is None or committed <= local.next_offset:
            return Restored(local, local.next_offset, "local")
        # Another instance went further than this store knows: it is stale, not trusted.
        log.warning("partition.store_stale", partition=partition, local_next=local.next_offset, committed=committed)
        PartitionEngine.wipe(partition, store)
        source = "rebuild-stale"
    else:
        PartitionEngine.wipe(partition, store)  # drop any half-written leftovers
        source = "rebuild-empty"
    start = committed if committed is not None else log_start
    engine = PartitionEngine(partition, store, filters, min_completed)
    engine.next_offset = start
    return Restored(engine, start, source)
