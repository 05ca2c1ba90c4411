"""The fast path: a work request served in the protocol's and the upstream client's
callbacks, without ASGI scope, task or coroutine.

:mod:`router.uvicorn_protocol` hands a request on one of the table's exact work routes
(``FAST_ROUTES``) here once its headers are in (:meth:`router.proxy.Proxy.fast_request`).
When its body and its turn are in, it enters its admission at once if a slot is free
(:meth:`router.dispatch.Admission.enter_now`) and an idle pooled upstream connection
takes it (:meth:`router.upstream.HttpToolsUpstream.send_pooled`); else it goes the ASGI
way as if it had never been here. The response is relayed in the upstream client's
callbacks (:class:`FastCycle` is the upstream client's listener); anything that needs to
wait (a large body, a send that failed before the response headers) continues in a task
through :meth:`router.proxy.Proxy.resume`, as the ASGI way would. The same rules as every
path (:mod:`router.relay`), the same L and slot through the same admission, the same
metrics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from router.dispatch import Admission
from router.errors import BadPriority, RequestRefused
from router.headers import error_block, response_block
from router.pool import Endpoint
from router.relay import CLIENT_CLOSED, Reply, one_shot
from router.upstream import (
    HttpToolsUpstream,
    RequestHeaders,
    UpstreamFailure,
    UpstreamResponse,
    _Response,
)
from router.uvicorn_protocol import Cycle, HookedHttpToolsProtocol

if TYPE_CHECKING:
    from router.proxy import Proxy


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


class FastCycle(Cycle, Reply):
    """A work request on the fast path (router.uvicorn_protocol's ``FAST_ROUTES``): its cycle (the
    client side), its watch, and the upstream client's listener, in one object.

    Its body in and its turn come (:meth:`activate`, :meth:`complete`), it enters its
    admission and sends upstream without a coroutine when a slot is free and a pooled
    connection idle (else it goes the ASGI way, :meth:`HookedHttpToolsProtocol.as_asgi`,
    as if it had never been here); an ordinary response (a Content-Length up to
    ``ONE_SHOT_MAX_BYTES``, not SSE) is written when whole, the slot given back and the
    request counted, all in the upstream client's callback. Anything else (a stream, a
    send that failed before the response headers) continues in a task, through
    :meth:`Proxy._run` as a request of the ASGI way would. Accounting as ``_work``'s:
    the same metrics, L and slot through the same admission, what is recorded of the
    response through the same :class:`router.relay.Reply`."""

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
    _stall: asyncio.TimerHandle | None = None  # the write-stall timer, while paused
    _payload = b""
    _proxy: Proxy
    t0: float

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
            self.ended(None, CLIENT_CLOSED)
            self._drop()
        elif state in (_UPSTREAM, _STREAM):
            # Waiting for the upstream, or relaying its stream: closing its connection is
            # what cancelling the request's task does (the upstream sees the client leave).
            # A stream relayed up to its ``data: [DONE]`` is not a client that left.
            self._state = _OVER
            resp, adm = self.resp, self.adm
            assert resp is not None and adm is not None
            resp.listener = None
            resp.close()
            adm.leave()
            self.ended(self.ep, self.finished or CLIENT_CLOSED)
            self._drop()

    # --- the start -----------------------------------------------------------------------
    def _begin(self) -> None:
        if self._state != _WAITING:
            return
        proxy = self._proxy
        client = proxy.client()
        if type(client) is not HttpToolsUpstream:  # (aiohttp) the ASGI way
            self._asgi()
            return
        body = self._payload
        cls = 0
        class_of = proxy.class_of
        if class_of is not None:
            try:
                cls = class_of(proxy.priority(self._path, self._headers, body))
            except BadPriority:
                self._asgi()  # answered (400) and counted there
                return
        demand = proxy.demand
        tokens = 0
        if demand is not None:
            try:
                tokens = demand(self._path, body)
            except RequestRefused:
                self._asgi()  # answered (400) and counted there
                return
        d = proxy.dispatcher
        blocks_of = proxy.blocks_of
        blocks = blocks_of(self._path, body, d.prefix_block_size) if blocks_of else ()
        adm = Admission(d, self.open, proxy.on_not_delivered, cls, tokens, blocks)
        ep = adm.enter_now()
        if ep is None:  # held, or no endpoint: the ASGI way
            self._asgi()
            return
        resp = client.send_pooled(ep.url, self._method, self._path, self._headers, body, self)
        if resp is None:  # no idle pooled connection: the ASGI way, slot given back
            adm.leave()
            self._asgi()
            return
        if blocks:
            adm.hold(d.cached(ep, blocks, tokens))
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
        return self._proxy.open_upstream(ep, self._method, self._path, self._headers, self._payload)

    def _asgi(self) -> None:
        self._state = _OVER
        proto = self._proto
        self._drop()
        proto.as_asgi(self, self._method, self._path, self._raw, self._version, self._payload)

    def over(self) -> None:
        """Its task ended (:meth:`router.proxy.Proxy.resume`): nothing more to do here."""
        self._state = _OVER
        self.task = None
        self._drop()

    def _drop(self) -> None:
        """Let go of what refers back to this request (no reference cycle to collect)."""
        stall = self._stall
        if stall is not None:
            stall.cancel()
            self._stall = None
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
        elif not one_shot(length, response.is_sse):  # streamed in a task
            response.listener = None
            self._continue(None)

    def upstream_data(self, response: _Response) -> None:
        """A stream's chunks so far, relayed (as :meth:`Proxy._stream`): each written at
        once, the upstream no longer read while the client's buffer is full."""
        chunks = response.drain()
        if self._sse:
            status = response.status
            for chunk in chunks:
                self.stream_chunk(chunk)
                self.relayed(chunk, status)  # its [DONE]: whole, whatever the client does now
        else:
            for chunk in chunks:
                self.stream_chunk(chunk)
        if self.flow.write_paused and not self.disconnected:
            response.pause()  # until the client's buffer drains (writable)
            stall_s = self._proto.limits.write_stall_s
            if stall_s is not None and self._stall is None:
                # A client that takes nothing for that long is cut off: its slot back.
                self._stall = self._proto.loop.call_later(stall_s, self.stalled)

    def stalled(self) -> None:
        """Cycle's (its write-stall timer fired), with the protocol's limits (read here,
        not stored for each request)."""
        self.limits = self._proto.limits
        super().stalled()

    def writable(self) -> None:
        stall = self._stall
        if stall is not None:
            stall.cancel()
            self._stall = None
        resp = self.resp
        if self._state == _STREAM and resp is not None:
            resp.resume()

    def _stream_start(self, response: _Response) -> None:
        self._state = _STREAM
        self._sse = response.is_sse
        if not self.disconnected:
            block = response.block
            if block is None:
                block = response_block(response.raw_headers)
            self.write_stream_head(response.status, block)
        self.began()

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
        if not one_shot(length, response.is_sse):  # streamed in a task
            self._continue(None)
            return
        self._state = _OVER
        self.done = True
        data = response.take()
        status = response.status
        if not self.disconnected:
            block = response.block
            if block is None:
                block = response_block(response.raw_headers)
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
            tail = self.broke(ep, exc, True, self._sse)
            if not self.disconnected:
                self.write_stream_end(tail)
            self._end(response, False, 502, ttfb=False)
            return
        length = response.content_length
        if not one_shot(length, response.is_sse):
            # Broke before the headers were told (in the same read): a stream, relayed in
            # the task up to the break as Proxy._relay relays one.
            self._continue(None)
            return
        # An ordinary response broke before it was whole: nothing sent yet, so a 502 of
        # ours (as _relay).
        ep = self.ep
        assert ep is not None
        self._state = _OVER
        body = self.broke(ep, exc, False, False)
        if not self.disconnected:
            self.write_whole(502, error_block(body), body)
        self._end(response, False, 502)

    def _end(self, response: _Response, clean: bool, code: int, ttfb: bool = True) -> None:
        """After the response was written: the upstream connection back to its pool
        (``clean``) or closed, the slot given back, the request counted (as ``_work``;
        ``ttfb``: its first byte is now), then the connection's next request."""
        adm = self.adm
        assert adm is not None
        if clean:
            response.release()
        else:
            response.close()
        adm.leave()
        self.ended(self.ep, code, ttfb)
        on_response = self.on_response
        self._drop()
        if not self.disconnected:
            on_response()

    def _continue(self, first: BaseException | None) -> None:
        """On in a task: relay a stream, or recover from a send that failed (``first``)."""
        self._state = _TASK
        proto = self._proto
        self.task = task = proto.loop.create_task(self._proxy.resume(self, first))
        task.add_done_callback(proto.tasks.discard)
        proto.tasks.add(task)


def _no_response() -> None:
    """A finished fast request's ``on_response``."""
