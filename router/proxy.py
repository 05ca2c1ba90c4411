"""The ``/v1/*`` hot path: a raw ASGI handler over one upstream client.

Why raw ASGI: throwaway prototypes on this machine at 64 concurrent did ~4,500
requests/s as a raw ASGI handler, ~2,200 as a FastAPI route. So there is no per-request
regex, JSON re-encoding or logging here. The upstream client is :mod:`router.upstream`
(httptools by default, aiohttp as the measured peer); ``scripts/bench_router.py``
measures this module.

Accounting rules (the reason this module exists):

* a slot is taken when an endpoint is chosen and given back in the ``finally`` around the
  whole request, exactly once, whatever happens (normal end, upstream error, timeout,
  client gone, cancellation);
* the client connection is watched from the start — by :mod:`router.server`'s disconnect
  hook when uvicorn runs that protocol (the router does), else by a task waiting on ASGI
  ``receive()`` for ``http.disconnect``: a client that leaves while its request waits in
  vLLM's queue cancels the request at once, which closes the upstream connection (vLLM
  aborts the sequence) and frees the slot. FastAPI's StreamingResponse only notices a
  disconnect once streaming has begun, so a queued client kept its slot until the
  upstream answered;
* ``GET``/``HEAD`` calls (``/v1/models``) are metadata, not work: they never hold a slot
  and are not counted in L, λ or W (the seed's warm-up call leaked a slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from router.dispatch import Dispatcher
from router.errors import (
    RouterError,
    UpstreamTimeout,
    UpstreamUnavailable,
    error_body,
    sse_error_event,
)
from router.metrics import NO_ENDPOINT, RouterMetrics
from router.pool import Endpoint
from router.server import DISCONNECT_HOOKS, Hooks
from router.upstream import (
    BodyError,
    HeaderTimeout,
    Malformed,
    Refused,
    RequestHeaders,
    Reset,
    Upstream,
    UpstreamResponse,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the client library sets itself
# (host, content-length) — never forwarded in either direction.
HOP_BY_HOP = frozenset(
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
        b"content-length",
    }
)
_RESPONSE_DROP = HOP_BY_HOP - {b"content-length"}
_JSON_HEADERS = [(b"content-type", b"application/json")]
# A response up to this size with a Content-Length is read whole and sent in one
# message (fewer sends for ordinary completions); anything else is streamed.
_ONE_SHOT_MAX_BYTES = 256 * 1024
_CLIENT_CLOSED = 499  # the status counted for a client that left (nginx's convention)


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
    ) -> None:
        self.dispatcher = dispatcher
        self.pool = dispatcher.pool
        self.metrics = metrics
        self._client = client_getter
        self.max_body_bytes = max_body_bytes
        self.unhealthy_backoff_s = unhealthy_backoff_s
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        work = method != "GET" and method != "HEAD"
        # Only work requests are timed and counted (received, finished, W): they are the
        # ones in L, so L = λ·W holds over the router's own series.
        t0: float | None = None
        if work:
            t0 = self.clock()
            self.metrics.received.inc()
        body = await self._read_body(scope, receive, send, t0)
        if body is None:
            return
        path: bytes = scope.get("raw_path") or scope["path"].encode()
        if not path.startswith(b"/v1/"):
            # The upstream URL is always <endpoint base URL> + "/v1/…": a request can pick
            # the path on that endpoint, never the host.
            await self._reject(send, 400, "bad_path", "path must start with /v1/", t0)
            return
        qs: bytes = scope.get("query_string", b"")
        if qs:
            path = path + b"?" + qs
        headers = _request_headers(scope["headers"])
        if t0 is None:
            await self._metadata(method.encode("ascii"), path, headers, body, send)
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
        )

    # --- request body --------------------------------------------------------------------
    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, t0: float | None
    ) -> bytes | None:
        """The whole request body, or None after answering 413 (or if the client left)."""
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await self._reject(send, 413, "request_too_large", self._too_big(), t0)
                    return None
                break
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
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
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(task)
        lost = watch.lost
        watcher: asyncio.Future[None] | None = None
        if hooks is not None:  # router.server's protocol: told of a disconnect, no task
            hooks.add(lost)
        else:
            watcher = asyncio.ensure_future(_watch_disconnect(receive, watch))
        d = self.dispatcher
        d.inflight += 1
        held = _Held()
        code = 0
        try:
            try:
                resp = await self._dispatch(held, method, path, headers, body)
            except RouterError as exc:
                code = exc.status
                await self._reply_error(send, exc.status, exc.kind, str(exc), exc.retry_after_s)
                self.metrics.ttfb.observe(self.clock() - t0)
                return
            assert held.ep is not None
            code = await self._relay(held.ep, resp, send, t0, watch)
        except asyncio.CancelledError:
            if not watch.disconnected:
                raise
            task.uncancel()
            code = _CLIENT_CLOSED
        except _ClientGone:
            code = _CLIENT_CLOSED
        finally:
            # The one place a slot is given back, whatever happened above.
            if hooks is not None:
                hooks.discard(lost)
            if watcher is not None:
                watcher.cancel()
            if held.ep is not None:
                d.release(held.ep)
            d.inflight -= 1
            if code:
                self.metrics.duration.observe(self.clock() - t0)
                self.metrics.finished(held.ep.label if held.ep else NO_ENDPOINT, code)

    async def _dispatch(
        self,
        held: _Held,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
    ) -> UpstreamResponse:
        """Take a slot (``held.ep``) and open the upstream request; on a refused, never
        accepted or reset connection mark that endpoint unhealthy and retry once on another.
        """
        d = self.dispatcher
        held.ep = await d.acquire()
        try:
            return await self._open(held.ep, method, path, headers, body)
        except (Refused, Reset) as first:
            self._failed(held.ep, first)
            d.release(held.ep)
            held.ep = None
        self.metrics.retries.inc()
        held.ep = await d.acquire()
        try:
            return await self._open(held.ep, method, path, headers, body)
        except (Refused, Reset) as second:
            self._failed(held.ep, second)
            raise UpstreamUnavailable(
                f"upstream {held.ep.label} {second.reason}; retried once"
            ) from None

    async def _open(
        self,
        ep: Endpoint,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
    ) -> UpstreamResponse:
        """Send the request; return the response once its headers are in.

        Refused and Reset (retryable) pass through to the caller; a header timeout becomes
        UpstreamTimeout and anything else (a reply that is not HTTP, say) becomes
        UpstreamUnavailable, so no foreign error escapes to uvicorn as an uncounted 500.
        """
        try:
            return await self._client().open(ep.url, method, path, headers, body)
        except HeaderTimeout as exc:
            self.metrics.upstream_error(ep.label, "timeout")
            raise UpstreamTimeout(f"upstream {ep.label} sent no response headers in time") from exc
        except Malformed as exc:
            self.metrics.upstream_error(ep.label, "broken")
            raise UpstreamUnavailable(f"upstream {ep.label} failed: {exc}") from exc

    def _failed(self, ep: Endpoint, exc: Refused | Reset) -> None:
        self.metrics.upstream_error(ep.label, exc.reason)
        self.pool.mark_unhealthy(ep, self.clock(), self.unhealthy_backoff_s)

    async def _relay(
        self,
        ep: Endpoint,
        resp: UpstreamResponse,
        send: Send,
        t0: float | None,
        watch: _Watch,
    ) -> int:
        """Pass the upstream response through; end it cleanly if the upstream breaks.

        A failed ``send`` (uvicorn's ClientDisconnected is an OSError) raises _ClientGone.
        """
        clean = False
        try:
            status = resp.status
            is_sse = resp.is_sse
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": _response_headers(resp.raw_headers),
                }
            )
            if t0 is not None:
                self.metrics.ttfb.observe(self.clock() - t0)
            length = resp.content_length
            try:
                if length is not None and length <= _ONE_SHOT_MAX_BYTES and not is_sse:
                    data = await resp.read()
                    watch.done = True
                    await send({"type": "http.response.body", "body": data})
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

    # --- metadata requests (no slot, not in L, not timed) -----------------------------------
    async def _metadata(
        self,
        method: bytes,
        path: bytes,
        headers: RequestHeaders,
        body: bytes,
        send: Send,
    ) -> None:
        """``GET /v1/models`` and the like: any ready endpoint, no slot taken."""
        ep = self.pool.choose(below_slots=False)
        if ep is None:
            await self._reply_error(send, 503, "no_ready_endpoint", "no ready endpoint", 1)
            return
        try:
            resp = await self._open(ep, method, path, headers, body)
        except (Refused, Reset) as exc:
            self._failed(ep, exc)
            message = f"upstream {ep.label} {exc.reason}"
            await self._reply_error(send, 502, "upstream_unavailable", message)
            return
        except RouterError as exc:
            await self._reply_error(send, exc.status, exc.kind, str(exc))
            return
        with contextlib.suppress(_ClientGone):
            await self._relay(ep, resp, send, None, _Watch())

    # --- errors answered by the router ----------------------------------------------------
    async def _reject(
        self,
        send: Send,
        status: int,
        kind: str,
        message: str,
        t0: float | None,
    ) -> None:
        """Answer an error; for a work request (``t0`` set) also count and time it."""
        await self._reply_error(send, status, kind, message)
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
    ) -> None:
        body = error_body(status, kind, message)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        if retry_after_s is not None:
            headers.append((b"retry-after", str(retry_after_s).encode()))
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        except OSError:
            pass  # client already gone


class _Held:
    """The slot a request holds, if any: set by ``_dispatch``, released in ``_work``."""

    __slots__ = ("ep",)

    def __init__(self) -> None:
        self.ep: Endpoint | None = None


class _Watch:
    """Shared between a request and whatever tells it the client left."""

    __slots__ = ("_task", "disconnected", "done")

    def __init__(self, task: asyncio.Task[Any] | None = None) -> None:
        self._task = task  # None: nothing to cancel (metadata calls)
        self.disconnected = False
        self.done = False  # the final body message is being sent: nothing left to cancel

    def lost(self) -> None:
        """The client connection is gone: cancel the request (once), unless it is ending."""
        if not self.done and not self.disconnected and self._task is not None:
            self.disconnected = True
            self._task.cancel()


async def _watch_disconnect(receive: Receive, watch: _Watch) -> None:
    """Without router.server's hook: wait on ASGI ``receive()`` for ``http.disconnect``
    (the body was already read) and cancel the request then."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            watch.lost()
            return


def _request_headers(raw: list[tuple[bytes, bytes]]) -> RequestHeaders:
    """Forwardable request headers: hop-by-hop ones and those named in Connection dropped."""
    extra: set[bytes] = set()
    for name, value in raw:
        if name == b"connection":
            extra.update(v.strip().lower() for v in value.split(b","))
    out = []
    for name, value in raw:
        lname = name.lower()
        if lname in HOP_BY_HOP or lname in extra:
            continue
        out.append((lname, value))
    return out


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
