"""The unit tier is pure: any attempt to open a network connection or bind a socket fails."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


class _NoSockets(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise _NoSockets("unit tests must not use the network; move this test to component/")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket.socket, "bind", refuse)
    yield
