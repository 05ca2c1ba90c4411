"""The upstream clients of :mod:`router.upstream`, called directly, against servers the test
starts on 127.0.0.1 (port 0).

The servers are raw ``asyncio.start_server`` sockets, so each test controls the exact bytes
an upstream sends (1xx, chunked, a body ended by the close, garbage, a stall, a reset) and
sees exactly what the client sent and when it closed a connection. Behaviour the
:class:`~router.upstream.Upstream` interface promises is checked on both clients
(``client_kind``); the keep-alive pool, back-pressure and idle expiry of
:class:`~router.upstream.HttpToolsUpstream` are checked on it alone, some of them white-box
(its pool's idle list, a response's buffered byte count, the transport's reading state):
that is the only way to see them without timing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from router import upstream as up
from router.headers import request_headers
from router.upstream import (
    UPSTREAM_CLIENTS,
    BodyError,
    HeaderTimeout,
    HttpToolsUpstream,
    Malformed,
    Refused,
    Reset,
    Upstream,
    UpstreamResponse,
    build,
)
from tests.support import until

# Short enough that the file runs in seconds, long enough that loopback always answers
# well inside it when a test expects an answer.
SHORT_TIMEOUT_S = 0.3
# A guard so that a bug that hangs fails the test instead of the run.
GUARD_S = 10.0


# --- a raw HTTP/1.1 server --------------------------------------------------------------


@dataclass
class Request:
    line: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def method(self) -> bytes:
        return self.line.split(b" ", 1)[0]

    def values(self, name: bytes) -> list[bytes]:
        return [v for n, v in self.headers if n.lower() == name]


class Peer:
    """One connection the server accepted, seen from the server's side."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.requests: list[Request] = []
        self.client_gone = False  # the client closed or reset this connection

    async def read_request(self) -> Request | None:
        """The next request (Content-Length framed), or None once the client has gone."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            line, *lines = head[:-4].split(b"\r\n")
            headers = []
            for raw in lines:
                name, _, value = raw.partition(b":")
                headers.append((name, value.strip()))
            lengths = [v for n, v in headers if n.lower() == b"content-length"]
            body = await self.reader.readexactly(int(lengths[0]) if lengths else 0)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.client_gone = True
            return None
        request = Request(line, headers, body)
        self.requests.append(request)
        return request

    async def send(self, *pieces: bytes) -> None:
        """Write ``pieces`` one at a time (separate segments where the timing allows)."""
        for piece in pieces:
            self.writer.write(piece)
            await self.writer.drain()

    async def until_client_gone(self) -> None:
        """Read and drop whatever the client sends until it closes the connection."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass
        self.client_gone = True

    def reset(self) -> None:
        """Close with an RST (SO_LINGER 0) instead of a FIN."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


Handler = Callable[[Peer], Awaitable[None]]


class RawServer:
    """``asyncio.start_server`` on 127.0.0.1:0 running ``handler`` for each connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.peers: list[Peer] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, tls: ssl.SSLContext | None = None) -> RawServer:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=tls)
        port = self.server.sockets[0].getsockname()[1]
        self.authority = f"127.0.0.1:{port}".encode()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer)
        self.peers.append(peer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.append(task)
        try:
            await self.handler(peer)
        except ConnectionError:
            peer.client_gone = True

    @property
    def requests(self) -> list[Request]:
        return [r for peer in self.peers for r in peer.requests]

    async def close(self) -> None:
        self.server.close()
        for peer in self.peers:
            peer.writer.transport.abort()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.wait_closed()


def response(
    body: bytes = b"",
    status: bytes = b"200 OK",
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    length: bool = True,
    version: bytes = b"HTTP/1.1",
) -> bytes:
    """A response's bytes; ``length=False`` leaves the framing to ``headers`` (or the close)."""
    lines = [version + b" " + status]
    lines += [name + b": " + value for name, value in headers]
    if length:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def keep_alive(respond: Callable[[Request], bytes | Sequence[bytes]]) -> Handler:
    """A handler answering every request on the connection with ``respond(request)``."""

    async def handler(peer: Peer) -> None:
        while (request := await peer.read_request()) is not None:
            answer = respond(request)
            await peer.send(*([answer] if isinstance(answer, bytes) else answer))

    return handler


def echo_path(request: Request) -> bytes:
    return response(b"you asked " + request.line.split(b" ")[1])


def answer_then(after: Callable[[Peer], Awaitable[None]], answer: bytes) -> Handler:
    """Read one request, send ``answer``, then ``after(peer)``."""

    async def handler(peer: Peer) -> None:
        if await peer.read_request() is not None:
            await peer.send(answer)
            await after(peer)

    return handler


async def stall(peer: Peer) -> None:
    await peer.until_client_gone()


async def stall_after_the_request(peer: Peer) -> None:
    if await peer.read_request() is not None:
        await peer.until_client_gone()


async def hang_up(peer: Peer) -> None:
    peer.writer.close()


# --- fixtures ------------------------------------------------------------------------------


class Serve(Protocol):
    def __call__(
        self, handler: Handler, tls: ssl.SSLContext | None = None
    ) -> Awaitable[RawServer]: ...


MakeClient = Callable[..., Upstream]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(handler)`` starts a :class:`RawServer`; all are closed after the test."""
    started: list[RawServer] = []

    async def start(handler: Handler, tls: ssl.SSLContext | None = None) -> RawServer:
        server = await RawServer(handler).start(tls)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.close()


@pytest.fixture
async def clients() -> AsyncIterator[MakeClient]:
    """``clients(kind, total_timeout_s=…, keepalive_s=…)`` builds a client with
    :func:`router.upstream.build`; every one is closed after the test."""
    made: list[Upstream] = []

    def make(
        kind: str = "httptools",
        *,
        connect_timeout_s: float = 5.0,
        total_timeout_s: float | None = None,
        keepalive_s: float = 60.0,  # no idle expiry during a test unless it asks for one
    ) -> Upstream:
        client = build(kind, connect_timeout_s, total_timeout_s, keepalive_s)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture(autouse=True)
def _no_unretrieved_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No future or task of the client's ends with an error nobody retrieved (asyncio logs
    those when they are collected)."""
    yield
    gc.collect()
    records = [*caplog.get_records("setup"), *caplog.get_records("call"), *caplog.records]
    logged = [r.getMessage() for r in records if r.name == "asyncio"]
    assert not [m for m in logged if "never retrieved" in m or "nhandled" in m], logged


@pytest.fixture(params=UPSTREAM_CLIENTS)
def client_kind(request: pytest.FixtureRequest) -> str:
    """Both upstream clients (--upstream-client): the interface promises the same."""
    return str(request.param)


def httptools(client: Upstream) -> HttpToolsUpstream:
    assert isinstance(client, HttpToolsUpstream)
    return client


def idle(client: Upstream, server: RawServer) -> list[up._Connection]:
    """White-box: the idle pooled connections of an httptools client to ``server``."""
    pool = httptools(client)._pools.get(server.url)
    return [] if pool is None else pool.idle


async def fetch(
    client: Upstream,
    server: RawServer,
    path: bytes = b"/v1/x",
    method: bytes = b"GET",
    body: bytes = b"",
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> tuple[UpstreamResponse, bytes]:
    """One whole request: open, read to the end, release."""
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, method, path, list(headers), body)
        data = await resp.read()
    resp.release()
    return resp, data


async def read_by_iterating(resp: UpstreamResponse) -> bytes:
    return b"".join([chunk async for chunk in resp])


async def read_whole(resp: UpstreamResponse) -> bytes:
    return await resp.read()


READERS = [pytest.param(read_whole, id="read"), pytest.param(read_by_iterating, id="iterate")]


# --- keep-alive ------------------------------------------------------------------------------


def test_build_refuses_an_unknown_client_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--upstream-client"):
        build("curl", 1.0, None, 1.0)


async def test_sequential_requests_reuse_one_connection(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    server = await serve(keep_alive(echo_path))
    client = clients(client_kind)
    for n in range(3):
        resp, data = await fetch(client, server, f"/v1/r{n}".encode())
        assert (resp.status, data) == (200, f"you asked /v1/r{n}".encode())
        assert resp.content_length == len(data)
        assert not resp.is_sse
    assert len(server.peers) == 1  # one TCP connection for all three
    assert len(server.peers[0].requests) == 3
    if client_kind == "httptools":
        assert len(idle(client, server)) == 1


@pytest.mark.parametrize("leave", ["release", "close"])
async def test_response_left_before_its_end_is_not_reused(
    serve: Serve, clients: MakeClient, client_kind: str, leave: str
) -> None:
    """``release()`` before the body's end, or ``close()``, drops the connection: the rest
    of that body must never be read as the next response."""

    def respond(request: Request) -> bytes:
        if request.line.startswith(b"GET /v1/partial "):
            return response(headers=[(b"Content-Length", b"100")], length=False) + b"x" * 10
        return echo_path(request)

    server = await serve(keep_alive(respond))
    client = clients(client_kind)
    resp = await client.open(server.url, b"GET", b"/v1/partial", [], b"")
    assert resp.status == 200
    getattr(resp, leave)()
    await until(lambda: server.peers[0].client_gone, "the server to see the client leave")
    resp, data = await fetch(client, server, b"/v1/next")
    assert data == b"you asked /v1/next"
    assert len(server.peers) == 2


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(response(b"bye", headers=[(b"Connection", b"close")]), id="connection-close"),
        pytest.param(response(b"bye", version=b"HTTP/1.0"), id="http-1.0"),
    ],
)
async def test_upstream_that_will_close_is_not_reused(
    serve: Serve, clients: MakeClient, client_kind: str, answer: bytes
) -> None:
    """The upstream says it will close (and, here, does not do it itself): the client
    closes that connection and opens a new one for the next request."""
    server = await serve(keep_alive(lambda _request: answer))
    client = clients(client_kind)
    resp, data = await fetch(client, server)
    assert (resp.status, data) == (200, b"bye")
    await until(lambda: server.peers[0].client_gone, "the client to close the connection")
    if client_kind == "httptools":
        assert idle(client, server) == []
    _, data = await fetch(client, server)
    assert data == b"bye"
    assert len(server.peers) == 2
    assert [len(peer.requests) for peer in server.peers] == [1, 1]


