"""router.uvicorn_protocol's limits at the door (issue 39): a real uvicorn server in this
process with small limits, raw sockets as clients.

Each limit answers its status with a JSON body naming the limit, counts its reason, closes
the connection, and leaves the server serving the next client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from router.limits import DoorLimits
from router.uvicorn_protocol import CYCLE, LIMITS, HookedHttpToolsProtocol
from tests.support import until

GUARD_S = 10.0
SERVER: uvicorn.Server | None = None  # the one serving now


class App:
    """``/echo``: the request's header names and body size; ``/flood``: a chunked response
    written until the client is gone (a reader that stops reading)."""

    def __init__(self, limits: DoorLimits) -> None:
        self.counts: Counter[str] = Counter()
        setattr(self, LIMITS, DoorLimits(**{**limits.__dict__, "count": self.count}))
        self.flood_ended = asyncio.Event()

    def count(self, reason: str) -> None:
        self.counts[reason] += 1

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/flood":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            cycle = scope[CYCLE]
            while not cycle.disconnected:
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
            self.flood_ended.set()
            return
        doc = {"headers": [n.decode() for n, _ in scope["headers"]], "size": len(body)}
        out = json.dumps(doc).encode()
        await send(
            {"type": "http.response.start", "status": 200,
             "headers": [(b"content-length", str(len(out)).encode())]}
        )  # fmt: skip
        await send({"type": "http.response.body", "body": out})


SMALL = DoorLimits(
    max_url_bytes=256,
    max_header_bytes=2048,
    max_headers=10,
    header_timeout_s=0.4,
    body_timeout_s=0.4,
    max_connections=4,
    write_stall_s=0.4,
)


@contextlib.asynccontextmanager
async def serve(limits: DoorLimits) -> AsyncIterator[tuple[App, int]]:
    global SERVER
    app = App(limits)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=HookedHttpToolsProtocol, lifespan="off",
        log_level="warning", proxy_headers=False, access_log=False,  # (the router's)
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started, "uvicorn to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    SERVER = server
    try:
        yield app, port
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def small() -> AsyncIterator[tuple[App, int]]:
    async with serve(SMALL) as served:
        yield served


async def exchange(port: int, *parts: bytes) -> bytes:
    """Send ``parts`` (one write each) and read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for part in parts:
            writer.write(part)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        async with asyncio.timeout(GUARD_S):
            return await reader.read()
    finally:
        writer.close()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def error_of(response: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(response.partition(b"\r\n\r\n")[2])["error"]
    return doc


async def served_ok(port: int) -> dict[str, Any]:
    """An ordinary request, still answered."""
    response = await exchange(
        port, b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 2\r\n\r\nhi"
    )
    assert status_of(response) == 200, response[:200]
    doc: dict[str, Any] = json.loads(response.partition(b"\r\n\r\n")[2])
    return doc


async def test_a_url_past_the_limit_is_414_and_counted(small: tuple[App, int]) -> None:
    app, port = small
    response = await exchange(port, b"GET /" + b"a" * 300 + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    assert status_of(response) == 414
    assert "--max-url-bytes=256" in error_of(response)["message"]
    assert b"connection: close" in response
    assert app.counts == {"url_too_long": 1}
    await served_ok(port)


async def test_a_head_past_the_limit_is_431_whole_or_trickled(small: tuple[App, int]) -> None:
    app, port = small
    big = b"GET /echo HTTP/1.1\r\nhost: x\r\nx-big: " + b"v" * 4000 + b"\r\n\r\n"
    response = await exchange(port, big)
    assert status_of(response) == 431
    assert "--max-header-bytes=2048" in error_of(response)["message"]
    # The same header trickled in: refused at the limit, before it is all in.
    head = b"GET /echo HTTP/1.1\r\nhost: x\r\nx-big: "
    # The last part crosses the limit: nothing is left unread when the server closes.
    parts = [head] + [b"v" * 100] * ((2048 - len(head)) // 100 + 1)
    response = await exchange(port, *parts)
    assert status_of(response) == 431
    assert app.counts == {"header_too_large": 2}
    await served_ok(port)


async def test_too_many_headers_is_431_and_counted(small: tuple[App, int]) -> None:
    app, port = small
    headers = b"".join(b"x-%d: 1\r\n" % i for i in range(11))
    response = await exchange(port, b"GET /echo HTTP/1.1\r\n" + headers + b"\r\n")
    assert status_of(response) == 431
    assert "--max-headers=10" in error_of(response)["message"]
    assert app.counts == {"too_many_headers": 1}
    assert len((await served_ok(port))["headers"]) == 3  # host, connection, content-length


async def test_a_head_or_body_that_stalls_is_408_and_closed(small: tuple[App, int]) -> None:
    app, port = small
    response = await exchange(port, b"GET /echo HTTP/1.1\r\nhost: x\r\n")  # head never ends
    assert status_of(response) == 408
    assert "--header-timeout-s=0.4" in error_of(response)["message"]
    stalled_body = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhalf"
    response = await exchange(port, stalled_body)
    assert status_of(response) == 408
    assert "--body-timeout-s=0.4" in error_of(response)["message"]
    # A connection that sends nothing is closed without an answer.
    assert await exchange(port) == b""
    assert app.counts == {"header_timeout": 2, "body_timeout": 1}
    await served_ok(port)


async def test_connections_past_the_cap_get_503_with_retry_after(small: tuple[App, int]) -> None:
    app, port = small
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
    try:
        response = await exchange(port, b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")
        assert status_of(response) == 503
        assert b"retry-after: 1\r\n" in response
        assert "--max-connections=4" in error_of(response)["message"]
        assert app.counts == {"too_many_connections": 1}
    finally:
        for _, writer in held:
            writer.close()
    await until(lambda: len(server_connections()) == 0, "the held connections to close")
    await served_ok(port)


def server_connections() -> set[Any]:
    """The connections the server holds open."""
    assert SERVER is not None
    return set(SERVER.server_state.connections)


async def test_chunked_trailers_are_dropped(small: tuple[App, int]) -> None:
    _, port = small
    response = await exchange(
        port,
        b"POST /echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding: chunked\r\n"
        b"\r\n2\r\nhi\r\n0\r\nx-request-priority: -100\r\nauthorization: Bearer t\r\n\r\n",
    )
    assert status_of(response) == 200
    doc = json.loads(response.partition(b"\r\n\r\n")[2])
    assert doc == {"headers": ["host", "connection", "transfer-encoding"], "size": 2}


async def test_a_reader_that_stops_reading_is_cut_off(small: tuple[App, int]) -> None:
    app, port = small
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    before = server_connections()
    sock.connect(("127.0.0.1", port))
    try:
        await until(lambda: server_connections() - before, "the connection")
        (proto,) = server_connections() - before
        # No access log, as in the router process (pytest's log capture gives uvicorn's
        # access logger handlers, and the protocol then uses uvicorn's own send).
        proto.access_log = False
        sock.sendall(b"GET /flood HTTP/1.1\r\nhost: x\r\n\r\n")  # and never read
        async with asyncio.timeout(GUARD_S):
            await app.flood_ended.wait()
        assert app.counts == {"write_stall": 1}
    finally:
        sock.close()
    await served_ok(port)


async def test_the_defaults_are_the_documented_ones() -> None:
    limits = DoorLimits()
    assert (limits.max_url_bytes, limits.max_header_bytes, limits.max_headers) == (
        8192, 65536, 100,
    )  # fmt: skip
    assert (limits.header_timeout_s, limits.body_timeout_s, limits.write_stall_s) == (60, 60, 60)
    assert limits.max_connections == 4096
    # An OpenAI SDK request's head is far below them: its size is in the body.
    async with serve(DoorLimits()) as (app, port):
        assert (await served_ok(port))["size"] == 2
        assert not app.counts
