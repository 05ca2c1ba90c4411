"""router.server's protocol: a real uvicorn server in this process, raw sockets as clients.

The disconnect hook replaces a task per request in the proxy, so it must fire exactly when
the client connection is lost, for every hook registered on that connection, and leave
nothing registered behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn

from router.server import DISCONNECT_HOOKS, HookedHttpToolsProtocol, Hooks
from tests.support import until

GUARD_S = 10.0


class App:
    """Registers a hook per request; answers ``/quick`` at once, holds ``/hold`` open."""

    def __init__(self) -> None:
        self.hooks: list[Hooks | None] = []
        self.fired: list[str] = []
        self.holding = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        hooks: Hooks | None = scope.get(DISCONNECT_HOOKS)
        self.hooks.append(hooks)
        assert hooks is not None
        path = scope["path"]
        hook: Callable[[], None] = lambda: self.fired.append(path)  # noqa: E731
        hooks.add(hook)
        try:
            if path == "/hold":
                self.holding += 1
                await asyncio.Event().wait()  # until cancelled at shutdown
            await send(
                {"type": "http.response.start", "status": 200,
                 "headers": [(b"content-length", b"2")]}
            )  # fmt: skip
            await send({"type": "http.response.body", "body": b"ok"})
        finally:
            hooks.discard(hook)


Served = tuple[App, int, uvicorn.Server]


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    app = App()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=HookedHttpToolsProtocol,
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started, "uvicorn to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield app, port, server
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


def request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def test_hook_fires_when_the_client_leaves_mid_request(
    served: Served,
) -> None:
    app, port, _server = served
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(request("/hold"))
        await until(lambda: app.holding == 1, "the request to be held")
    finally:
        sock.close()
    await until(lambda: app.fired == ["/hold"], "the hook to fire on disconnect")


async def test_one_set_per_connection_and_nothing_left_after_a_request(
    served: Served,
) -> None:
    """Two requests on one keep-alive connection share its set; each removed its hook, so
    closing the connection afterwards fires nothing."""
    app, port, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(2):
            writer.write(request("/quick"))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            await reader.readexactly(2)
    finally:
        writer.close()
        await writer.wait_closed()
    assert len(app.hooks) == 2
    assert app.hooks[0] is app.hooks[1]
    assert app.hooks[0] == set()
    await until(lambda: not server.server_state.connections, "the server to see the close")
    assert app.fired == []


async def test_separate_connections_have_separate_sets(
    served: Served,
) -> None:
    app, port, _server = served
    for _ in range(2):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request("/quick"))
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.close()
        await writer.wait_closed()
    assert len(app.hooks) == 2
    assert app.hooks[0] is not app.hooks[1]
