"""Upstream clients: send one request to an endpoint, hand back its response to relay.

Two implementations of one small interface (:class:`Upstream` → :class:`UpstreamResponse`):

* :class:`HttpToolsUpstream` (the default): HTTP/1.1 over ``asyncio.Protocol`` with
  httptools' C response parser (llhttp, the parser uvicorn[standard] already uses) and a
  keep-alive pool per endpoint. Measured on this machine (``inflight bench upstream-client``:
  64 concurrent POSTs to nginx from one process): 67,000–73,000 requests/s against
  aiohttp's ``ClientSession`` 14,800–16,500, i.e. 14–15 µs against 61–68 µs of CPU a
  request, where the whole router now spends ~57 µs a request (17,578 requests/s at
  c=64); with aiohttp the client was most of it. ``inflight bench router`` shows the
  two routers side by side (rows ``inflight`` and ``inflight/aiohttp``).
* :class:`AiohttpUpstream` (``--upstream-client aiohttp``): one shared pooled
  ``aiohttp.ClientSession``, the first design; kept as the benchmark's peer and a fallback.
  Known limit (aiohttp 3.14.5): a malformed chunk after the headers never wakes the body's
  reader, so such a request waits for the total timeout (none by default).

Both map failures the same way, so the proxy's accounting cannot depend on the client:

* :class:`Refused` — refused, or never accepted within the connect timeout: the request
  never reached the endpoint (a :class:`router.errors.NotDelivered`: retried elsewhere);
* :class:`Reset` — the connection was reset or closed before any response byte (a
  ``NotDelivered`` too). The httptools client first sends a request once more on a new connection to
  the same endpoint when a *pooled* connection closed without a byte of answer (the
  upstream's keep-alive ran out as the request went): that endpoint is healthy;
* :class:`HeaderTimeout` — no response headers within the total timeout;
* :class:`Malformed` — the reply is not HTTP, or any other failure before the headers;
* :class:`BodyError` — the upstream broke (``reason`` ``broken``) or timed out
  (``timeout``) after the headers, while the body was being read.

Nothing in a request chooses the address: the base URL comes from discovery, the request
supplies only the path (already checked to start with ``/v1/``), headers and body.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
import httptools
from yarl import URL

from router.config import UPSTREAM_CLIENTS
from router.errors import NotDelivered

RequestHeaders = list[tuple[bytes, bytes]]

# Response headers a proxy does not pass on (RFC 9110 §7.6.1 hop-by-hop ones, and host; a
# Content-Length is passed on with the body it measures): left out of a response's
# ``block``, the header block the proxy writes.
RESPONSE_DROP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)

# Buffered body bytes at which reading from the upstream pauses until the proxy catches
# up (the client is slower than the upstream), and at which it resumes.
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
# Endpoint pools kept before the empty ones are forgotten (see HttpToolsUpstream._pool).
_MAX_POOLS = 256
# Methods that carry a body: they always get a Content-Length, even 0.
_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})


class UpstreamFailure(Exception):
    reason = "broken"


class Refused(UpstreamFailure, NotDelivered):
    reason = "connect"


class Reset(UpstreamFailure, NotDelivered):
    reason = "reset"


class HeaderTimeout(UpstreamFailure):
    reason = "timeout"


class Malformed(UpstreamFailure):
    reason = "broken"


class BodyError(UpstreamFailure):
    """The upstream failed after the response headers."""

    def __init__(self, message: str, reason: str = "broken") -> None:
        super().__init__(message)
        self.reason = reason


class UpstreamResponse(Protocol):
    """A response whose headers are in; the body is read with ``read`` or iteration."""

    status: int
    raw_headers: list[tuple[bytes, bytes]]  # as received, names in any case

    @property
    def content_length(self) -> int | None: ...

    @property
    def is_sse(self) -> bool: ...

    async def read(self) -> bytes: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def release(self) -> None:
        """The body was read to the end: the connection may be reused."""

    def close(self) -> None:
        """Drop the connection (the upstream sees the client leave)."""


class Listener(Protocol):
    """Told, without a coroutine, what becomes of a request sent with
    :meth:`HttpToolsUpstream.send_pooled` (the proxy's fast path), until it stops listening
    (sets the response's ``listener`` to None) or is told it is done or failed."""

    def upstream_headers(self, response: _Response) -> None:
        """The headers are in (status, headers, length; the body is not all in yet)."""

    def upstream_data(self, response: _Response) -> None:
        """More body is in (``response.drain()``), the headers told already, not whole."""

    def upstream_done(self, response: _Response) -> None:
        """The whole response is in (``response.take()``)."""

    def upstream_failed(self, response: _Response, exc: UpstreamFailure) -> None:
        """Failed: before the headers (``exc`` as ``open`` would raise it; the rest is
        :meth:`HttpToolsUpstream.resend`'s), or a :class:`BodyError` after them."""


class Upstream(Protocol):
    async def open(
        self, base_url: str, method: bytes, path: bytes, headers: RequestHeaders, body: bytes
    ) -> UpstreamResponse:
        """Send the request; return once the response headers are in."""

    async def close(self) -> None: ...


# =========================================================================================
# httptools
# =========================================================================================
class _Response:
    """The response on one :class:`_Connection`; fed by its parser callbacks."""

    __slots__ = (
        "_buffer",
        "_buffered",
        "_conn",
        "_error",
        "_waiter",
        "block",
        "body",
        "complete",
        "content_length",
        "failed",
        "has_headers",
        "head",
        "head_only",
        "headers_future",
        "is_sse",
        "listener",
        "raw_headers",
        "status",
        "told",
    )

    def __init__(
        self,
        conn: _Connection,
        head_only: bool,
        listener: Listener | None = None,
        head: bytes = b"",
        body: bytes = b"",
    ) -> None:
        self._conn = conn
        self.head_only = head_only
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.content_length: int | None = None  # None: chunked or delimited by the close
        self.is_sse = False
        # The headers as a block to pass on (``name: value\r\n`` lines, names lowercase,
        # RESPONSE_DROP left out); None when a Connection header names more to leave out.
        self.block: bytes | None = None
        # Awaited by ``open``; a response sent with a listener (``send_pooled``) has none:
        # its listener is told instead.
        self.headers_future: asyncio.Future[None] | None = (
            conn.loop.create_future() if listener is None else None
        )
        self.listener = listener
        self.head = head  # the request, kept to send it again (``resend``)
        self.body = body
        self.has_headers = False
        self.failed = False  # failed before the headers
        self.told = False  # the listener was told of the headers
        self._buffer: deque[bytes] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BodyError | None = None
        self.complete = False

    # --- the interface (content_length and is_sse are set with the headers) ----------

    async def read(self) -> bytes:
        if not self.complete:
            parts = [chunk async for chunk in self]
            return parts[0] if len(parts) == 1 else b"".join(parts)
        # Already whole (an ordinary completion, in one segment): no iteration.
        return self.take()

    def take(self) -> bytes:
        """The whole body of a complete response (``read`` without a coroutine)."""
        buffer = self._buffer
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._buffered = 0
        if self._conn._paused:
            self._conn.resume()
        return data

    def __aiter__(self) -> _Response:
        return self

    async def __anext__(self) -> bytes:
        while True:
            if self._buffer:
                chunk = self._buffer.popleft()
                self._buffered -= len(chunk)
                if self._buffered < _LOW_WATER:
                    self._conn.resume()
                return chunk
            if self.complete:
                raise StopAsyncIteration
            if self._error is not None:
                raise self._error
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def release(self) -> None:
        self._conn.finished(reusable=self.complete)

    def close(self) -> None:
        self._conn.finished(reusable=False)

    # --- fed by the connection -------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        self._buffer.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > _HIGH_WATER:
            self._conn.pause()
        if self._waiter is not None:
            self._wake()

    def done(self) -> None:
        self.complete = True
        if self._waiter is not None:
            self._wake()

    def fail(self, exc: UpstreamFailure) -> None:
        """The connection failed: before the headers the opener raises ``exc`` (the
        listener is told ``exc``); after them the body reader raises a :class:`BodyError`
        (the listener, if still listening, is told that)."""
        if not self.has_headers:
            if self.failed:
                return
            self.failed = True
            listener = self.listener
            if listener is not None:
                self.listener = None
                listener.upstream_failed(self, exc)
                return
            future = self.headers_future
            if future is not None and not future.done():
                future.set_exception(exc)
            return
        if self.complete or self._error is not None:
            return
        reason = "timeout" if isinstance(exc, HeaderTimeout) else "broken"
        self._error = BodyError(str(exc) or "upstream closed mid-body", reason)
        listener = self.listener
        if listener is not None:
            self.listener = None
            listener.upstream_failed(self, self._error)
            return
        self._wake()

    def tell(self) -> None:
        """After the parser's callbacks (not inside them, so the connection may go back to
        its pool): tell the listener of the headers, or of the whole response."""
        listener = self.listener
        if listener is None or not self.has_headers:
            return
        if self.complete:
            self.listener = None
            listener.upstream_done(self)
        elif not self.told:
            self.told = True
            listener.upstream_headers(self)
        elif self._buffer:
            listener.upstream_data(self)

    def drain(self) -> list[bytes]:
        """The body chunks in so far, taken (a listener relaying a stream)."""
        chunks = list(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        return chunks

    def pause(self) -> None:
        """Stop reading the upstream (the client reads slower): until :meth:`resume`."""
        self._conn.pause()

    def resume(self) -> None:
        self._conn.resume()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to an endpoint; one request at a time."""

    def __init__(self, pool: _EndpointPool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: _Response | None = None
        self.closed = False
        self.idle_timer: asyncio.TimerHandle | None = None
        self.idle_at: float | None = None  # loop time it went back to the pool; None: in use
        self.deadline: asyncio.TimerHandle | None = None
        self._paused = False
        self._eof_body = False  # a body delimited by the connection closing
        self.keep_alive = True  # cleared by the upstream (Connection: close), HEAD, errors
        self.got_bytes = False  # any byte of a response to the current request

    # --- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.response is None:
            # Bytes while idle: the upstream broke protocol; this connection is unusable.
            self._abort()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Malformed(f"upstream sent a malformed response: {exc}"))
            return
        response = self.response
        if response is not None and response.listener is not None and response.has_headers:
            response.tell()

    def eof_received(self) -> bool | None:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self.pool.forget(self)
        self._cancel_timers()
        self._cancel_idle()
        response = self.response
        if response is None:
            return
        if (
            self._eof_body
            and exc is None  # a reset cuts such a body short; only a clean close ends it
            and response.has_headers
            and not response.complete
        ):
            response.done()  # the close is the end of this body
            response.tell()
            return
        if not response.has_headers:
            response.fail(Reset("connection closed before the response headers"))
        else:
            response.fail(BodyError("upstream closed the connection mid-body"))

    # --- httptools callbacks -------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        response = self.response
        if response is not None and not response.complete:
            response.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        # (No on_message_begin: one Python call fewer a response; what it would do is here.)
        response = self.response
        if response is None:
            return
        if response.complete:
            # A second response to one request: the upstream broke protocol (it changes
            # nothing of the first; the connection is not reused).
            self.keep_alive = False
            return
        status = self.parser.get_status_code()
        if status < 200:
            response.raw_headers = []  # 1xx: informational, the real response's start over
            return
        response.status = status
        length: bytes | None = None
        chunked = False
        block: list[bytes] | None = []
        for name, value in response.raw_headers:  # one pass, names in any case
            lname = name.lower()
            if lname in RESPONSE_DROP:
                if lname == b"transfer-encoding":
                    chunked = True
                elif lname == b"connection":
                    block = None  # it may name others to leave out: the proxy sees to it
                continue
            if lname == b"content-length":
                length = value
            elif lname == b"content-type":
                response.is_sse = value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
            if block is not None:
                block += (lname, b": ", value, b"\r\n")
        if block is not None:
            response.block = b"".join(block)
        if length is not None and not chunked:
            try:
                response.content_length = int(length)
            except ValueError:
                response.content_length = None
        self._eof_body = length is None and not chunked and status not in (204, 304)
        response.has_headers = True
        future = response.headers_future
        if future is not None and not future.done():
            future.set_result(None)
        if response.head_only:
            # llhttp cannot be told this answers a HEAD: the body it would wait for never
            # comes. The response ends here, and the connection is not reused.
            self._eof_body = False
            self.keep_alive = False
            response.done()

    def on_body(self, body: bytes) -> None:
        if self.response is not None and self.response.status and not self.response.complete:
            self.response.feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        if response is None or not response.status or response.complete:
            return
        self._eof_body = False
        if not self.parser.should_keep_alive():
            self.keep_alive = False
        response.done()

    # --- used by the response and the pool ---------------------------------------------
    def send(
        self, head: bytes, body: bytes, head_only: bool, listener: Listener | None = None
    ) -> _Response:
        assert self.transport is not None
        self.got_bytes = False
        if listener is None:
            response = self.response = _Response(self, head_only)
        else:
            response = self.response = _Response(self, head_only, listener, head, body)
        if len(body) < 65536:
            self.transport.write(head + body)  # one segment for an ordinary request
        else:
            self.transport.write(head)
            self.transport.write(body)
        return response

    def start_deadline(self, timeout_s: float | None) -> None:
        if timeout_s:
            self.deadline = self.loop.call_later(timeout_s, self._on_deadline)

    def _on_deadline(self) -> None:
        self.deadline = None
        self._fail(HeaderTimeout("upstream did not finish within the timeout"))

    def finished(self, reusable: bool) -> None:
        """The proxy is done with the response: back to the pool, or closed."""
        self._cancel_timers()
        self.response = None
        if self._paused:
            self.resume()
        if reusable and self.keep_alive and not self.closed:
            self.pool.put(self)
        else:
            self._abort()

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self.transport.resume_reading()
            self._paused = False

    def _fail(self, exc: UpstreamFailure) -> None:
        response = self.response
        self._eof_body = False  # the close that follows is ours, not the end of the body
        self._abort()
        if response is not None:
            response.fail(exc)

    def _abort(self) -> None:
        self._cancel_timers()
        self._cancel_idle()
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.abort()

    def _cancel_timers(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _cancel_idle(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def idle_check(self) -> None:
        """The idle timer: close the connection once it has been idle ``keepalive_s``.

        Armed when the connection goes back to the pool with none armed, and left armed
        while it is in use (no timer made and cancelled a request): a connection in use
        when it fires is left alone (the next ``put`` arms it again), one idle for less
        than ``keepalive_s`` gets a timer for the rest."""
        self.idle_timer = None
        idle_at = self.idle_at
        if idle_at is None or self.closed:
            return
        left = idle_at + self.pool.keepalive_s - self.loop.time()
        if left > 0:
            self.idle_timer = self.loop.call_later(left, self.idle_check)
        else:
            self._abort()


class _EndpointPool:
    """Idle keep-alive connections to one endpoint, most recently used first."""

    def __init__(self, base_url: str, loop: asyncio.AbstractEventLoop, keepalive_s: float):
        parts = urlsplit(base_url)
        if parts.hostname is None:
            raise ValueError(f"endpoint {base_url!r} has no host")
        self.loop = loop
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.authority = parts.netloc.encode("latin-1")
        self.keepalive_s = keepalive_s
        self.idle: list[_Connection] = []

    def take_idle(self) -> _Connection | None:
        """The most recently used idle connection, if any (no coroutine on the hot path)."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                conn.idle_at = None  # in use (its idle timer, if armed, leaves it alone)
                return conn
        return None

    async def connect(self, timeout_s: float, ssl_context: ssl.SSLContext | None) -> _Connection:
        """A new connection."""
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(self),
                    self.host,
                    self.port,
                    ssl=ssl_context if self.tls else None,
                )
        except TimeoutError as exc:
            raise Refused(f"connect to {self.host}:{self.port} timed out") from exc
        except OSError as exc:
            raise Refused(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return conn

    def put(self, conn: _Connection) -> None:
        conn.idle_at = self.loop.time()
        if conn.idle_timer is None:
            conn.idle_timer = self.loop.call_later(self.keepalive_s, conn.idle_check)
        self.idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        with contextlib.suppress(ValueError):
            self.idle.remove(conn)

    def close(self) -> None:
        for conn in list(self.idle):
            conn._abort()
        self.idle.clear()


def _head(
    pool: _EndpointPool, method: bytes, path: bytes, headers: RequestHeaders, body: bytes
) -> bytes:
    """The request line and headers sent to the endpoint of ``pool``."""
    lines = [method, b" ", path, b" HTTP/1.1\r\nhost: ", pool.authority, b"\r\n"]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
    if body or method in _BODY_METHODS:
        lines += (b"content-length: ", str(len(body)).encode(), b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class HttpToolsUpstream:
    """The default client: see the module docstring."""

    def __init__(
        self,
        connect_timeout_s: float = 5.0,
        total_timeout_s: float | None = None,
        keepalive_s: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.total_timeout_s = total_timeout_s
        self.keepalive_s = keepalive_s
        self._ssl = ssl_context
        self._pools: dict[str, _EndpointPool] = {}

    def _pool(self, base_url: str) -> _EndpointPool:
        pool = self._pools.get(base_url)
        if pool is None:
            if len(self._pools) >= _MAX_POOLS:
                # Endpoints come and go (pods): forget the pools with nothing idle, so the
                # map does not grow with every address ever seen. In-use connections keep
                # their own reference to their pool and finish normally.
                self._pools = {url: p for url, p in self._pools.items() if p.idle}
            pool = self._pools[base_url] = _EndpointPool(
                base_url, asyncio.get_running_loop(), self.keepalive_s
            )
        return pool

    def send_pooled(
        self,
        base_url: str,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
        listener: Listener,
    ) -> _Response | None:
        """``open`` without a coroutine, on an idle pooled connection: the request is sent
        and ``listener`` told what becomes of it (:class:`Listener`). None, having sent
        nothing, when no connection to ``base_url`` is idle (then ``open``)."""
        pool = self._pools.get(base_url)
        if pool is None or pool.tls:
            return None
        conn = pool.take_idle()
        if conn is None:
            return None
        response = conn.send(
            _head(pool, method, path, headers, body), body, method == b"HEAD", listener
        )
        if self.total_timeout_s:
            conn.start_deadline(self.total_timeout_s)
        return response

    async def resend(self, failed: _Response, exc: BaseException) -> _Response:
        """What ``open`` does when the pooled connection of ``failed`` (sent by
        :meth:`send_pooled`) failed with ``exc`` before the response headers: the request
        goes once more on a new connection to the same endpoint when that connection
        answered nothing (its keep-alive ran out as the request went); else ``exc``."""
        conn = failed._conn
        conn.finished(reusable=False)
        if not isinstance(exc, Reset) or conn.got_bytes:
            raise exc
        new = await conn.pool.connect(self.connect_timeout_s, self._ssl)
        return await self._exchange(new, failed.head, failed.body, failed.head_only)

    async def open(
        self, base_url: str, method: bytes, path: bytes, headers: RequestHeaders, body: bytes
    ) -> _Response:
        pool = self._pool(base_url)
        if pool.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        head = _head(pool, method, path, headers, body)
        head_only = method == b"HEAD"
        conn = pool.take_idle()
        if conn is not None:
            # self._exchange(conn, ...), inlined: the usual path, one coroutine fewer.
            response = conn.send(head, body, head_only)
            conn.start_deadline(self.total_timeout_s)
            try:
                await response.headers_future  # type: ignore[misc]
                return response
            except Reset:
                conn.finished(reusable=False)
                if conn.got_bytes:
                    raise
                # A pooled connection that the upstream closed as the request went out (its
                # keep-alive ran out at that moment) and that answered nothing: the request
                # goes once more, on a new connection to the same endpoint. Reporting it as
                # a Reset would mark a healthy endpoint unhealthy.
            except BaseException:
                conn.finished(reusable=False)
                raise
        conn = await pool.connect(self.connect_timeout_s, self._ssl)
        return await self._exchange(conn, head, body, head_only)

    async def _exchange(
        self, conn: _Connection, head: bytes, body: bytes, head_only: bool
    ) -> _Response:
        response = conn.send(head, body, head_only)
        conn.start_deadline(self.total_timeout_s)
        try:
            await response.headers_future  # type: ignore[misc]
        except BaseException:
            conn.finished(reusable=False)
            raise
        return response

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


# =========================================================================================
# aiohttp
# =========================================================================================
class _AiohttpResponse:
    __slots__ = ("_resp", "raw_headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.raw_headers = list(resp.raw_headers)

    @property
    def content_length(self) -> int | None:
        return self._resp.content_length

    @property
    def is_sse(self) -> bool:
        return self._resp.content_type == "text/event-stream"

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _body_error(exc) from exc

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _body_error(exc) from exc

    def release(self) -> None:
        self._resp.release()

    def close(self) -> None:
        self._resp.close()


def _body_error(exc: BaseException) -> BodyError:
    reason = "timeout" if isinstance(exc, TimeoutError) else "broken"
    return BodyError(f"upstream failed mid-body: {type(exc).__name__}", reason)


def make_session(
    connect_timeout_s: float = 5.0, total_timeout_s: float | None = None, keepalive_s: float = 4.0
) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        limit=0,  # no cap: the slots, not the pool, bound concurrency
        keepalive_timeout=keepalive_s,
        ttl_dns_cache=10,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=total_timeout_s, sock_connect=connect_timeout_s),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class AiohttpUpstream:
    """``--upstream-client aiohttp``: one shared, pooled ``aiohttp.ClientSession``."""

    _URL_CACHE_SIZE = 1024

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        # Parsed upstream URLs by (endpoint, path): a handful of paths repeat forever.
        self._urls: dict[tuple[str, bytes], URL] = {}

    async def open(
        self, base_url: str, method: bytes, path: bytes, headers: RequestHeaders, body: bytes
    ) -> _AiohttpResponse:
        key = (base_url, path)
        url = self._urls.get(key)
        if url is None:
            if len(self._urls) >= self._URL_CACHE_SIZE:
                self._urls.clear()
            url = self._urls[key] = URL(base_url + path.decode("latin-1"), encoded=True)
        str_headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in headers]
        try:
            resp = await self._session.request(
                method.decode("ascii"),
                url,
                headers=str_headers,
                data=body or None,
                allow_redirects=False,
                auto_decompress=False,
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # Refused, or never accepted (a dead node's address drops SYNs): the request
            # never reached the endpoint, so it is safe to retry elsewhere.
            raise Refused(str(exc)) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise Reset(str(exc)) from exc
        except TimeoutError as exc:
            raise HeaderTimeout("no response headers in time") from exc
        except aiohttp.ClientError as exc:
            raise Malformed(type(exc).__name__) from exc
        return _AiohttpResponse(resp)

    async def close(self) -> None:
        await self._session.close()


def build(
    kind: str, connect_timeout_s: float, total_timeout_s: float | None, keepalive_s: float
) -> Upstream:
    """The upstream client named by ``--upstream-client`` (call inside the running loop)."""
    if kind == "httptools":
        return HttpToolsUpstream(connect_timeout_s, total_timeout_s, keepalive_s)
    if kind == "aiohttp":
        return AiohttpUpstream(make_session(connect_timeout_s, total_timeout_s, keepalive_s))
    choices = ", ".join(UPSTREAM_CLIENTS)
    raise ValueError(f"--upstream-client must be one of {choices}, got {kind!r}")
