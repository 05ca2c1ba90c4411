"""router.uvicorn_protocol: a real uvicorn server in this process, raw sockets as clients.

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
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from router.uvicorn_protocol import (
    BODY_FOLLOWS,
    CYCLE,
    DISCONNECT_HOOKS,
    Cycle,
    HookedHttpToolsProtocol,
    Hooks,
)
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
            if path == "/together":  # one write: start marked BODY_FOLLOWS, then the body
                await send(
                    {"type": "http.response.start", "status": 200,
                     "headers": [(b"content-length", b"2")], BODY_FOLLOWS: True}
                )  # fmt: skip
                await send({"type": "http.response.body", "body": b"ok"})
                return
            if path in ("/direct", "/direct-stream"):  # the proxy's direct calls
                cycle = scope[CYCLE]
                assert cycle.whole_body() is None  # already received above
                if path == "/direct":
                    assert cycle.respond(200, b"content-length: 2\r\n", b"ok")
                else:
                    assert cycle.stream_start(200, b"x-a: 1\r\n")
                    for chunk in (b"ab", b"", b"c"):
                        cycle.stream_chunk(chunk)
                    cycle.stream_end(b"")
                return
            if path == "/chunked":  # no Content-Length: chunked, as uvicorn frames it
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b"ab", "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": True})
                await send({"type": "http.response.body", "body": b"c"})
                return
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


class CountingTransport:
    """A transport that counts ``write`` calls and passes everything on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def exchange(served: Served, raw: bytes, until_bytes: bytes) -> tuple[bytes, list[bytes]]:
    """Send ``raw`` on a new connection whose server-side writes are counted; read until
    ``until_bytes``; return what came and the server's writes."""
    _app, port, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await until(lambda: server.server_state.connections, "the server to see the client")
        (proto,) = server.server_state.connections
        assert isinstance(proto, HookedHttpToolsProtocol)
        counting = CountingTransport(proto.transport)
        proto.transport = counting  # type: ignore[assignment]
        # No access log, as in the router process (uvicorn's access_log=False); here
        # pytest's log capture gives uvicorn's access logger handlers, and with an access
        # log the cycle hands every message to uvicorn's own send.
        proto.access_log = False
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.readuntil(until_bytes), GUARD_S)
    finally:
        writer.close()
        await writer.wait_closed()
    return data, counting.writes


async def test_a_start_marked_body_follows_goes_out_with_its_body_in_one_write(
    served: Served,
) -> None:
    data, writes = await exchange(served, request("/together"), b"\r\n\r\nok")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 2\r\n" in data
    assert len(writes) == 1 and writes[0].endswith(b"\r\n\r\nok")
    # Without the mark, the status line and headers go at once, the body after them.
    _, writes = await exchange(served, request("/quick"), b"\r\n\r\nok")
    assert [w.endswith(b"\r\n\r\n") for w in writes] == [True, False]


async def test_the_cycle_frames_as_uvicorn_chunked_and_head(served: Served) -> None:
    data, _ = await exchange(served, request("/chunked"), b"0\r\n\r\n")
    head, body = data.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head
    assert body == b"2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"
    raw = b"HEAD /together HTTP/1.1\r\nHost: x\r\n\r\n"
    data, writes = await exchange(served, raw, b"\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200") and writes == [data]  # no body for a HEAD


async def test_a_cycle_has_every_attribute_of_uvicorns(served: Served) -> None:
    """The protocol's uvicorn code (connection_lost, shutdown, on_body, pipelining) reads
    and writes the cycle's attributes: ours must have all of uvicorn's own, whatever
    uvicorn version is installed."""
    _app, port, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request("/quick"))
        await writer.drain()
        await reader.readuntil(b"\r\n\r\nok")
        (proto,) = server.server_state.connections
        assert isinstance(proto, HookedHttpToolsProtocol)
        ours = proto.cycle
        assert isinstance(ours, Cycle)
        theirs = RequestResponseCycle(
            scope=proto.scope,
            transport=proto.transport,
            flow=proto.flow,
            logger=proto.logger,
            access_logger=proto.access_logger,
            access_log=proto.access_log,
            default_headers=server.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=proto.on_response_complete,
        )
        missing = [name for name in vars(theirs) if not hasattr(ours, name)]
        assert missing == []  # set on the instance, or a class default until set
    finally:
        writer.close()
        await writer.wait_closed()


async def test_the_direct_calls_write_what_the_asgi_messages_write(served: Served) -> None:
    """``respond`` is a start marked BODY_FOLLOWS and its body; ``stream_start``,
    ``stream_chunk`` and ``stream_end`` are a start without a length and body messages:
    the same bytes on the wire, in one write for ``respond``."""
    asgi, _ = await exchange(served, request("/together"), b"\r\n\r\nok")
    direct, writes = await exchange(served, request("/direct"), b"\r\n\r\nok")
    assert direct == asgi and writes == [direct]
    asgi, _ = await exchange(served, request("/chunked"), b"0\r\n\r\n")
    direct, _ = await exchange(served, request("/direct-stream"), b"0\r\n\r\n")
    assert direct == asgi.replace(b"\r\ntransfer-encoding", b"\r\nx-a: 1\r\ntransfer-encoding")
    # and the connection serves the next request (keep-alive, the cycle completed)
    app, _port, _server = served
    assert app.fired == []
