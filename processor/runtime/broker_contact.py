"""When this process last had a round-trip with the broker, for the outage gauge.

The offset committer marks each acknowledged commit (every commit interval under load, at least
every RESEND_EVERY_S when idle); the metrics endpoint reads the age at scrape time, so a hung or
dead broker shows as a growing age even while the processor loop itself keeps running.
"""

from __future__ import annotations

import time

_last: float | None = None


def seen() -> None:
    global _last
    _last = time.monotonic()


def age_s() -> float:
    """Seconds since the last round-trip; NaN before the first one."""
    return float("nan") if _last is None else time.monotonic() - _last
