"""No silent hangs: how long this instance has held no partition, said in logs, status and metrics.

An instance can poll for good without an assignment: the group coordinator is unreachable, the
group never completes a rebalance, or other members hold every partition. None of that is an error
the consumer reports, so the runner measures it: past `unassigned_warn_ms` it warns (again every
interval while it lasts), and an --available-now run fails after `available_now_timeout_ms`.
"""

from __future__ import annotations

import time

import structlog

log = structlog.get_logger(__name__)


class AvailableNowTimeout(RuntimeError):
    """An --available-now run held no partition for longer than its timeout."""


class AssignmentWatch:
    def __init__(self, group: str, topic: str, warn_after_ms: int, fail_after_ms: int = 0):
        self.group, self.topic = group, topic
        self.warn_after_s = warn_after_ms / 1000
        self.fail_after_s = fail_after_ms / 1000
        self.since: float | None = time.monotonic()  # unassigned from the start until the first assignment
        self.next_warning = self.since + self.warn_after_s

    def update(self, holding: bool, now: float | None = None) -> None:
        """Called every loop; logs when the unassigned time crosses the limits. Raises AvailableNowTimeout
        (fail_after_ms > 0) once it passes fail_after_ms."""
        now = time.monotonic() if now is None else now
        if holding:
            if self.since is not None and now - self.since >= self.warn_after_s:
                log.info("group.assigned_again", unassigned_s=round(now - self.since, 1))
            self.since = None
            return
        if self.since is None:
            self.since, self.next_warning = now, now + self.warn_after_s
            return
        waited = now - self.since
        if self.fail_after_s and waited >= self.fail_after_s:
            reason = (
                f"--available-now: no partition of {self.topic!r} assigned to this instance for {waited:.0f} s "
                f"(available_now_timeout_ms={self.fail_after_s * 1000:.0f}) in consumer group {self.group!r}; "
                f"the group coordinator is unreachable, the group is stuck in a rebalance, or other members "
                f"hold every partition"
            )
            log.error("run.available_now_timeout", group=self.group, unassigned_s=round(waited, 1), reason=reason)
            raise AvailableNowTimeout(reason)
        if now >= self.next_warning:
            self.next_warning = now + self.warn_after_s
            log.warning(
                "group.unassigned",
                group=self.group,
                topic=self.topic,
                unassigned_s=round(waited, 1),
                warn_after_s=self.warn_after_s,
            )

    def unassigned_s(self, now: float | None = None) -> float:
        """Seconds since this instance last held a partition (0 while it holds one)."""
        if self.since is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.since

    def figures(self) -> dict:
        waited = self.unassigned_s()
        return {"unassigned_s": round(waited, 3), "unassigned_warning": int(waited >= self.warn_after_s)}