async def test_a_second_response_to_one_request_changes_nothing_and_is_not_reused(
    serve: Serve, clients: MakeClient
) -> None:
    """An upstream that answers one request twice broke protocol: the first answer is the
    response (status, headers, body untouched by the second) and the connection is dropped.
    """
    first = response(b"first", headers=[(b"X-Which", b"1")])
    second = response(b"second!", status=b"500 Oops", headers=[(b"X-Which", b"2")])
    server = await serve(keep_alive(lambda _request: [first + second]))
    client = clients("httptools")
    resp, data = await fetch(client, server)
    assert (resp.status, data, resp.content_length) == (200, b"first", 5)
    assert (b"X-Which", b"2") not in resp.raw_headers
    await until(lambda: server.peers[0].client_gone, "the client to drop the connection")
    assert idle(client, server) == []


async def test_pools_of_endpoints_with_nothing_idle_are_forgotten(
    serve: Serve, clients: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Endpoints come and go: past the bound, pools with no idle connection are dropped,
    so the client's map does not grow with every address ever seen (white-box)."""
    monkeypatch.setattr(up, "_MAX_POOLS", 2)
    server = await serve(keep_alive(echo_path))
    client = httptools(clients("httptools"))
    await fetch(client, server)  # keeps one idle connection: its pool stays
    for port in (1, 2, 3):  # refused: their pools hold nothing
        with pytest.raises(Refused):
            await client.open(f"http://127.0.0.1:{port}", b"GET", b"/v1/x", [], b"")
    assert server.url in client._pools
    assert len(client._pools) <= 2


async def test_https_endpoint_is_verified_and_kept_alive(serve: Serve, certs: Path) -> None:
    """An ``https://`` endpoint: TLS with the server name checked against the CA given,
    answers read, the connection reused; a CA that did not sign the server's certificate
    is a failed connect (Refused: the request never reached the endpoint)."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(certs / "server.crt", certs / "server.key")
    server = await serve(keep_alive(echo_path), tls)
    trusting = HttpToolsUpstream(ssl_context=ssl.create_default_context(cafile=certs / "ca.crt"))
    strangers = HttpToolsUpstream(ssl_context=ssl.create_default_context())
    try:
        for n in range(2):
            resp, data = await fetch(trusting, server, f"/v1/tls{n}".encode())
            assert (resp.status, data) == (200, f"you asked /v1/tls{n}".encode())
        assert len(server.peers) == 1
        with pytest.raises(Refused, match="certificate"):
            await fetch(strangers, server)
    finally:
        await trusting.close()
        await strangers.close()


# --- response framing ----------------------------------------------------------------------


async def test_chunked_body_is_dechunked_and_the_connection_kept(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    head = response(
        headers=[(b"Content-Type", b"text/event-stream; charset=utf-8"),
                 (b"Transfer-Encoding", b"chunked")],
        length=False,
    )  # fmt: skip
    pieces = [head, b"5\r\nhello\r\n", b"7;ext=1\r\n, world\r\n", b"1\r\n!\r\n", b"0\r\n\r\n"]
    server = await serve(keep_alive(lambda _request: pieces))
    client = clients(client_kind)
    for _ in range(2):
        async with asyncio.timeout(GUARD_S):
            resp = await client.open(server.url, b"POST", b"/v1/s", [], b"{}")
            data = await read_by_iterating(resp)
        resp.release()
        assert data == b"hello, world!"
        assert resp.content_length is None
        assert resp.is_sse
    assert len(server.peers) == 1  # the end of the chunked body was found without a close


@pytest.mark.parametrize("reader", READERS)
async def test_body_delimited_by_the_close_is_read_whole(
    serve: Serve,
    clients: MakeClient,
    client_kind: str,
    reader: Callable[[UpstreamResponse], Awaitable[bytes]],
) -> None:
    body = b"".join(b"line %d\n" % i for i in range(2000))

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        head = response(headers=[(b"Content-Type", b"text/plain")], length=False)
        await peer.send(head, body[:100], body[100:])
        peer.writer.close()

    server = await serve(handler)
    client = clients(client_kind)
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, b"GET", b"/v1/x", [], b"")
        assert resp.content_length is None
        assert await reader(resp) == body  # and it ended cleanly: no BodyError
    resp.release()
    _, data = await fetch(client, server)  # a fresh connection for the next one
    assert data == body
    assert len(server.peers) == 2


async def test_head_ends_at_the_headers(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    """A HEAD response announces a length but carries no body: it ends at the headers, and
    those 1234 bytes are never waited for nor taken from the next response."""

    def respond(request: Request) -> bytes:
        if request.method == b"HEAD":
            return response(headers=[(b"Content-Length", b"1234")], length=False)
        return echo_path(request)

    server = await serve(keep_alive(respond))
    client = clients(client_kind)
    resp, data = await fetch(client, server, b"/v1/models", method=b"HEAD")
    assert (resp.status, data, resp.content_length) == (200, b"", 1234)
    _, data = await fetch(client, server, b"/v1/after")
    assert data == b"you asked /v1/after"
    if client_kind == "httptools":
        # llhttp cannot be told a response answers a HEAD, so that connection is dropped.
        assert [len(peer.requests) for peer in server.peers] == [1, 1]
        await until(lambda: server.peers[0].client_gone, "the HEAD connection to be closed")


async def test_interim_responses_are_skipped(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    interim = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nX-Interim: 1\r\n\r\n"
    )
    final = response(b"made", status=b"201 Created", headers=[(b"X-Final", b"yes")])
    server = await serve(keep_alive(lambda _request: [interim, final]))
    client = clients(client_kind)
    for _ in range(2):
        resp, data = await fetch(client, server, method=b"POST", body=b"{}")
        assert (resp.status, data) == (201, b"made")
        assert [(n.lower(), v) for n, v in resp.raw_headers] == [
            (b"x-final", b"yes"),
            (b"content-length", b"4"),
        ]
    assert len(server.peers) == 1


# --- request framing -----------------------------------------------------------------------


async def test_request_framing(serve: Serve, clients: MakeClient, client_kind: str) -> None:
    server = await serve(keep_alive(lambda _request: response(b"ok")))
    client = clients(client_kind)
    # What the proxy forwards of a client's headers: a Host, a Content-Length and a
    # Connection of the client's never reach the client library.
    forwarded, _ = request_headers(
        [
            (b"host", b"evil.example:1"),
            (b"content-length", b"999"),
            (b"connection", b"keep-alive"),
            (b"Authorization", b"Bearer sk-test"),
            (b"x-request-id", b"abc"),
            (b"content-type", b"application/json"),
        ]
    )
    assert [n for n, _ in forwarded] == [b"authorization", b"x-request-id", b"content-type"]
    big = bytes(range(256)) * 800  # 204,800 bytes: over the client's one-write size
    await fetch(client, server, b"/v1/chat/completions?stream=1&q=a%20b", b"POST",
                b'{"a": 1}', forwarded)  # fmt: skip
    await fetch(client, server, b"/v1/completions", b"POST", b"", forwarded)
    await fetch(client, server, b"/v1/models", b"GET")
    await fetch(client, server, b"/v1/embeddings", b"POST", big, forwarded)
    small, empty, get, large = server.requests

    assert small.line == b"POST /v1/chat/completions?stream=1&q=a%20b HTTP/1.1"
    assert empty.line == b"POST /v1/completions HTTP/1.1"
    assert get.line == b"GET /v1/models HTTP/1.1"
    for request in server.requests:
        # The endpoint's address, never one a request could choose.
        assert request.values(b"host") == [server.authority]
        assert request.values(b"transfer-encoding") == []
    for request in (small, empty, large):
        for name, value in forwarded:
            assert request.values(name) == [value]
    assert (small.values(b"content-length"), small.body) == ([b"8"], b'{"a": 1}')
    assert (empty.values(b"content-length"), empty.body) == ([b"0"], b"")
    assert (large.values(b"content-length"), large.body) == ([str(len(big)).encode()], big)
    assert (get.values(b"content-length"), get.body) == ([], b"")
    if client_kind == "httptools":  # nothing of its own beyond Host and Content-Length
        assert [n for n, _ in small.headers] == [b"host", *(n for n, _ in forwarded),
                                                 b"content-length"]  # fmt: skip


# --- failures ----------------------------------------------------------------------------------


async def test_refused_port_is_refused(
    clients: MakeClient, client_kind: str, refused_port: Callable[[], int]
) -> None:
    client = clients(client_kind)
    with pytest.raises(Refused) as caught:
        await client.open(f"http://127.0.0.1:{refused_port()}", b"POST", b"/v1/x", [], b"{}")
    assert caught.value.reason == "connect"


@pytest.mark.parametrize("when", ["after-the-request", "at-once"])
async def test_closed_before_any_response_byte_is_reset(
    serve: Serve, clients: MakeClient, client_kind: str, when: str
) -> None:
    async def handler(peer: Peer) -> None:
        if when == "after-the-request":
            await peer.read_request()
        peer.writer.close()

    server = await serve(handler)
    client = clients(client_kind)
    with pytest.raises(Reset) as caught:
        async with asyncio.timeout(GUARD_S):
            await client.open(server.url, b"POST", b"/v1/x", [], b"{}")
    assert caught.value.reason == "reset"


@pytest.mark.parametrize("partial", [b"", b"HTTP/1.1 2"], ids=["nothing", "partial-head"])
async def test_pooled_connection_closed_as_the_request_goes_is_retried_on_a_new_one(
    serve: Serve, clients: MakeClient, partial: bytes
) -> None:
    """The keep-alive race: the upstream closes a pooled connection just as the next
    request goes out on it. Nothing answered: the request goes again on a new connection
    (the endpoint is healthy). Part of an answer: that is a Reset, not retried."""

    async def handler(peer: Peer) -> None:
        if len(server.peers) > 1:  # a new connection: answers everything
            while await peer.read_request() is not None:
                await peer.send(response(b"fresh"))
            return
        if await peer.read_request() is not None:
            await peer.send(response(b"one"))
        if await peer.read_request() is not None:  # the next request: not answered
            if partial:
                await peer.send(partial)
            peer.writer.close()

    server = await serve(handler)
    client = clients("httptools")
    _, data = await fetch(client, server, method=b"POST", body=b"{}")
    assert data == b"one"
    if partial:
        with pytest.raises(Reset):
            await fetch(client, server, method=b"POST", body=b"{}")
        assert len(server.peers) == 1
        return
    _, data = await fetch(client, server, method=b"POST", body=b'{"n":2}')
    assert data == b"fresh"
    assert len(server.peers) == 2
    assert [r.body for r in server.requests] == [b"{}", b'{"n":2}', b'{"n":2}']


async def test_new_connection_closed_before_any_byte_is_still_a_reset(
    serve: Serve, clients: MakeClient
) -> None:
    """Only a reused connection gets the second try: on a new one, a close is the
    endpoint's doing (Reset: the proxy marks it and tries another endpoint)."""

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        peer.writer.close()

    server = await serve(handler)
    client = clients("httptools")
    with pytest.raises(Reset):
        await fetch(client, server, method=b"POST", body=b"{}")
    assert len(server.peers) == 1


async def test_garbage_is_malformed(serve: Serve, clients: MakeClient, client_kind: str) -> None:
    server = await serve(answer_then(stall, b"NOT HTTP AT ALL\r\n\r\n"))
    client = clients(client_kind)
    with pytest.raises(Malformed) as caught:
        async with asyncio.timeout(GUARD_S):
            await client.open(server.url, b"POST", b"/v1/x", [], b"{}")
    assert caught.value.reason == "broken"
    await until(lambda: server.peers[0].client_gone, "the client to drop the connection")


async def test_bad_chunk_after_the_headers_is_a_broken_body(
    serve: Serve, clients: MakeClient
) -> None:
    """httptools only: aiohttp 3.14 closes the connection but never wakes the body's
    reader, which then waits for the total timeout (forever when there is none)."""
    headers_seen = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(headers=[(b"Transfer-Encoding", b"chunked")], length=False))
        await headers_seen.wait()
        await peer.send(b"zz-not-a-size\r\nxx\r\n")
        await peer.until_client_gone()

    server = await serve(handler)
    client = clients("httptools")
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, b"POST", b"/v1/x", [], b"{}")
        headers_seen.set()
        with pytest.raises(BodyError) as caught:
            await resp.read()
    resp.close()
    assert caught.value.reason == "broken"


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            response(headers=[(b"Content-Length", b"1000")], length=False) + b'{"choices": ',
            id="content-length",
        ),
        pytest.param(
            response(headers=[(b"Transfer-Encoding", b"chunked")], length=False)
            + b"6\r\ndata: \r\n",
            id="chunked",
        ),
    ],
)
async def test_closed_mid_body_is_a_broken_body(
    serve: Serve,
    clients: MakeClient,
    client_kind: str,
    answer: bytes,
    reader: Callable[[UpstreamResponse], Awaitable[bytes]],
) -> None:
    server = await serve(answer_then(hang_up, answer))
    client = clients(client_kind)
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, b"POST", b"/v1/x", [], b"{}")
        assert resp.status == 200
        with pytest.raises(BodyError) as caught:
            await reader(resp)
    resp.close()
    assert caught.value.reason == "broken"


