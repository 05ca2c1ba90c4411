"""The ``/v1/*`` hot path: a raw ASGI handler over one upstream client.

Why raw ASGI: throwaway prototypes on this machine at 64 concurrent did ~4,500
requests/s as a raw ASGI handler, ~2,200 as a FastAPI route. So there is no per-request
regex, JSON re-encoding or logging here. The upstream client is :mod:`router.upstream`
(httptools by default, aiohttp as the measured peer); ``inflight bench router``
measures this module.

What is forwarded: only the methods and paths of :mod:`router.routes`' table (vLLM's
OpenAI routes plus ``--allow-route``); anything else is answered here with 400 (dot-segments
and escapes that hide them), 404 (not a forwarded route) or 405 (another method), before
the body is read, and never reaches an upstream.

Accounting rules (the reason this module exists):

* L and the slot belong to one object, the dispatcher's admission
  (:class:`router.dispatch.Admission`, which counts through the dispatcher's ``enter`` and
  ``leave``, the only writers of L): it counts the request in L, takes the slot, retries
  once elsewhere when the upstream never got the request, and gives the slot back and
  leaves L exactly once, whatever happens (normal end, upstream error, timeout, client
  gone, cancellation). This module maps what happened to HTTP and metrics;
* the client connection is watched from the start — by :mod:`router.uvicorn_protocol`'s disconnect
  hook when uvicorn runs that protocol (the router does), else by a task waiting on ASGI
  ``receive()`` for ``http.disconnect``: a client that leaves while its request waits in
  vLLM's queue cancels the request at once, which closes the upstream connection (vLLM
  aborts the sequence) and frees the slot. FastAPI's StreamingResponse only notices a
  disconnect once streaming has begun, so a queued client kept its slot until the
  upstream answered;
* ``GET``/``HEAD``/``OPTIONS`` calls (``/v1/models``, a CORS preflight) are metadata, not
  work: they never hold a slot and are not counted in L, λ or W (the seed's warm-up call
  leaked a slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from types import MappingProxyType
from typing import Any

from router.dispatch import Admission, Dispatcher
from router.errors import (
    BadPriority,
    NotDelivered,
    RequestRefused,
    RouterError,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_body,
    sse_error_event,
)
from router.metrics import NO_ENDPOINT, RouterMetrics
from router.pool import Endpoint
from router.routes import OPENAI_ROUTES, RouteTable
from router.upstream import (
    RESPONSE_DROP,
    BodyError,
    HeaderTimeout,
    HttpToolsUpstream,
    Malformed,
    RequestHeaders,
    Upstream,
    UpstreamFailure,
    UpstreamResponse,
    _Response,
)
from router.uvicorn_protocol import (
    BODY_FOLLOWS,
    CYCLE,
    DISCONNECT_HOOKS,
    Cycle,
    HookedHttpToolsProtocol,
    Hooks,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the client library sets itself
# (host, content-length) — never forwarded in either direction (a response's
# Content-Length is passed on with the body it measures).
HOP_BY_HOP = RESPONSE_DROP | {b"content-length"}
_RESPONSE_DROP = RESPONSE_DROP
_JSON_HEADERS = [(b"content-type", b"application/json")]
# A response up to this size with a Content-Length is read whole and sent in one
# message (fewer sends for ordinary completions); anything else is streamed.
_ONE_SHOT_MAX_BYTES = 256 * 1024
_CLIENT_CLOSED = 499  # the status counted for a client that left (nginx's convention)
# The last event of an OpenAI stream (vLLM writes it as its own chunk).
_SSE_DONE = b"data: [DONE]\n\n"
_SSE_DONE_CRLF = b"data: [DONE]\r\n\r\n"
# Never hold a slot, never counted in L: they ask about the server, they do not run the model.
_METADATA_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class _ClientGone(Exception):
    """The client disconnected (raised in place of the CancelledError we caused)."""


class Proxy:
    """ASGI app for ``/v1/*``; ``client_getter`` gives the shared upstream client."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        metrics: RouterMetrics,
        client_getter: Callable[[], Upstream],
        max_body_bytes: int,
        unhealthy_backoff_s: float,
        clock: Callable[[], float] = time.monotonic,
        routes: RouteTable | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.routes = routes if routes is not None else RouteTable(OPENAI_ROUTES)
        self._exact_routes = self.routes.exact_methods()
        self.pool = dispatcher.pool
        self.metrics = metrics
        self._client = client_getter
        self.max_body_bytes = max_body_bytes
        self.unhealthy_backoff_s = unhealthy_backoff_s
        self.clock = clock
        self._on_not_delivered = self._not_delivered  # bound once, not per request
        # Priority classes (--priority-class): None without, so the default path reads no
        # header and parses no body for a priority.
        plan = dispatcher.plan
        self._class_of = plan.class_of if len(plan.classes) > 1 else None
        # Token admission (router/tokens.py, router/dispatch.py): None without, so the
        # default path parses no body for a demand.
        self._demand = dispatcher.demand

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        work = method not in _METADATA_METHODS
        # Only work requests are timed and counted (received, finished, W): they are the
        # ones in L, so L = λ·W holds over the router's own series.
        t0: float | None = None
        if work:
            t0 = self.clock()
            self.metrics.received.inc()
        # raw_path is what the client sent (uvicorn's ``path`` is percent-decoded) and what
        # is forwarded: it is what the route table checks.
        path: bytes = scope.get("raw_path") or scope["path"].encode()
        allowed = self._exact_routes.get(path)  # the common case: one dict lookup
        if allowed is None or method not in allowed:
            try:
                self.routes.lookup(method, path)
            except RequestRefused as exc:
                await self._reject(send, exc.status, exc.kind, str(exc), t0, exc.allow)
                return
        headers, declared = _request_headers(scope["headers"])
        if declared > self.max_body_bytes:
            await self._reject(send, 413, "request_too_large", self._too_big(), t0)
            return
        # Through router.uvicorn_protocol's protocol the body is usually all in already: taken
        # directly from the request's cycle, else received the ASGI way.
        cycle: Cycle | None = scope.get(CYCLE)
        body = cycle.whole_body() if cycle is not None else None
        if body is None:
            body = await self._read_body(receive, send, t0)
            if body is None:
                return
        elif len(body) > self.max_body_bytes:
            await self._reject(send, 413, "request_too_large", self._too_big(), t0)
            return
        qs: bytes = scope.get("query_string", b"")
        if qs:
            path = path + b"?" + qs
        if t0 is None:
            await self._metadata(method.encode("ascii"), path, headers, body, send, cycle)
            return
        await self._work(
            method.encode("ascii"),
            path,
            headers,
            body,
            receive,
            send,
            t0,
            scope.get(DISCONNECT_HOOKS),
            cycle,
        )

    # --- request body --------------------------------------------------------------------
    async def _read_body(self, receive: Receive, send: Send, t0: float | None) -> bytes | None:
        """The whole request body, or None after answering 413 (or if the client left)."""
        limit = self.max_body_bytes
        message = await receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            body: bytes = message.get("body", b"")  # all of it in one message: the usual case
            if len(body) <= limit:
                return body
            await self._reject(send, 413, "request_too_large", self._too_big(), t0)
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            if message["type"] == "http.disconnect":
                if t0 is not None:  # received, so counted as finished too
                    self.metrics.duration.observe(self.clock() - t0)
                    self.metrics.finished(NO_ENDPOINT, _CLIENT_CLOSED)
                return None
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    await self._reject(send, 413, "request_too_large", self._too_big(), t0)
                    return None
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
            message = await receive()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_big(self) -> str:
        return f"request body larger than --max-body-bytes={self.max_body_bytes}"

    # --- work requests (hold a slot, count in L) -------------------------------------------
    async def _work(
        self,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
        receive: Receive,
        send: Send,
        t0: float,
        hooks: Hooks | None,
        cycle: Cycle | None,
    ) -> None:
        # The request's task, to cancel when the client leaves (from the protocol's cycle:
        # asyncio.current_task() costs a getpid system call a request on Python 3.11).
        task = cycle.task if cycle is not None and cycle.task is not None else None
        if task is None:
            task = asyncio.current_task()
            assert task is not None
        # One object a request: the disconnect watch and the admission's opener (a closure
        # over the request would cost a cell per variable, each a tracked object for the
        # garbage collector).
        request = _Request(task, self, method, path, headers, body)
        lost = request.lost
        watcher: asyncio.Future[None] | None = None
        if hooks is not None:  # router.uvicorn_protocol's protocol: told of a disconnect, no task
            hooks.add(lost)
        else:
            watcher = asyncio.ensure_future(_watch_disconnect(receive, request))
        # The admission owns L and the slot (router.dispatch): it is left, and the slot
        # given back, exactly once whichever way this ends (``leave`` in the finally, or
        # by ``enter`` itself when entering fails).
        cls = 0
        if self._class_of is not None:
            try:
                cls = self._class_of(request_priority(headers, body))
                self.dispatcher.classes[cls].received += 1
            except BadPriority as exc:
                if hooks is not None:
                    hooks.discard(lost)
                if watcher is not None:
                    watcher.cancel()
                await self._reject(send, exc.status, exc.kind, str(exc), t0)
                return
        tokens = self._demand(path, body) if self._demand is not None else 0
        admission = Admission(self.dispatcher, request.open, self._on_not_delivered, cls, tokens)
        try:
            await self._run(admission, request, send, t0, cycle)
        finally:
            if hooks is not None:
                hooks.discard(lost)
            if watcher is not None:
                watcher.cancel()

    async def _run(
        self,
        admission: Admission[UpstreamResponse],
        request: _Watch | _Fast,
        send: Send,
        t0: float,
        cycle: Cycle | None,
        first: BaseException | None = None,
        entered: bool = False,
    ) -> None:
        """A work request from its admission to its end: enter (``entered``: entered
        already, by the fast path, whose first send failed with ``first`` or whose
        response is ``admission.response``), relay, leave, count."""
        code = 0
        try:
            try:
                if not entered:
                    await admission.enter()
                elif first is not None:
                    assert isinstance(request, _Fast)
                    await self._recover(admission, request, first)
            except RouterError as exc:  # no slot held any more
                admission.leave()
                code = exc.status
                await self._reply_error(send, exc.status, exc.kind, str(exc), exc.retry_after_s)
                self.metrics.ttfb.observe(self.clock() - t0)
            else:
                try:
                    ep = admission.ep
                    assert ep is not None
                    code = await self._relay(ep, admission.response, send, t0, request, cycle)
                finally:
                    admission.leave()
        except asyncio.CancelledError:  # the client left, even while told of an error
            if not request.gone:
                raise
            assert request.task is not None
            request.task.uncancel()
            # A response relayed to its end (an SSE stream up to ``data: [DONE]``) is not a
            # client that left, even if the client closed before the upstream's last bytes.
            code = request.finished or _CLIENT_CLOSED
        except _ClientGone:
            code = request.finished or _CLIENT_CLOSED
        finally:
            admission.leave()  # (once: entering, or the relay's end, may have left)
            if admission.retried:
                self.metrics.retries.inc()
            if code:
                ep = admission.ep
                self.metrics.duration.observe(self.clock() - t0)
                self.metrics.finished(ep.label if ep is not None else NO_ENDPOINT, code)

    async def _recover(
        self, admission: Admission[UpstreamResponse], request: _Fast, first: BaseException
    ) -> None:
        """The fast path's first send failed with ``first`` before the response headers:
        what ``enter`` does when its opener raises that (the client's own resend on a new
        connection, then the admission's retry elsewhere)."""
        ep = admission.ep
        assert ep is not None and request.resp is not None
        client = self._client()
        assert isinstance(client, HttpToolsUpstream)
        try:
            try:
                admission.response = await client.resend(request.resp, first)
            except (HeaderTimeout, Malformed) as exc:
                raise self._open_failed(ep, exc) from exc
        except NotDelivered as exc:
            await admission.retry(exc)

    async def _open(
        self,
        ep: Endpoint,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
    ) -> UpstreamResponse:
        """Send the request; return the response once its headers are in.

        NotDelivered (refused, reset: retryable) passes through to the caller; a header
        timeout becomes UpstreamTimeout and anything else (a reply that is not HTTP, say)
        becomes UpstreamUnavailable, so no foreign error escapes to uvicorn as an uncounted
        500.
        """
        try:
            return await self._client().open(ep.url, method, path, headers, body)
        except (HeaderTimeout, Malformed) as exc:
            raise self._open_failed(ep, exc) from exc

    async def _resume(self, request: _Fast, first: BaseException | None) -> None:
        """A fast request on in its task (:meth:`_Fast._continue`)."""
        admission = request.adm
        assert admission is not None
        try:
            send: Send = request.send  # type: ignore[assignment]
            await self._run(admission, request, send, request.t0, request, first, True)
        finally:
            request._state = _OVER
            request.task = None
            request._drop()

    def _open_failed(self, ep: Endpoint, exc: HeaderTimeout | Malformed) -> RouterError:
        """What a failure to open the upstream request becomes (counted)."""
        if isinstance(exc, HeaderTimeout):
            self.metrics.upstream_error(ep.label, "timeout")
            return UpstreamTimeout(f"upstream {ep.label} sent no response headers in time")
        self.metrics.upstream_error(ep.label, "broken")
        return UpstreamUnavailable(f"upstream {ep.label} failed: {exc}")

    # --- the fast path (router.uvicorn_protocol's FAST_ROUTES): no ASGI, no task ------
    def fast_routes(self) -> dict[bytes, dict[bytes, Proxy]]:
        """router.uvicorn_protocol's ``FAST_ROUTES`` for this proxy: the table's exact paths and
        their work methods (metadata ones stay on the ASGI way)."""
        out: dict[bytes, dict[bytes, Proxy]] = {}
        for path, methods in self._exact_routes.items():
            work = {m.encode("ascii"): self for m in methods if m not in _METADATA_METHODS}
            if work:
                out[path] = work
        return out

    def fast_request(
        self,
        protocol: HookedHttpToolsProtocol,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        http_version: str,
        keep_alive: bool,
    ) -> _Fast | None:
        """A work request on a route of the table (router.uvicorn_protocol calls this when its
        headers are in): a :class:`_Fast`, or None for the ASGI way (a chunked body or one
        declared over ``--max-body-bytes``: answered there as ever; another upstream
        client)."""
        forward, declared, chunked = _forward_headers(headers)
        if chunked or declared > self.max_body_bytes:
            return None
        return _Fast(protocol, self, method, path, headers, forward, http_version, keep_alive)

    def _not_delivered(self, ep: Endpoint, exc: NotDelivered) -> None:
        """An endpoint did not take the request: count it, and send nothing there until a
        health check passes after the back-off."""
        self.metrics.upstream_error(ep.label, exc.reason)
        self.pool.mark_unhealthy(ep, self.clock(), self.unhealthy_backoff_s)

    async def _relay(
        self,
        ep: Endpoint,
        resp: UpstreamResponse,
        send: Send,
        t0: float | None,
        watch: _Watch | _Fast,
        cycle: Cycle | None = None,
    ) -> int:
        """Pass the upstream response through; end it cleanly if the upstream breaks.

        An ordinary response (a Content-Length up to ``_ONE_SHOT_MAX_BYTES``, not SSE) is
        read whole first and then sent as one message pair marked
        :data:`router.uvicorn_protocol.BODY_FOLLOWS`: status line, headers and body in one write. If
        the upstream breaks inside it, nothing was sent yet, so the client gets a 502 of
        ours. Anything else is streamed as it comes.

        A failed ``send`` (uvicorn's ClientDisconnected is an OSError) raises _ClientGone.
        """
        clean = False
        try:
            status = resp.status
            is_sse = resp.is_sse
            length = resp.content_length
            if length is not None and length <= _ONE_SHOT_MAX_BYTES and not is_sse:
                try:
                    data = await resp.read()
                except BodyError as exc:
                    self.metrics.upstream_error(ep.label, exc.reason)
                    watch.done = True
                    message = f"upstream {ep.label} failed mid-response"
                    await self._reply_error(send, 502, "upstream_broken", message)
                    if t0 is not None:
                        self.metrics.ttfb.observe(self.clock() - t0)
                    return 502
                watch.done = True
                if cycle is None or not cycle.respond(
                    status, _response_block(resp.raw_headers), data
                ):
                    await send(
                        {
                            "type": "http.response.start",
                            "status": status,
                            "headers": _response_headers(resp.raw_headers),
                            BODY_FOLLOWS: True,
                        }
                    )
                    await send({"type": "http.response.body", "body": data})
                if t0 is not None:
                    self.metrics.ttfb.observe(self.clock() - t0)
                clean = True
                return status
            if (
                length is None
                and cycle is not None
                and cycle.stream_start(status, _response_block(resp.raw_headers))
            ):
                code = await self._stream(ep, resp, cycle, t0, watch, status, is_sse)
                clean = code == status
                return code
            headers = _response_headers(resp.raw_headers)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            if t0 is not None:
                self.metrics.ttfb.observe(self.clock() - t0)
            try:
                if is_sse:
                    async for chunk in resp:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        if chunk.endswith(_SSE_DONE) or chunk.endswith(_SSE_DONE_CRLF):
                            # The OpenAI stream's last event is relayed: whatever happens
                            # to the client now, this response reached its end.
                            watch.finished = status
                else:
                    async for chunk in resp:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                watch.done = True
                await send({"type": "http.response.body", "body": b""})
                clean = True
            except BodyError as exc:
                # The upstream broke after we sent bytes: end the client's response cleanly
                # (a stream with an SSE error event). A body with a Content-Length cannot
                # end early: it is left short, and uvicorn closes the connection, so the
                # client sees it cut off.
                self.metrics.upstream_error(ep.label, exc.reason)
                watch.done = True
                if length is None:
                    message = f"upstream {ep.label} failed mid-response"
                    tail = sse_error_event("upstream_broken", message) if is_sse else b""
                    await send({"type": "http.response.body", "body": tail})
                return 502
            return status
        except OSError as exc:
            raise _ClientGone() from exc
        finally:
            if clean:
                resp.release()
            else:
                resp.close()  # drop the connection: the upstream sees the client leave

    async def _stream(
        self,
        ep: Endpoint,
        resp: UpstreamResponse,
        cycle: Cycle,
        t0: float | None,
        watch: _Watch | _Fast,
        status: int,
        is_sse: bool,
    ) -> int:
        """:meth:`_relay`'s streaming without a Content-Length (SSE) through the cycle's
        direct calls, its start already written: a chunk a write, no message dict and no
        ``send`` coroutine an event."""
        if t0 is not None:
            self.metrics.ttfb.observe(self.clock() - t0)
        flow = cycle.flow
        chunk_out = cycle.stream_chunk
        try:
            async for chunk in resp:
                if flow.write_paused:
                    await flow.drain()  # the client reads slower than the upstream writes
                chunk_out(chunk)
                if is_sse and (chunk.endswith(_SSE_DONE) or chunk.endswith(_SSE_DONE_CRLF)):
                    # The OpenAI stream's last event is relayed: whatever happens to the
                    # client now, this response reached its end.
                    watch.finished = status
            watch.done = True
            cycle.stream_end(b"")
            return status
        except BodyError as exc:
            # The upstream broke after we sent bytes: end the client's response cleanly
            # (an SSE stream with an error event).
            self.metrics.upstream_error(ep.label, exc.reason)
            watch.done = True
            message = f"upstream {ep.label} failed mid-response"
            cycle.stream_end(sse_error_event("upstream_broken", message) if is_sse else b"")
            return 502

    # --- metadata requests (no slot, not in L, not timed) -----------------------------------
    async def _metadata(
        self,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
        send: Send,
        cycle: Cycle | None,
    ) -> None:
        """``GET /v1/models`` and the like: any ready endpoint, no slot taken."""
        ep = self.pool.choose(below_slots=False)
        if ep is None:
            await self._reply_error(send, 503, "no_ready_endpoint", "no ready endpoint", 1)
            return
        try:
            resp = await self._open(ep, method, path, headers, body)
        except NotDelivered as exc:
            self._not_delivered(ep, exc)
            message = f"upstream {ep.label} {exc.reason}"
            await self._reply_error(send, 502, "upstream_unavailable", message)
            return
        except RouterError as exc:
            await self._reply_error(send, exc.status, exc.kind, str(exc))
            return
        with contextlib.suppress(_ClientGone):
            await self._relay(ep, resp, send, None, _Watch(), cycle)

    # --- errors answered by the router ----------------------------------------------------
    async def _reject(
        self,
        send: Send,
        status: int,
        kind: str,
        message: str,
        t0: float | None,
        allow: bytes | None = None,
    ) -> None:
        """Answer an error; for a work request (``t0`` set) also count and time it."""
        await self._reply_error(send, status, kind, message, allow=allow)
        if t0 is not None:
            now = self.clock()
            self.metrics.ttfb.observe(now - t0)
            self.metrics.duration.observe(now - t0)
            self.metrics.finished(NO_ENDPOINT, status)

    async def _reply_error(
        self,
        send: Send,
        status: int,
        kind: str,
        message: str,
        retry_after_s: int | None = None,
        allow: bytes | None = None,
    ) -> None:
        body = error_body(status, kind, message)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        if retry_after_s is not None:
            headers.append((b"retry-after", str(retry_after_s).encode()))
        if allow is not None:
            headers.append((b"allow", allow))
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        except OSError:
            pass  # client already gone


class _Watch:
    """Shared between a request and whatever tells it the client left."""

    __slots__ = ("done", "finished", "gone", "task")

    def __init__(self, task: asyncio.Task[Any] | None = None) -> None:
        self.task = task  # None: nothing to cancel (metadata calls)
        self.gone = False  # the client left and the request was cancelled
        self.done = False  # the final body message is being sent: nothing left to cancel
        # The status, once the client has had the whole response as the API defines it
        # (an SSE stream's ``data: [DONE]``): a disconnect after it is not a 499.
        self.finished = 0

    def lost(self) -> None:
        """The client connection is gone: cancel the request (once), unless it is ending."""
        if not self.done and not self.gone and self.task is not None:
            self.gone = True
            self.task.cancel()


class _Request(_Watch):
    """A work request: its watch, and what the admission's opener sends (``open``)."""

    __slots__ = ("_body", "_headers", "_method", "_path", "_proxy")

    def __init__(
        self,
        task: asyncio.Task[Any],
        proxy: Proxy,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
    ) -> None:
        super().__init__(task)
        self._proxy = proxy
        self._method = method
        self._path = path
        self._headers = headers
        self._body = body

    def open(self, ep: Endpoint) -> Awaitable[UpstreamResponse]:
        """The admission's opener: send this request to ``ep``."""
        return self._proxy._open(ep, self._method, self._path, self._headers, self._body)


class _NoEvent:
    """A fast request's ``message_event``: nobody waits on it."""

    __slots__ = ()

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def is_set(self) -> bool:
        return True


_NO_EVENT: Any = _NoEvent()
# A fast request's ``scope`` (what Cycle's methods read of it: the method).
_FAST_SCOPES: dict[bytes, Any] = {}

# Where a fast request is.
_WAITING = 0  # for its body or its turn
_UPSTREAM = 1  # sent upstream, told by the upstream client (no task)
_TASK = 2  # in a task (a large sized body, or recovering from a failed send)
_OVER = 3  # answered, or handed to the ASGI way
_STREAM = 4  # relaying a stream (no Content-Length), told by the upstream client


def _fast_scope(method: bytes) -> Any:
    scope = _FAST_SCOPES.get(method)
    if scope is None:
        scope = _FAST_SCOPES[method] = MappingProxyType({"method": method.decode("ascii")})
    return scope


class _Fast(Cycle):
    """A work request on the fast path (router.uvicorn_protocol's ``FAST_ROUTES``): its cycle (the
    client side), its watch, and the upstream client's listener, in one object.

    Its body in and its turn come (:meth:`activate`, :meth:`complete`), it enters its
    admission and sends upstream without a coroutine when a slot is free and a pooled
    connection idle (else it goes the ASGI way, :meth:`HookedHttpToolsProtocol.as_asgi`,
    as if it had never been here); an ordinary response (a Content-Length up to
    ``_ONE_SHOT_MAX_BYTES``, not SSE) is written when whole, the slot given back and the
    request counted, all in the upstream client's callback. Anything else (a stream, a
    send that failed before the response headers) continues in a task, through
    :meth:`Proxy._run` as a request of the ASGI way would. Accounting as ``_work``'s:
    the same metrics, L and slot through the same admission."""

    is_fast = True
    message_event = _NO_EVENT
    access_log = False
    waiting_for_100_continue = False
    # uvicorn's loggers (the same for every protocol): read by Cycle's error paths only.
    logger = logging.getLogger("uvicorn.error")
    access_logger = logging.getLogger("uvicorn.access")
    gone = False
    done = False
    finished = 0
    ep: Endpoint | None = None
    resp: _Response | None = None
    adm: Admission[UpstreamResponse] | None = None
    _state = _WAITING
    _active = False
    _body_in = False
    _parts: list[bytes] | None = None
    _sse = False  # relaying an SSE stream (its [DONE] is looked for)
    _payload = b""

    def __init__(
        self,
        protocol: HookedHttpToolsProtocol,
        proxy: Proxy,
        method: bytes,
        path: bytes,
        raw_headers: list[tuple[bytes, bytes]],
        headers: RequestHeaders,
        http_version: str,
        keep_alive: bool,
    ) -> None:
        # Not Cycle's __init__: what its write methods read, set directly.
        scope = _FAST_SCOPES.get(method)
        self.scope = scope if scope is not None else _fast_scope(method)
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.default_headers = protocol.server_state.default_headers
        self.on_response = protocol.on_response_complete
        self.keep_alive = keep_alive
        self._proto = protocol
        self._proxy = proxy
        self._method = method
        self._path = path
        self._raw = raw_headers
        self._headers = headers
        self._version = http_version
        self.t0 = proxy.clock()

    # --- router.uvicorn_protocol's FastRequest -------------------------------------------
    def feed(self, body: bytes) -> None:
        if not self._payload:
            self._payload = body
        elif self._parts is None:
            self._parts = [self._payload, body]
        else:
            self._parts.append(body)

    def complete(self) -> None:
        self._body_in = True
        if self._parts is not None:
            self._payload = b"".join(self._parts)
            self._parts = None
        if self._active:
            self._begin()

    def activate(self) -> None:
        self._active = True
        if self._body_in:
            self._begin()

    def lost(self) -> None:
        if self.response_complete:
            return
        self.disconnected = True  # (Cycle's: nothing more is written)
        state = self._state
        if state == _TASK:  # as _Watch.lost: cancel the task, unless the response is ending
            if not self.done and not self.gone and self.task is not None:
                self.gone = True
                self.task.cancel()
            return
        proxy = self._proxy
        if state == _WAITING:
            # Left before its body was all in: received and finished, as the ASGI way
            # counts a client that leaves while its body is read.
            self._state = _OVER
            proxy.metrics.received.inc()
            proxy.metrics.duration.observe(proxy.clock() - self.t0)
            proxy.metrics.finished(NO_ENDPOINT, _CLIENT_CLOSED)
            self._drop()
        elif state in (_UPSTREAM, _STREAM):
            # Waiting for the upstream, or relaying its stream: closing its connection is
            # what cancelling the request's task does (the upstream sees the client leave).
            # A stream relayed up to its ``data: [DONE]`` is not a client that left.
            self._state = _OVER
            resp, adm, ep = self.resp, self.adm, self.ep
            assert resp is not None and adm is not None and ep is not None
            resp.listener = None
            resp.close()
            adm.leave()
            proxy.metrics.duration.observe(proxy.clock() - self.t0)
            proxy.metrics.finished(ep.label, self.finished or _CLIENT_CLOSED)
            self._drop()

    # --- the start -----------------------------------------------------------------------
    def _begin(self) -> None:
        if self._state != _WAITING:
            return
        proxy = self._proxy
        client = proxy._client()
        if type(client) is not HttpToolsUpstream:  # (aiohttp) the ASGI way
            self._asgi()
            return
        body = self._payload
        cls = 0
        class_of = proxy._class_of
        if class_of is not None:
            try:
                cls = class_of(request_priority(self._headers, body))
            except BadPriority:
                self._asgi()  # answered (400) and counted there
                return
        demand = proxy._demand
        adm = Admission(
            proxy.dispatcher,
            self.open,
            proxy._on_not_delivered,
            cls,
            demand(self._path, body) if demand is not None else 0,
        )
        ep = adm.enter_now()
        if ep is None:  # held, or no endpoint: the ASGI way
            self._asgi()
            return
        resp = client.send_pooled(ep.url, self._method, self._path, self._headers, body, self)
        if resp is None:  # no idle pooled connection: the ASGI way, slot given back
            adm.leave()
            self._asgi()
            return
        proxy.metrics.received.inc()
        if class_of is not None:
            proxy.dispatcher.classes[cls].received += 1
        self._state = _UPSTREAM
        adm.response = resp
        self.adm = adm
        self.ep = ep
        self.resp = resp

    def open(self, ep: Endpoint) -> Awaitable[UpstreamResponse]:
        """The admission's opener (its retry): send this request to ``ep``."""
        return self._proxy._open(ep, self._method, self._path, self._headers, self._payload)

    def _asgi(self) -> None:
        self._state = _OVER
        proto = self._proto
        self._drop()
        proto.as_asgi(self, self._method, self._path, self._raw, self._version, self._payload)

    def _drop(self) -> None:
        """Let go of what refers back to this request (no reference cycle to collect)."""
        self.adm = None
        self.resp = None
        self.on_response = _no_response
        self._proto = None  # type: ignore[assignment]

    # --- router.upstream's Listener ---------------------------------------------------------
    def upstream_headers(self, response: _Response) -> None:
        length = response.content_length
        if length is None:  # a stream: relayed as it comes
            self._stream_start(response)
            self.upstream_data(response)
        elif length > _ONE_SHOT_MAX_BYTES or response.is_sse:  # streamed in a task
            response.listener = None
            self._continue(None)

    def upstream_data(self, response: _Response) -> None:
        """A stream's chunks so far, relayed (as :meth:`Proxy._stream`): each written at
        once, the upstream no longer read while the client's buffer is full."""
        chunks = response.drain()
        if self._sse:
            for chunk in chunks:
                self.stream_chunk(chunk)
                if chunk.endswith(_SSE_DONE) or chunk.endswith(_SSE_DONE_CRLF):
                    # The OpenAI stream's last event is relayed: whatever happens to the
                    # client now, this response reached its end.
                    self.finished = response.status
        else:
            for chunk in chunks:
                self.stream_chunk(chunk)
        if self.flow.write_paused and not self.disconnected:
            response.pause()  # until the client's buffer drains (writable)

    def writable(self) -> None:
        resp = self.resp
        if self._state == _STREAM and resp is not None:
            resp.resume()

    def _stream_start(self, response: _Response) -> None:
        self._state = _STREAM
        self._sse = response.is_sse
        if not self.disconnected:
            block = response.block
            if block is None:
                block = _response_block(response.raw_headers)
            self.write_stream_head(response.status, block)
        self._proxy.metrics.ttfb.observe(self._proxy.clock() - self.t0)

    def upstream_done(self, response: _Response) -> None:
        length = response.content_length
        if length is None:  # a stream's end (its start too, if it came at once)
            if self._state != _STREAM:
                self._stream_start(response)
            self.upstream_data(response)
            self._state = _OVER
            self.done = True
            if not self.disconnected:
                self.write_stream_end(b"")
            self._end(response, True, response.status, ttfb=False)
            return
        if length > _ONE_SHOT_MAX_BYTES or response.is_sse:  # streamed in a task
            self._continue(None)
            return
        self._state = _OVER
        self.done = True
        data = response.take()
        status = response.status
        if not self.disconnected:
            block = response.block
            if block is None:
                block = _response_block(response.raw_headers)
            self.write_whole(status, block, data)
        self._end(response, True, status)

    def upstream_failed(self, response: _Response, exc: UpstreamFailure) -> None:
        if not response.has_headers:
            self._continue(exc)
            return
        if self._state == _STREAM:
            # The upstream broke after we sent bytes: the chunks in before it are relayed,
            # then the stream ends cleanly (an SSE error event), as Proxy._stream ends it.
            self.upstream_data(response)
            ep = self.ep
            assert ep is not None
            self._state = _OVER
            self._proxy.metrics.upstream_error(ep.label, exc.reason)
            self.done = True
            message = f"upstream {ep.label} failed mid-response"
            if not self.disconnected:
                tail = sse_error_event("upstream_broken", message) if self._sse else b""
                self.write_stream_end(tail)
            self._end(response, False, 502, ttfb=False)
            return
        length = response.content_length
        if length is None or length > _ONE_SHOT_MAX_BYTES or response.is_sse:
            # Broke before the headers were told (in the same read): a stream, relayed in
            # the task up to the break as Proxy._relay relays one.
            self._continue(None)
            return
        # An ordinary response broke before it was whole: nothing sent yet, so a 502 of
        # ours (as _relay).
        ep = self.ep
        assert ep is not None
        self._state = _OVER
        self._proxy.metrics.upstream_error(ep.label, exc.reason)
        self.done = True
        body = error_body(502, "upstream_broken", f"upstream {ep.label} failed mid-response")
        if not self.disconnected:
            self.write_whole(502, _error_block(body), body)
        self._end(response, False, 502)

    def _end(self, response: _Response, clean: bool, code: int, ttfb: bool = True) -> None:
        """After the response was written: the upstream connection back to its pool
        (``clean``) or closed, the slot given back, the request counted (as ``_work``;
        ``ttfb``: its first byte is now), then the connection's next request."""
        proxy, adm, ep = self._proxy, self.adm, self.ep
        assert adm is not None and ep is not None
        metrics = proxy.metrics
        now = proxy.clock()
        if ttfb:
            metrics.ttfb.observe(now - self.t0)
        if clean:
            response.release()
        else:
            response.close()
        adm.leave()
        metrics.duration.observe(now - self.t0)
        metrics.finished(ep.label, code)
        on_response = self.on_response
        self._drop()
        if not self.disconnected:
            on_response()

    def _continue(self, first: BaseException | None) -> None:
        """On in a task: relay a stream, or recover from a send that failed (``first``)."""
        self._state = _TASK
        proto = self._proto
        self.task = task = proto.loop.create_task(self._proxy._resume(self, first))
        task.add_done_callback(proto.tasks.discard)
        proto.tasks.add(task)


def _no_response() -> None:
    """A finished fast request's ``on_response``."""


def _error_block(body: bytes) -> bytes:
    """The header block of an error answered by the router (as :meth:`_reply_error`)."""
    return b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)


def _forward_headers(
    headers: list[tuple[bytes, bytes]],
) -> tuple[RequestHeaders, int, bool]:
    """:func:`_request_headers` of headers whose names are lowercase already (uvicorn's),
    and whether the body is chunked (a Transfer-Encoding)."""
    out = []
    declared = 0
    chunked = False
    extra: set[bytes] | None = None
    for item in headers:
        name = item[0]
        if name in HOP_BY_HOP:
            if name == b"content-length":
                try:
                    length = int(item[1])
                except ValueError:
                    length = 0
                if length > declared:
                    declared = length
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"connection":
                extra = extra or set()
                extra.update(v.strip().lower() for v in item[1].split(b","))
            continue
        out.append(item)
    if extra:
        out = [item for item in out if item[0] not in extra]
    return out, declared, chunked


_PRIORITY_HEADER = b"x-request-priority"


def request_priority(headers: RequestHeaders, body: bytes) -> int:
    """A request's priority, vLLM's convention (lower first; 0 if absent): the
    ``x-request-priority`` header, else the JSON body's ``priority`` (parsed only when the
    body names it). BadPriority when either is not an integer.

    >>> request_priority([(b"x-request-priority", b"-1")], b"{}")
    -1
    >>> request_priority([], b'{"model": "m", "priority": 5}')
    5
    """
    for name, value in headers:
        if name == _PRIORITY_HEADER:
            try:
                return int(value)
            except ValueError:
                raise BadPriority(
                    f"x-request-priority must be an integer, got {value[:40]!r}"
                ) from None
    if b'"priority"' not in body:
        return 0
    try:
        doc = json.loads(body)
    except ValueError:
        return 0  # not JSON: the upstream answers it
    priority = doc.get("priority", 0) if isinstance(doc, dict) else 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadPriority(f"priority must be an integer, got {str(priority)[:40]!r}")
    return priority


async def _watch_disconnect(receive: Receive, watch: _Watch) -> None:
    """Without router.uvicorn_protocol's hook: wait on ASGI ``receive()`` for ``http.disconnect``
    (the body was already read) and cancel the request then."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            watch.lost()
            return


def _request_headers(raw: list[tuple[bytes, bytes]]) -> tuple[RequestHeaders, int]:
    """Forwardable request headers (hop-by-hop ones and those named in Connection
    dropped, names lowercased), and the declared Content-Length (0 if none or unreadable;
    the largest if several), in one pass."""
    out = []
    declared = 0
    extra: set[bytes] | None = None
    for item in raw:
        name = item[0]
        lname = name.lower()
        if lname in HOP_BY_HOP:
            if lname == b"content-length":
                try:
                    length = int(item[1])
                except ValueError:
                    length = 0
                if length > declared:  # the largest, if several
                    declared = length
            elif lname == b"connection":
                extra = extra or set()
                extra.update(v.strip().lower() for v in item[1].split(b","))
            continue
        out.append(item if lname == name else (lname, item[1]))
    if extra:
        out = [item for item in out if item[0] not in extra]
    return out, declared


def _response_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    extra: set[bytes] = set()
    out = []
    for name, value in raw:
        lname = name.lower()
        if lname == b"connection":
            extra.update(v.strip().lower() for v in value.split(b","))
            continue
        if lname in _RESPONSE_DROP:
            continue
        out.append((lname, value))
    if extra:
        out = [(n, v) for n, v in out if n not in extra]
    return out


def _response_block(raw: list[tuple[bytes, bytes]]) -> bytes:
    """:func:`_response_headers` as a header block (``name: value\\r\\n`` lines), in one
    pass when no Connection header names others to drop."""
    out: list[bytes] = []
    for name, value in raw:
        lname = name.lower()
        if lname in _RESPONSE_DROP:
            if lname == b"connection":
                return b"".join(b"%s: %s\r\n" % item for item in _response_headers(raw))
            continue
        out += (lname, b": ", value, b"\r\n")
    return b"".join(out)
