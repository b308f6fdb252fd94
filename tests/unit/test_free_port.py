"""free_port never hands one process the same port twice, even when the kernel does."""

from __future__ import annotations

import itertools

import pytest

from processor.kafka import embedded


class _ProbeSocket:
    """A socket whose bind always lands on the next port of a scripted sequence."""

    def __init__(self, ports) -> None:
        self._ports = ports

    def __call__(self, *args):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def bind(self, address) -> None:
        self._port = next(self._ports)

    def getsockname(self):
        return ("127.0.0.1", self._port)


def test_a_port_the_kernel_hands_out_again_is_skipped(monkeypatch):
    # CI saw a broker formatted with PLAINTEXT and CONTROLLER both on one port: two probes in a
    # row got the same ephemeral port back from the kernel.
    monkeypatch.setattr(embedded, "_ports_handed_out", set())
    monkeypatch.setattr(embedded.socket, "socket", _ProbeSocket(iter([40001, 40001, 40001, 40002])))
    assert [embedded.free_port(), embedded.free_port()] == [40001, 40002]


def test_gives_up_with_a_clear_error_when_every_probe_repeats(monkeypatch):
    monkeypatch.setattr(embedded, "_ports_handed_out", {40001})
    monkeypatch.setattr(embedded.socket, "socket", _ProbeSocket(itertools.repeat(40001)))
    with pytest.raises(RuntimeError, match="no free loopback port"):
        embedded.free_port()


def test_real_ports_are_distinct_and_bindable():
    ports = [embedded.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(1024 <= port <= 65535 for port in ports)