async def test_no_headers_in_time_is_a_header_timeout(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    server = await serve(stall_after_the_request)
    client = clients(client_kind, total_timeout_s=SHORT_TIMEOUT_S)
    with pytest.raises(HeaderTimeout) as caught:
        async with asyncio.timeout(GUARD_S):
            await client.open(server.url, b"POST", b"/v1/x", [], b"{}")
    assert caught.value.reason == "timeout"
    await until(lambda: server.peers[0].client_gone, "the client to drop the connection")
    if client_kind == "httptools":
        assert idle(client, server) == []


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            response(headers=[(b"Content-Length", b"100")], length=False) + b"part",
            id="content-length",
        ),
        pytest.param(
            response(headers=[(b"Transfer-Encoding", b"chunked")], length=False) + b"4\r\npart\r\n",
            id="chunked",
        ),
        pytest.param(response(length=False) + b"part", id="until-close"),
    ],
)
async def test_body_stalling_past_the_total_timeout_is_a_body_timeout(
    serve: Serve, clients: MakeClient, client_kind: str, answer: bytes
) -> None:
    """Whatever delimits the body: a body delimited by the close must not pass for a
    complete one when the client gave up on it."""
    server = await serve(answer_then(stall, answer))
    client = clients(client_kind, total_timeout_s=SHORT_TIMEOUT_S)
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, b"POST", b"/v1/x", [], b"{}")
        assert resp.status == 200
        with pytest.raises(BodyError) as caught:
            await resp.read()
    resp.close()
    assert caught.value.reason == "timeout"
    await until(lambda: server.peers[0].client_gone, "the client to drop the connection")


