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
import time
from collections.abc import Awaitable, Callable, MutableMapping
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
)
from router.fast_path import FastCycle
from router.headers import (
    JSON_HEADERS,
    forward_headers,
    request_headers,
    response_block,
    response_headers,
)
from router.metrics import ClientErrors, RouterMetrics
from router.pool import Endpoint
from router.priority import PrioritySource
from router.relay import CLIENT_CLOSED, Reply, one_shot
from router.routes import OPENAI_ROUTES, RouteTable
from router.upstream import (
    BodyError,
    HeaderTimeout,
    HttpToolsUpstream,
    Malformed,
    RequestHeaders,
    Upstream,
    UpstreamResponse,
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
        client_errors: ClientErrors | None = None,
        priority: PrioritySource | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        # router_client_errors_total (the router's, shared by its model pools' proxies).
        self.client_error = client_errors if client_errors is not None else ClientErrors()
        self.routes = routes if routes is not None else RouteTable(OPENAI_ROUTES)
        self._exact_routes = self.routes.exact_methods()
        self.pool = dispatcher.pool
        self.metrics = metrics
        self.client = client_getter
        self.max_body_bytes = max_body_bytes
        self.unhealthy_backoff_s = unhealthy_backoff_s
        self.clock = clock
        self.on_not_delivered = self._not_delivered  # bound once, not per request
        # Priority classes (--priority-class): None without, so the default path reads no
        # header and parses no body for a priority.
        plan = dispatcher.plan
        self.class_of = plan.class_of if len(plan.classes) > 1 else None
        # Where a request's priority comes from (router.priority): the trusted sources only.
        self.priority = priority if priority is not None else PrioritySource()
        # Token admission (router/tokens.py, router/dispatch.py): None without, so the
        # default path parses no body for a demand.
        self.demand = dispatcher.demand
        # Prefix-aware dispatch (router/prefix_index.py): None when off, so the default path
        # hashes no prompt.
        self.blocks_of = dispatcher.prompt_blocks

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
        headers, declared = request_headers(scope["headers"])
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
                _Watch(self, t0).ended(None, CLIENT_CLOSED)  # received: counted as finished
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
        request = _Request(task, self, t0, method, path, headers, body)
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
        if self.class_of is not None:
            try:
                cls = self.class_of(self.priority(path, headers, body))
                self.dispatcher.classes[cls].received += 1
            except BadPriority as exc:
                if hooks is not None:
                    hooks.discard(lost)
                if watcher is not None:
                    watcher.cancel()
                await self._reject(send, exc.status, exc.kind, str(exc), t0)
                return
        tokens = 0
        if self.demand is not None:
            try:
                tokens = self.demand(path, body)
            except RequestRefused as exc:  # a budget vLLM would refuse, a body unreadable
                if hooks is not None:
                    hooks.discard(lost)
                if watcher is not None:
                    watcher.cancel()
                self.client_error(exc.reason)
                await self._reject(send, exc.status, exc.kind, str(exc), t0, param=exc.param)
                return
        size = len(body)
        d = self.dispatcher
        cap = d.max_held_bytes
        if cap is not None and d.held_bytes + size > cap:
            if hooks is not None:
                hooks.discard(lost)
            if watcher is not None:
                watcher.cancel()
            self.client_error("held_bytes")
            message = (
                f"router holds {d.held_bytes} bytes of request bodies waiting for a slot; "
                f"this one's {size} would pass --max-held-bytes={cap}"
            )
            await self._reject(send, 503, "router_held_bytes_full", message, t0, retry_after_s=1)
            return
        blocks = self.blocks_of(path, body, d.prefix_block_size) if self.blocks_of else ()
        admission = Admission(d, request.open, self.on_not_delivered, cls, tokens, blocks)
        try:
            await self._run(admission, request, send, cycle, size=size)
        finally:
            if hooks is not None:
                hooks.discard(lost)
            if watcher is not None:
                watcher.cancel()

    async def _run(
        self,
        admission: Admission[UpstreamResponse],
        request: _Watch | FastCycle,
        send: Send,
        cycle: Cycle | None,
        first: BaseException | None = None,
        entered: bool = False,
        size: int = 0,
    ) -> None:
        """A work request from its admission to its end: enter (``entered``: entered
        already, by the fast path, whose first send failed with ``first`` or whose
        response is ``admission.response``), relay, leave, count. ``size``: its body's
        bytes, counted in the dispatcher's ``held_bytes`` while it is being admitted."""
        code = 0
        try:
            try:
                if not entered:
                    d = self.dispatcher
                    d.held_bytes += size
                    try:
                        await admission.enter()
                    finally:
                        d.held_bytes -= size
                elif first is not None:
                    assert isinstance(request, FastCycle)
                    await self._recover(admission, request, first)
            except RouterError as exc:  # no slot held any more
                admission.leave()
                code = exc.status
                await self._reply_error(send, exc.status, exc.kind, str(exc), exc.retry_after_s)
                request.began()
            else:
                try:
                    ep = admission.ep
                    assert ep is not None
                    code = await self._relay(ep, admission.response, send, request, cycle)
                finally:
                    admission.leave()
        except asyncio.CancelledError:  # the client left, even while told of an error
            if not request.gone:
                raise
            assert request.task is not None
            request.task.uncancel()
            # A response relayed to its end (an SSE stream up to ``data: [DONE]``) is not a
            # client that left, even if the client closed before the upstream's last bytes.
            code = request.finished or CLIENT_CLOSED
        except _ClientGone:
            code = request.finished or CLIENT_CLOSED
        finally:
            admission.leave()  # (once: entering, or the relay's end, may have left)
            if admission.retried:
                self.metrics.retries.inc()
            if code:
                request.ended(admission.ep, code)

    async def _recover(
        self, admission: Admission[UpstreamResponse], request: FastCycle, first: BaseException
    ) -> None:
        """The fast path's first send failed with ``first`` before the response headers:
        what ``enter`` does when its opener raises that (the client's own resend on a new
        connection, then the admission's retry elsewhere)."""
        ep = admission.ep
        assert ep is not None and request.resp is not None
        client = self.client()
        assert isinstance(client, HttpToolsUpstream)
        try:
            try:
                admission.response = await client.resend(request.resp, first)
            except (HeaderTimeout, Malformed) as exc:
                raise self._open_failed(ep, exc) from exc
        except NotDelivered as exc:
            await admission.retry(exc)

    async def open_upstream(
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
            return await self.client().open(ep.url, method, path, headers, body)
        except (HeaderTimeout, Malformed) as exc:
            raise self._open_failed(ep, exc) from exc

    async def resume(self, request: FastCycle, first: BaseException | None) -> None:
        """A fast request on in its task (:meth:`router.fast_path.FastCycle._continue`)."""
        admission = request.adm
        assert admission is not None
        try:
            send: Send = request.send  # type: ignore[assignment]
            await self._run(admission, request, send, request, first, True)
        finally:
            request.over()

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
    ) -> FastCycle | None:
        """A work request on a route of the table (router.uvicorn_protocol calls this when
        its headers are in): a :class:`router.fast_path.FastCycle`, or None for the ASGI
        way (a chunked body or one declared over ``--max-body-bytes``: answered there as
        ever; another upstream client)."""
        forward, declared, chunked = forward_headers(headers)
        if chunked or declared > self.max_body_bytes:
            return None
        return FastCycle(protocol, self, method, path, headers, forward, http_version, keep_alive)

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
        watch: _Watch | FastCycle,
        cycle: Cycle | None = None,
    ) -> int:
        """Pass the upstream response through; end it cleanly if the upstream breaks.

        An ordinary response (:func:`router.relay.one_shot`) is read whole first and then
        sent as one message pair marked :data:`router.uvicorn_protocol.BODY_FOLLOWS`:
        status line, headers and body in one write. If the upstream breaks inside it,
        nothing was sent yet, so the client gets a 502 of ours. Anything else is streamed
        as it comes.

        A failed ``send`` (uvicorn's ClientDisconnected is an OSError) raises _ClientGone.
        """
        clean = False
        try:
            status = resp.status
            is_sse = resp.is_sse
            length = resp.content_length
            if one_shot(length, is_sse):
                try:
                    data = await resp.read()
                except BodyError as exc:
                    await self._reply_body(send, 502, watch.broke(ep, exc, False, False))
                    watch.began()
                    return 502
                watch.done = True
                if cycle is None or not cycle.respond(
                    status, response_block(resp.raw_headers), data
                ):
                    await send(
                        {
                            "type": "http.response.start",
                            "status": status,
                            "headers": response_headers(resp.raw_headers),
                            BODY_FOLLOWS: True,
                        }
                    )
                    await send({"type": "http.response.body", "body": data})
                watch.began()
                clean = True
                return status
            if (
                length is None
                and cycle is not None
                and cycle.stream_start(status, response_block(resp.raw_headers))
            ):
                code = await self._stream(ep, resp, cycle, watch, status, is_sse)
                clean = code == status
                return code
            headers = response_headers(resp.raw_headers)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            watch.began()
            try:
                if is_sse:
                    async for chunk in resp:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        watch.relayed(chunk, status)  # [DONE]: whole, whatever the client does
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
                tail = watch.broke(ep, exc, True, is_sse)
                if length is None:
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
        watch: _Watch | FastCycle,
        status: int,
        is_sse: bool,
    ) -> int:
        """:meth:`_relay`'s streaming without a Content-Length (SSE) through the cycle's
        direct calls, its start already written: a chunk a write, no message dict and no
        ``send`` coroutine an event."""
        watch.began()
        flow = cycle.flow
        chunk_out = cycle.stream_chunk
        try:
            async for chunk in resp:
                if flow.write_paused:
                    # The client reads slower than the upstream writes; one that reads
                    # nothing for the write-stall limit is cut off (Cycle.drain).
                    await cycle.drain()
                chunk_out(chunk)
                if is_sse:
                    watch.relayed(chunk, status)  # [DONE]: whole, whatever the client does
            watch.done = True
            cycle.stream_end(b"")
            return status
        except BodyError as exc:
            # The upstream broke after we sent bytes: end the client's response cleanly
            # (an SSE stream with an error event).
            cycle.stream_end(watch.broke(ep, exc, True, is_sse))
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
            resp = await self.open_upstream(ep, method, path, headers, body)
        except NotDelivered as exc:
            self._not_delivered(ep, exc)
            message = f"upstream {ep.label} {exc.reason}"
            await self._reply_error(send, 502, "upstream_unavailable", message)
            return
        except RouterError as exc:
            await self._reply_error(send, exc.status, exc.kind, str(exc))
            return
        with contextlib.suppress(_ClientGone):
            await self._relay(ep, resp, send, _Watch(self, None), cycle)

    # --- errors answered by the router ----------------------------------------------------
    async def _reject(
        self,
        send: Send,
        status: int,
        kind: str,
        message: str,
        t0: float | None,
        allow: bytes | None = None,
        param: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        """Answer an error; for a work request (``t0`` set) also count and time it."""
        await self._reply_error(send, status, kind, message, retry_after_s, allow, param)
        if t0 is not None:
            _Watch(self, t0).ended(None, status, first_byte=True)

    async def _reply_error(
        self,
        send: Send,
        status: int,
        kind: str,
        message: str,
        retry_after_s: int | None = None,
        allow: bytes | None = None,
        param: str | None = None,
    ) -> None:
        body = error_body(status, kind, message, param)
        await self._reply_body(send, status, body, retry_after_s, allow)

    async def _reply_body(
        self,
        send: Send,
        status: int,
        body: bytes,
        retry_after_s: int | None = None,
        allow: bytes | None = None,
    ) -> None:
        """Answer an error body of the router's own (JSON)."""
        headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        if retry_after_s is not None:
            headers.append((b"retry-after", str(retry_after_s).encode()))
        if allow is not None:
            headers.append((b"allow", allow))
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        except OSError:
            pass  # client already gone


class _Watch(Reply):
    """Shared between a request and whatever tells it the client left; what is recorded of
    its response (:class:`router.relay.Reply`: ``t0`` None for a metadata call, which is
    neither timed nor counted)."""

    __slots__ = ("_proxy", "done", "finished", "gone", "t0", "task")
    _proxy: Proxy

    def __init__(
        self, proxy: Proxy, t0: float | None, task: asyncio.Task[Any] | None = None
    ) -> None:
        self._proxy = proxy
        self.t0 = t0
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

    __slots__ = ("_body", "_headers", "_method", "_path")

    def __init__(
        self,
        task: asyncio.Task[Any],
        proxy: Proxy,
        t0: float,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
    ) -> None:
        super().__init__(proxy, t0, task)
        self._method = method
        self._path = path
        self._headers = headers
        self._body = body

    def open(self, ep: Endpoint) -> Awaitable[UpstreamResponse]:
        """The admission's opener: send this request to ``ep``."""
        return self._proxy.open_upstream(ep, self._method, self._path, self._headers, self._body)


async def _watch_disconnect(receive: Receive, watch: _Watch) -> None:
    """Without router.uvicorn_protocol's hook: wait on ASGI ``receive()`` for ``http.disconnect``
    (the body was already read) and cancel the request then."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            watch.lost()
            return
