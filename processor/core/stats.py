"""Per-partition counts of what the engine did; they only grow (metrics turn them into counters)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Stats:
    events: int = 0
    changes: int = 0
    committed: int = 0
    rolled_back: int = 0
    filtered_txns: int = 0
    filtered_changes: int = 0
    late_events: int = 0
    restarts: int = 0
    undone: int = 0
    dead_letters: int = 0
    abandoned: int = 0
    incomplete: int = 0  # of the abandoned: dead-lettered whole, a source lost one of their events