async def test_body_delimited_by_the_close_cut_by_a_reset_is_a_broken_body(
    serve: Serve, clients: MakeClient
) -> None:
    """An RST is not the end of a body delimited by the close: the body was cut short.

    httptools only: aiohttp takes any close as the end of such a body.
    """
    headers_seen = asyncio.Event()

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response(headers=[(b"Content-Type", b"text/plain")], length=False))
        await headers_seen.wait()
        await peer.send(b"part of it")
        peer.reset()

    server = await serve(handler)
    client = clients("httptools")
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, b"GET", b"/v1/x", [], b"")
        headers_seen.set()
        with pytest.raises(BodyError) as caught:
            await resp.read()
    resp.close()
    assert caught.value.reason == "broken"


# --- httptools: back-pressure, the idle pool -------------------------------------------------


async def test_slow_reader_pauses_the_upstream_and_then_gets_every_byte(
    serve: Serve, clients: MakeClient
) -> None:
    """White-box: the response's buffered byte count and the transport's reading state.

    Reading stops once more than the high-water mark is buffered; at most one socket read
    (256 KiB in asyncio's selector transport) can land on top of that.
    """
    body = bytes(range(256)) * (8 * 1024 * 1024 // 256) + b"the end"
    server = await serve(keep_alive(lambda _request: response(body)))
    client = clients("httptools")
    async with asyncio.timeout(GUARD_S):
        resp = await client.open(server.url, b"POST", b"/v1/big", [], b"{}")
    assert isinstance(resp, up._Response)
    transport = resp._conn.transport
    assert transport is not None
    bound = up._HIGH_WATER + 256 * 1024
    await until(lambda: not transport.is_reading(), "the client to stop reading")
    assert up._HIGH_WATER < resp._buffered <= bound
    got = []
    most = 0
    async with asyncio.timeout(GUARD_S):
        async for chunk in resp:
            got.append(chunk)
            most = max(most, resp._buffered)
    assert b"".join(got) == body
    assert most <= bound
    assert transport.is_reading()
    resp.release()
    _, data = await fetch(client, server, b"/v1/big")  # back in the pool, reading again
    assert data == body
    assert len(server.peers) == 1


async def test_idle_connection_is_closed_after_keepalive(serve: Serve, clients: MakeClient) -> None:
    server = await serve(keep_alive(echo_path))
    client = clients("httptools", keepalive_s=0.2)
    await fetch(client, server)
    await until(lambda: server.peers[0].client_gone, "the idle connection to be closed")
    assert idle(client, server) == []
    _, data = await fetch(client, server, b"/v1/again")
    assert data == b"you asked /v1/again"
    assert len(server.peers) == 2


async def test_close_closes_every_idle_connection(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    servers = [await serve(keep_alive(echo_path)) for _ in range(2)]
    client = clients(client_kind)
    for server in servers:
        await fetch(client, server)
    assert not any(server.peers[0].client_gone for server in servers)
    await client.close()
    await until(
        lambda: all(server.peers[0].client_gone for server in servers),
        "every server to see its idle connection closed",
    )


async def test_upstream_closing_an_idle_connection_takes_it_out_of_the_pool(
    serve: Serve, clients: MakeClient
) -> None:
    async def handler(peer: Peer) -> None:  # answers one request, then closes (its idle time)
        if (request := await peer.read_request()) is not None:
            await peer.send(echo_path(request))
            peer.writer.close()

    server = await serve(handler)
    client = clients("httptools")
    await fetch(client, server)
    await until(lambda: idle(client, server) == [], "the client to notice the close")
    _, data = await fetch(client, server, b"/v1/again")
    assert data == b"you asked /v1/again"
    assert len(server.peers) == 2


async def test_cancelled_while_waiting_for_headers_closes_the_connection(
    serve: Serve, clients: MakeClient, client_kind: str
) -> None:
    async def handler(peer: Peer) -> None:  # never answers /v1/hang
        while (request := await peer.read_request()) is not None:
            if request.line.startswith(b"POST /v1/hang "):
                await peer.until_client_gone()
                return
            await peer.send(echo_path(request))

    server = await serve(handler)
    client = clients(client_kind)
    task = asyncio.create_task(client.open(server.url, b"POST", b"/v1/hang", [], b"{}"))
    await until(lambda: server.requests, "the request to reach the server")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: server.peers[0].client_gone, "the server to see the client leave")
    if client_kind == "httptools":
        assert idle(client, server) == []
    _, data = await fetch(client, server, b"/v1/next", b"POST", b"{}")
    assert data == b"you asked /v1/next"
    assert len(server.peers) == 2
