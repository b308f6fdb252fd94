"""Contracts between the pure core and the I/O layers that implement them.

The emitter (runtime) writes through a Sink; the Kafka layer implements it. Keeping the contract
here lets both depend on core instead of on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

AckCallback = Callable[[object | None], None]


class Sink(Protocol):
    """Where outputs go. send() may block to make room. Outputs are acknowledged by settlement:
    settled() is True when every output sent before is acknowledged or its failure was reported;
    on_ack runs with the error of a failed output (a success may be reported as None, or not at all)."""

    def send_change(self, key: bytes, value: bytes | None, on_ack: AckCallback) -> None: ...

    def send_transaction(self, key: bytes, value: bytes, on_ack: AckCallback) -> None: ...

    def settled(self) -> bool: ...

    # Optional: direct_change_sender(on_ack) -> (call, a, b) | a ChangeSender capsule | None. The
    # emitter's per-change loop (codec ChangeStream.send_all, in C) then hands a change over as
    # call(value, key, a, b), a C callable with no Python frame (KafkaSink: the producer's produce),
    # or through the capsule's C function from the buffers it was written in (KafkaSink on the
    # native producer; processor/core/_emit.pxi), and uses send_change only when that call raises
    # or refuses. Sinks without it get send_change for every change.
    #
    # Optional: hold_transaction(key, value, on_ack) and reclaim_held() -> int. The sink sends the
    # record once every output sent before it is acknowledged, without the caller waiting; after a
    # failure report it stops, and reclaim_held() gives back how many it still held (the last ones),
    # unsent (KafkaSink on the native producer; the emitter's hold_ends).
