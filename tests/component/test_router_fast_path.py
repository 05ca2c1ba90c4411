"""The router's fast path (router.fast_path.FastCycle, on router.uvicorn_protocol's FAST_ROUTES): a
real uvicorn server with the router's app in this process, a raw HTTP upstream, raw sockets as
clients.

A work request on a table route whose endpoint has an idle pooled connection is served
without ASGI or a task; everything it can meet there (pipelining, a body in pieces, an
upstream that breaks, answers garbage or dropped its keep-alive connection, a stream, a
client that leaves) must end as the ASGI way ends it: the same answer, the same counts, the
slot given back. Each test first warms the pooled connection (the first request to an
endpoint goes the ASGI way: no idle connection yet) and checks the fast path was taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from prometheus_client import CollectorRegistry

from inflight import names
from router.app import RouterApp
from router.dispatch import Dispatcher
from router.pool import Pool
from router.routes import parse_route
from router.uvicorn_protocol import HookedHttpToolsProtocol
from tests.support import until

GUARD_S = 10.0
ROUTES = ("POST:/v1/echo", "POST:/v1/broken-body", "POST:/v1/garbage", "POST:/v1/slow",
          "POST:/v1/sse", "POST:/v1/stale", "POST:/v1/sse-broken", "POST:/v1/hop",
          "POST:/v1/sse-malformed")  # fmt: skip


@dataclass
class Upstream:
    """A raw HTTP/1.1 keep-alive upstream; its behaviour by path."""

    url: str = ""
    requests: list[str] = field(default_factory=list)
    slow_closed: asyncio.Event = field(default_factory=asyncio.Event)
    sse_closed: asyncio.Event = field(default_factory=asyncio.Event)
    sse_release: asyncio.Event = field(default_factory=asyncio.Event)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                body = await reader.readexactly(int(m.group(1))) if m else b""
                path = head.split(b" ", 2)[1].decode()
                self.requests.append(path)
                served += 1
                if not await self.answer(path, body, served, reader, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def answer(
        self,
        path: str,
        body: bytes,
        served: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False: the connection ends here."""
        if path == "/v1/stale" and served > 1:
            return False  # its keep-alive ran out as the request came: closed, no byte
        if path == "/v1/broken-body":
            writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n{"choices": ')
            await writer.drain()
            writer.transport.abort()
            return False
        if path == "/v1/garbage":
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
            return False
        if path == "/v1/slow":
            with contextlib.suppress(ConnectionError):
                await reader.read()  # until the router closes the connection
            self.slow_closed.set()
            return False
        if path == "/v1/sse-malformed":  # the head and a chunk that is not one, in one write
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\nZZZ\r\n")  # fmt: skip
            await writer.drain()
            return False
        if path in ("/v1/sse", "/v1/sse-broken"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
            writer.write(_chunk(b'data: {"n": 1}\n\n'))
            await writer.drain()
            if path == "/v1/sse-broken":
                writer.transport.abort()  # the replica dies mid-stream
                return False
            if b"done-first" in body:  # [DONE] now, the body's end later (as vLLM's)
                writer.write(_chunk(b"data: [DONE]\n\n"))
                await writer.drain()
            # until released, or the router closes the connection (the client left)
            closed = asyncio.ensure_future(reader.read())
            release = asyncio.ensure_future(self.sse_release.wait())
            await asyncio.wait([closed, release], return_when=asyncio.FIRST_COMPLETED)
            release.cancel()
            if closed.done():
                self.sse_closed.set()
                return False
            closed.cancel()
            if b"done-first" not in body:
                writer.write(_chunk(b"data: [DONE]\n\n"))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if path == "/v1/hop":  # hop-by-hop response headers, names in any case
            named = b"Connection: X-Hop\r\nX-Hop: secret\r\n" if b"named" in body else b""
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\n"
                         b"Proxy-Authenticate: Basic\r\nX-Kept: Yes\r\n%sTE: trailers\r\n"
                         b"\r\nok" % named)  # fmt: skip
            await writer.drain()
            return True
        out = json.dumps({"path": path, "body_len": len(body)}).encode()
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-upstream: yes\r\n"
        writer.write(head + b"content-length: %d\r\n\r\n%s" % (len(out), out))
        await writer.drain()
        return True


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@dataclass
class Router:
    app: RouterApp
    server: uvicorn.Server
    port: int
    upstream: Upstream
    registry: CollectorRegistry

    @property
    def label(self) -> str:
        return self.upstream.url.split("://")[1]

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def finished(self, code: str) -> float:
        return self.sample(names.ROUTER_REQUESTS, endpoint=self.label, code=code)

    def idle(self) -> bool:
        """L is 0 and every slot given back."""
        d = self.app.dispatcher
        return d.inflight == 0 and all(ep.inflight == 0 for ep in d.pool.endpoints())

    def protocol(self) -> HookedHttpToolsProtocol:
        (proto,) = self.server.server_state.connections
        assert isinstance(proto, HookedHttpToolsProtocol)
        return proto


@contextlib.asynccontextmanager
async def serving(
    slots: int = 4, hold_when_full: bool = False, keep_alive_s: int = 5
) -> AsyncIterator[Router]:
    upstream = Upstream()
    up = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    upstream.url = f"http://127.0.0.1:{up.sockets[0].getsockname()[1]}"
    pool = Pool(slots)
    pool.set_endpoints([upstream.url])
    registry = CollectorRegistry()
    app = RouterApp(
        Dispatcher(pool, hold_when_full=hold_when_full),
        registry,
        max_body_bytes=1000,
        unhealthy_backoff_s=60.0,
        allow_routes=[parse_route(r) for r in ROUTES],
    )
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=HookedHttpToolsProtocol, interface="asgi3",
        lifespan="on", log_level="warning", access_log=False, proxy_headers=False,
        server_header=False, date_header=False,  # as the router process
        timeout_keep_alive=keep_alive_s,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started, "uvicorn to start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Router(app, server, port, upstream, registry)
    finally:
        upstream.sse_release.set()
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        up.close()
        await up.wait_closed()


@pytest.fixture
async def router() -> AsyncIterator[Router]:
    async with serving() as r:
        yield r


def post(path: str, body: bytes = b"{}", http: bytes = b"HTTP/1.1") -> bytes:
    return b"POST %s %s\r\nhost: r\r\ncontent-type: application/json\r\ncontent-length: %d" \
        b"\r\n\r\n%s" % (path.encode(), http, len(body), body)  # fmt: skip


async def response(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    """One response with a Content-Length: status, head, body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD_S)
    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
    assert m is not None, head
    body = await asyncio.wait_for(reader.readexactly(int(m.group(1))), GUARD_S)
    return int(head[9:12]), head, body


async def warm(r: Router) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client connection, after one request that leaves a pooled upstream connection."""
    reader, writer = await connect(r)
    writer.write(post("/v1/echo"))
    status, _, _ = await response(reader)
    assert status == 200
    await until(lambda: r.idle(), "the warm-up request to end")
    return reader, writer


async def connect(r: Router) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client connection without an access log, as in the router process (uvicorn's
    access_log=False); here pytest's log capture gives uvicorn's access logger handlers,
    and a protocol with an access log never takes the fast path."""
    before = set(r.server.server_state.connections)
    reader, writer = await asyncio.open_connection("127.0.0.1", r.port)
    await until(lambda: set(r.server.server_state.connections) - before, "the connection")
    (proto,) = set(r.server.server_state.connections) - before
    assert isinstance(proto, HookedHttpToolsProtocol)
    proto.access_log = False
    return reader, writer


def fast_cycle(r: Router) -> str:
    return type(r.protocol().cycle).__name__


async def test_a_warm_request_is_served_on_the_fast_path_and_counted_alike(
    router: Router,
) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/echo", b'{"a": 12345}'))
    status, head, body = await response(reader)
    assert fast_cycle(router) == "FastCycle"
    assert status == 200 and b"x-upstream: yes\r\n" in head
    assert json.loads(body) == {"path": "/v1/echo", "body_len": 12}
    assert router.sample(names.ROUTER_REQUESTS_RECEIVED) == 2.0
    assert router.finished("200") == 2.0
    assert router.sample(names.ROUTER_REQUEST_DURATION + "_count") == 2.0
    assert router.sample(names.ROUTER_TTFB + "_count") == 2.0
    assert router.idle()
    writer.close()


async def test_pipelined_requests_are_answered_in_order(router: Router) -> None:
    reader, writer = await warm(router)
    writer.write(b"".join(post("/v1/echo", b"x" * n) for n in (1, 2, 3)))
    lengths = [json.loads((await response(reader))[2])["body_len"] for _ in range(3)]
    assert lengths == [1, 2, 3]
    assert router.finished("200") == 4.0
    assert router.idle()
    writer.close()


async def test_a_body_in_pieces_and_a_client_that_leaves_mid_body(router: Router) -> None:
    reader, writer = await warm(router)
    whole = post("/v1/echo", b"y" * 100)
    writer.write(whole[:-60])
    await writer.drain()
    await asyncio.sleep(0)  # (the rest comes later; nothing is awaited on a condition)
    writer.write(whole[-60:])
    status, _, body = await response(reader)
    assert status == 200 and json.loads(body)["body_len"] == 100
    previous = router.protocol().cycle
    writer.write(whole[:-60])  # and this client leaves before its body is all in
    await writer.drain()
    await until(lambda: router.protocol().cycle is not previous, "its headers to be in")
    assert fast_cycle(router) == "FastCycle"
    writer.close()
    await until(lambda: router.sample(names.ROUTER_REQUESTS, endpoint="none", code="499") == 1,
                "the request to be counted as a client that left")  # fmt: skip
    assert router.sample(names.ROUTER_REQUESTS_RECEIVED) == 3.0
    assert router.idle()


async def test_an_upstream_breaking_inside_a_sized_body_is_a_counted_502(
    router: Router,
) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/broken-body"))
    status, _, body = await response(reader)
    assert fast_cycle(router) == "FastCycle"
    assert status == 502 and json.loads(body)["error"]["type"] == "upstream_broken"
    assert router.finished("502") == 1.0
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=router.label,
                         reason="broken") == 1.0  # fmt: skip
    assert router.idle()
    writer.close()


async def test_garbage_from_the_upstream_is_a_counted_502(router: Router) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/garbage"))
    status, _, body = await response(reader)
    assert status == 502 and json.loads(body)["error"]["type"] == "upstream_unavailable"
    assert router.finished("502") == 1.0
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=router.label,
                         reason="broken") == 1.0  # fmt: skip
    assert router.idle()
    writer.close()


async def test_a_pooled_connection_closed_as_the_request_went_is_sent_again(
    router: Router,
) -> None:
    """The upstream closes a kept-alive connection on the request it gets next, before a
    byte of answer: the request goes once more on a new connection to the same endpoint,
    which stays ready, and nothing counts as an upstream error."""
    reader, writer = await connect(router)
    writer.write(post("/v1/stale"))  # the ASGI way: a new connection, then pooled
    assert (await response(reader))[0] == 200
    await until(lambda: router.idle(), "the first request to end")
    writer.write(post("/v1/stale"))
    status, _, body = await response(reader)
    assert fast_cycle(router) == "FastCycle"
    assert status == 200 and json.loads(body)["path"] == "/v1/stale"
    assert router.upstream.requests == ["/v1/stale"] * 3
    assert router.finished("200") == 2.0
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=router.label,
                         reason="reset") == 0.0  # fmt: skip
    assert [ep.state for ep in router.app.dispatcher.pool.endpoints()] == ["ready"]
    assert router.idle()
    writer.close()


async def test_a_client_that_leaves_while_upstream_frees_the_slot_at_once(
    router: Router,
) -> None:
    _reader, writer = await warm(router)
    writer.write(post("/v1/slow"))
    await writer.drain()
    await until(lambda: "/v1/slow" in router.upstream.requests, "the upstream to get it")
    assert fast_cycle(router) == "FastCycle"
    assert router.app.dispatcher.inflight == 1
    writer.close()
    await until(lambda: router.idle(), "the slot to be given back")
    await asyncio.wait_for(router.upstream.slow_closed.wait(), GUARD_S)  # upstream told
    assert router.finished("499") == 1.0
    assert router.sample(names.ROUTER_REQUEST_DURATION + "_count") == 2.0


async def test_a_stream_is_relayed_as_it_comes(router: Router) -> None:
    """The first event reaches the client while the upstream still holds the stream."""
    reader, writer = await warm(router)
    writer.write(post("/v1/sse", b'{"stream": true}'))
    first = await asyncio.wait_for(reader.readuntil(b'data: {"n": 1}\n\n'), GUARD_S)
    assert first.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in first
    assert not router.upstream.sse_release.is_set()
    router.upstream.sse_release.set()
    rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), GUARD_S)
    assert b"data: [DONE]" in rest
    await until(lambda: router.finished("200") == 2.0, "the stream to be counted")
    assert router.idle()
    writer.close()


async def test_http_1_0_gets_its_answer_and_the_connection_closes(router: Router) -> None:
    reader, writer = await warm(router)
    writer.close()
    await until(lambda: not router.server.server_state.connections, "the first to close")
    reader, writer = await connect(router)
    writer.write(post("/v1/echo", http=b"HTTP/1.0"))
    status, head, _ = await response(reader)
    assert status == 200 and b"connection: close\r\n" in head
    assert await asyncio.wait_for(reader.read(), GUARD_S) == b""  # closed by the router
    writer.close()


async def test_an_upstream_breaking_mid_stream_ends_it_with_an_sse_error_event(
    router: Router,
) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/sse-broken", b'{"stream": true}'))
    data = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), GUARD_S)
    assert fast_cycle(router) == "FastCycle"
    events = [e for e in re.split(rb"\r\n[0-9a-f]+\r\n", data.split(b"\r\n\r\n", 1)[1]) if e]
    assert events[0].endswith(b'data: {"n": 1}\n\n')
    assert b'"type": "upstream_broken"' in data
    assert router.finished("502") == 1.0
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=router.label,
                         reason="broken") == 1.0  # fmt: skip
    assert router.idle()
    writer.close()


async def test_a_client_that_leaves_mid_stream_is_a_499_and_the_upstream_is_told(
    router: Router,
) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/sse", b'{"stream": true}'))
    await asyncio.wait_for(reader.readuntil(b'data: {"n": 1}\n\n'), GUARD_S)
    assert fast_cycle(router) == "FastCycle"
    writer.close()
    await until(lambda: router.finished("499") == 1.0, "the stream to be counted as left")
    await asyncio.wait_for(router.upstream.sse_closed.wait(), GUARD_S)
    assert router.idle()


async def test_a_stream_read_to_done_is_finished_even_if_the_client_leaves_at_once(
    router: Router,
) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/sse", b'{"stream": true, "done-first": 1}'))
    await asyncio.wait_for(reader.readuntil(b"data: [DONE]\n\n"), GUARD_S)
    assert fast_cycle(router) == "FastCycle"
    writer.close()  # what a client that breaks out of its loop on [DONE] does
    await until(lambda: router.finished("200") == 2.0 or router.finished("499") > 0,
                "the stream to be counted")  # fmt: skip
    assert router.finished("499") == 0.0
    await asyncio.wait_for(router.upstream.sse_closed.wait(), GUARD_S)
    assert router.idle()


async def test_no_free_slot_goes_the_asgi_way_held_until_one_frees() -> None:
    """With --hold-when-full and the only slot taken (a fast request waiting upstream),
    the next request cannot enter at once: it goes the ASGI way and is held; the first
    client leaving frees the slot at once, and the held request gets it."""
    async with serving(slots=1, hold_when_full=True) as router:
        _reader_a, writer_a = await warm(router)
        writer_a.write(post("/v1/slow"))
        await until(lambda: "/v1/slow" in router.upstream.requests, "the upstream to get A")
        assert fast_cycle(router) == "FastCycle"
        reader_b, writer_b = await connect(router)
        writer_b.write(post("/v1/echo", b"b" * 7))
        await until(lambda: router.app.dispatcher.queued == 1, "B to be held")
        assert router.app.dispatcher.inflight == 2
        writer_a.close()
        status, _, body = await response(reader_b)
        assert status == 200 and json.loads(body)["body_len"] == 7
        assert router.finished("499") == 1.0 and router.finished("200") == 2.0
        await until(lambda: router.idle(), "B to end")
        writer_b.close()


@pytest.mark.parametrize("named", [False, True], ids=["plain", "connection-names-one"])
async def test_hop_by_hop_response_headers_are_not_passed_on(router: Router, named: bool) -> None:
    reader, writer = await warm(router)
    writer.write(post("/v1/hop", b'{"named": 1}' if named else b"{}"))
    status, head, body = await response(reader)
    assert fast_cycle(router) == "FastCycle"
    assert status == 200 and body == b"ok"
    lines = head.decode().lower().split("\r\n")[1:]
    names_sent = sorted(line.split(":")[0] for line in lines if line)
    assert names_sent == ["content-length", "x-kept"]
    assert "x-kept: Yes\r\n" in head.decode()
    writer.close()


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout() -> None:
    """The keep-alive timer is armed once an idle period (not made and cancelled for each
    request): a connection that goes idle after fast requests is still closed."""
    async with serving(keep_alive_s=1) as router:
        reader, writer = await warm(router)
        for n in range(3):
            writer.write(post("/v1/echo", b"z" * n))
            assert (await response(reader))[0] == 200
        assert fast_cycle(router) == "FastCycle"
        assert await asyncio.wait_for(reader.read(), GUARD_S) == b""  # closed by the router
        await until(lambda: not router.server.server_state.connections, "the close")
        writer.close()


async def test_a_stream_broken_in_the_read_of_its_head_ends_as_the_asgi_way_ends_it(
    router: Router,
) -> None:
    """Headers and a malformed chunk in one read: the stream is started and ended with
    the SSE error event (as Proxy._relay), counted 502 and an upstream error."""
    reader, writer = await warm(router)
    writer.write(post("/v1/sse-malformed", b'{"stream": true}'))
    data = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), GUARD_S)
    assert fast_cycle(router) == "FastCycle"
    assert data.startswith(b"HTTP/1.1 200") and b'"type": "upstream_broken"' in data
    await until(lambda: router.finished("502") == 1.0, "the stream to be counted")
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=router.label,
                         reason="broken") == 1.0  # fmt: skip
    assert router.idle()
    writer.close()
