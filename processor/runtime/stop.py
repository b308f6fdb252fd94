"""SIGTERM and SIGINT for the processor: a stop flag, and waits that a stop cuts short.

The loop checks the flag between poll batches. Some waits take far longer than a batch: an index
rebuild that an open Kafka transaction holds (up to 300 s), the restore's retries against a hung
broker (300 s), a transactional call librdkafka does not return from (75 s), drains while the
broker does not acknowledge (30 s each). Each runs inside `interruptible(grace_s)`:

- grace 0 (waits that change nothing: reads, restores staged before anything is held, backoff):
  the signal raises Stopping there at once;
- grace > 0 (waits whose normal end is worth having: a batch's commit, the closing drains): the
  signal starts a timer, and Stopping is raised only if the wait is still going after grace_s (the
  timer thread signals the main thread again, which wakes a blocked wait; SIGALRM is left alone:
  pytest-timeout uses it).

Stopping is a BaseException, so the `except Exception` of callers on the way does not swallow it.
The runner catches it, closes without committing anything the outputs do not cover, and exits.
Outside every section a signal only sets the flag: the loop ends at the next batch boundary.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

log = structlog.get_logger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_MAIN_THREAD = threading.main_thread().ident
POLL_S = 0.1  # how often wait() looks at the flag


class Stopping(BaseException):  # a request, like KeyboardInterrupt, not an error
    """A stop was requested while the process waited in an interruptible section."""


class StopSignal:
    """The stop flag and the interruptible sections of one run; installed on the main thread."""

    def __init__(self, on_request: Callable[[], None] = lambda: None) -> None:
        self.requested = False
        self.requested_at: float | None = None
        self.on_request = on_request
        self._sections: list[tuple[str, float]] = []  # (what, grace_s), innermost last
        self._previous: dict[int, Any] = {}
        self._timer: threading.Timer | None = None
        self._grace_over = False

    # -- signals ---------------------------------------------------------------------------------

    def install(self) -> None:
        """Take SIGTERM and SIGINT; main thread only."""
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        self._disarm()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        first = not self.requested
        self.request()
        if not self._sections:
            return
        what, grace = self._sections[-1]
        if self._grace_over:
            self._raise(what, f"grace of {grace:g}s passed")
        if grace <= 0 or not first:  # a second signal does not wait for the grace either
            self._raise(what, signal.Signals(signum).name)
        self._arm(what, grace)

    def _arm(self, what: str, grace: float) -> None:
        if self._timer is None:
            self._grace_over = False
            self._timer = threading.Timer(grace, self._grace_passed)
            self._timer.daemon = True
            self._timer.start()
            log.info("run.stop_waits", section=what, grace_s=grace)

    def _grace_passed(self) -> None:
        """Timer thread: the section is still going; signal the main thread (wakes a blocked wait)."""
        if self._sections and self._previous:  # still in it, and the handler still ours
            self._grace_over = True
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)

    def _raise(self, what: str, why: str) -> None:
        self._disarm()
        log.warning("run.stop_interrupts", section=what, why=why)
        raise Stopping(f"stop requested during {what} ({why})")

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._grace_over = False

    # -- the flag and the sections ---------------------------------------------------------------

    def request(self) -> None:
        if not self.requested:
            self.requested, self.requested_at = True, time.monotonic()
            self.on_request()

    def interruptible(self, what: str, grace_s: float = 0.0) -> Section:
        """A wait that a stop cuts short (after grace_s); a no-op off the main thread."""
        return Section(self, what, grace_s)

    def _enter(self, what: str, grace_s: float) -> bool:
        if threading.get_ident() != _MAIN_THREAD:
            return False
        if self.requested:
            if grace_s <= 0:
                raise Stopping(f"stop requested before {what}")
            self._sections.append((what, grace_s))
            self._arm(what, grace_s)  # requested earlier: the grace runs from now
            return True
        self._sections.append((what, grace_s))
        return True

    def _exit(self) -> None:
        self._sections.pop()
        if not self._sections and self._timer is not None:
            self._disarm()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True (early) when a stop is requested."""
        deadline = time.monotonic() + seconds
        while not self.requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))
        return True

    def remaining(self, budget_s: float, default_s: float) -> float:
        """default_s, or what is left of budget_s since the stop was requested (at least 0)."""
        if self.requested_at is None:
            return default_s
        return max(0.0, min(default_s, budget_s - (time.monotonic() - self.requested_at)))


class Section:
    """`with` an interruptible wait (StopSignal.interruptible); reusable, cheap on the loop's path."""

    __slots__ = ("entered", "grace_s", "stop", "what")

    def __init__(self, stop: StopSignal, what: str, grace_s: float):
        self.stop, self.what, self.grace_s = stop, what, grace_s
        self.entered = False

    def __enter__(self) -> None:
        self.entered = self.stop._enter(self.what, self.grace_s)

    def __exit__(self, *_: object) -> None:
        if self.entered:
            self.entered = False
            self.stop._exit()


_current: StopSignal | None = None


def current() -> StopSignal | None:
    """The StopSignal of the run in progress (index rebuild and recovery use it), if any."""
    return _current


def set_current(stop: StopSignal | None) -> None:
    global _current
    _current = stop


@contextmanager
def interruptible(what: str, grace_s: float = 0.0) -> Iterator[None]:
    """The current run's interruptible section; nothing without a run (tools, tests)."""
    stop = _current
    if stop is None:
        yield
    else:
        with stop.interruptible(what, grace_s):
            yield
