"""uvicorn's httptools protocol, plus a disconnect hook in each request's scope and a
lighter request cycle.

The proxy must learn that a client left while its request waits upstream (in vLLM's
queue), to free the slot at once. Plain ASGI offers one way: a task per request awaiting
``receive()`` until ``http.disconnect``. Measured on this machine with
``inflight bench router``, that task (create, wait on uvicorn's event, cancel) was ~12 µs
of the router's ~69 µs a request: capacity at c=64 went from 14,450 requests/s
(``results/2026-11-29-router-3``) to 17,578 with this hook (``results/2026-11-29-router-4``).

So this protocol puts a per-connection set of callbacks in every scope under
:data:`DISCONNECT_HOOKS`; the proxy adds one callback while a request is in flight and
removes it in its ``finally``; ``connection_lost`` calls every callback registered on that
connection. The proxy falls back to the ``receive()`` task when the key is absent (another
ASGI server, or the tests' hand-made scopes), so the app stays plain ASGI.

The request cycle (:class:`Cycle`, in place of uvicorn's ``RequestResponseCycle``) keeps
uvicorn's ASGI semantics message for message and costs less a request (issue 27: uvicorn's
per-request Python was ~950 of the router's ~2,660 bytecodes a request, its ``send`` alone
266): positional construction, no coroutine for an already-set event, and a response start
marked :data:`BODY_FOLLOWS` is written together with the body that follows it, one
``write`` (one system call, one TCP segment) for an ordinary completion instead of two.

It relies on uvicorn's ``HttpToolsProtocol`` calling ``on_message_begin`` and
``on_headers_complete`` to build each request's scope and cycle, and ``connection_lost``
when the client goes (uvicorn is pinned below 1.0 in pyproject.toml; the two overridden
callbacks and :class:`Cycle` follow uvicorn 0.54's, and a test checks that a cycle has the
attributes of uvicorn's own); ``tests/component/test_router_uvicorn_protocol.py`` and
``tests/integration/test_router_emulator.py``'s disconnect tests run through it.

**Limits at the door** (issue 39; :class:`DoorLimits`, the app's :data:`LIMITS` attribute,
``inflight router``'s flags): in this protocol, so the fast path stays on (uvicorn's
``limit_concurrency`` would turn it off). A request head (request line and headers) over
``max_header_bytes`` is answered 431, or 414 while still in its URL (counted as it arrives,
read by read, so a header trickled in is refused at the limit, before httptools' own
accumulation of it grows quadratic), a URL over ``max_url_bytes`` 414, more than
``max_headers`` headers 431; a head not complete within ``header_timeout_s`` of its first
byte (or of the connection's opening) and a body that receives nothing for
``body_timeout_s`` are answered 408, and the connection closed. A connection past
``max_connections`` open is answered 503 with Retry-After and closed at once (it is
accepted, then refused: the listening socket's backlog is not left to fill). The timeouts
are one watchdog timer a connection, woken every half of the shorter timeout, not a timer
a request: a request costs a few attribute stores. A response the client does not read for
``write_stall_s`` (its buffer full, nothing drained) cuts the connection (:meth:`Cycle.drain`
and :mod:`router.fast_path`), so the request's slot comes back. Chunked trailers are dropped,
never added to the request's headers. Each refusal is counted (``count(reason)``:
``router_client_errors_total``).
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

import httptools
from uvicorn._types import ASGI3Application, ASGIReceiveEvent, ASGISendEvent
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from router.limits import DoorLimits

# The scope key: a set of zero-argument callbacks, called once if the client connection
# is lost. Not an ASGI standard key; namespaced to this project.
DISCONNECT_HOOKS = "inflight.disconnect_hooks"
# A key of an ``http.response.start`` message: the body message follows at once, so the
# status line and headers are written with it (one write) rather than on their own.
# Servers that do not know it ignore it (ASGI messages may carry extra keys).
BODY_FOLLOWS = "inflight.body_follows"

# The scope key of the request's :class:`Cycle`, for the proxy's direct calls
# (``whole_body``, ``respond``): the same effect as ``receive()`` and two ``send()``s,
# without a message dict or a coroutine each. Absent with another server: plain ASGI.
CYCLE = "inflight.cycle"

# The app attribute naming its fast routes: raw path -> method -> FastHandler.
FAST_ROUTES = "inflight_fast_routes"

Hooks = set[Callable[[], None]]

# The app attribute naming its DoorLimits (absent: DoorLimits(), the defaults).
LIMITS = "inflight_door_limits"


_DEFAULT_LIMITS = DoorLimits()
# Seconds a refused connection is read (and what comes dropped) before it is closed.
LINGER_S = 2.0


class _Dropper:
    """A refused connection's parser: what still comes is dropped."""

    def feed_data(self, data: bytes) -> None:
        pass


_DROP: Any = _Dropper()

# Where a connection's current request is, for the watchdog.
_IDLE = 0  # between requests (the keep-alive timeout's)
_HEAD = 1  # waiting for or reading a request's head
_BODY = 2  # reading its body
_BUSY = 3  # all in, being answered

_REASONS = {
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


class Refused(Exception):
    """Raised in a parser callback to refuse the request (the protocol answers it)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def refusal(status: int, message: str, retry_after_s: int | None = None) -> bytes:
    """A whole response of the door's own: the status, a JSON error body naming what was
    wrong, and ``connection: close``."""
    kind = {408: "request_timeout", 414: "uri_too_long", 431: "header_too_large"}.get(
        status, "router_overloaded"
    )
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
    retry = b"retry-after: %d\r\n" % retry_after_s if retry_after_s is not None else b""
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"%bconnection: close\r\n\r\n%b" % (status, _REASONS[status], len(body), retry, body)
    )


def _prefix(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]} - " if client else ""


def _nothing() -> None:
    """A finished cycle's ``on_response``."""


class FastRequest(Protocol):
    """A request the app serves without ASGI (:data:`FAST_ROUTES`), as the protocol sees
    it: a cycle (``response_complete``, ``keep_alive``, ``disconnected``) fed its body."""

    response_complete: bool
    keep_alive: bool
    disconnected: bool
    is_fast: bool  # True

    def feed(self, body: bytes) -> None:
        """A part of the request body (in order)."""

    def complete(self) -> None:
        """The whole body is in."""

    def activate(self) -> None:
        """Its turn on the connection (at once, or after the pipelined ones before it)."""

    def lost(self) -> None:
        """The client connection was lost while this request was the one served."""

    def writable(self) -> None:
        """The client's connection takes writes again (its buffer drained)."""


class FastHandler(Protocol):
    """What an app's :data:`FAST_ROUTES` map to: builds a :class:`FastRequest`, or None
    when the request must go the ASGI way (the protocol then builds its scope)."""

    def fast_request(
        self,
        protocol: HookedHttpToolsProtocol,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        http_version: str,
        keep_alive: bool,
    ) -> FastRequest | None: ...


class HookedHttpToolsProtocol(HttpToolsProtocol):
    """``uvicorn.run(app, http=HookedHttpToolsProtocol)``.

    The fast path: an app with a :data:`FAST_ROUTES` attribute (raw path → methods →
    handler) has those requests (exact path, no query string, no upgrade, no
    ``Expect: 100-continue``) handed over without an ASGI scope, a task or a message dict
    (:class:`FastHandler`); everything else is uvicorn's, its scope built when the
    headers are in rather than at the request's first byte (nothing reads it before).
    The keep-alive timeout is armed once per idle period, not made and cancelled for each
    request: a connection busy when it fires is left alone.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._disconnect_hooks: Hooks = set()
        routes: dict[bytes, dict[bytes, FastHandler]] | None = getattr(self.app, FAST_ROUTES, None)
        if (
            self.root_path
            or self.limit_concurrency is not None
            or getattr(self.config, "reset_contextvars", False)
        ):
            routes = None
        self._fast_routes = routes
        self._fast: FastRequest | None = None  # the fast request being served, if any
        self._connection_header = False  # the request being parsed has one
        self._idle_at: float | None = None  # loop time the connection went idle; None: busy
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        limits: DoorLimits = getattr(self.app, LIMITS, _DEFAULT_LIMITS)
        self.limits = limits
        # Reads that begin in a head (or between requests) are summed in _head_bytes; past
        # the smaller head limit the head is measured exactly (_check_head), and a head still
        # not in past max_header_bytes is refused read by read (a header trickled in).
        self._check_from = min(limits.max_url_bytes, limits.max_header_bytes)
        self._max_headers = limits.max_headers
        self._max_head = limits.max_header_bytes
        self._phase = _HEAD
        self._head_bytes = 0  # bytes of reads that began in a head, since the last head
        self._reads = 0  # data_received calls: the watchdog's sign of progress
        self._watch_reads = 0  # _reads at the watchdog's last wake-up
        self._watch_head: object = None  # the head (its headers list) at the last wake-up
        self._strikes = 0  # wake-ups in a row with the current head or body not progressing
        self._watch: asyncio.TimerHandle | None = None
        self._lingering = False  # refused: reading only to drop, until the close

    # --- limits at the door ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = self.limits
        cap = limits.max_connections
        if cap is not None and len(self.connections) > cap:
            limits.count("too_many_connections")
            message = f"the router has --max-connections={cap} connections open"
            transport.write(refusal(503, message, retry_after_s=1))
            transport.close()
            return
        period = limits.watch_period_s
        if period is not None:
            self._watch = self.loop.call_later(period, self._watchdog)

    def _watchdog(self) -> None:
        """Every ``watch_period_s``: a head not complete within the header timeout, or a
        body that received nothing for the body timeout, is answered 408."""
        self._watch = None
        if self.transport.is_closing():
            return
        limits = self.limits
        period = limits.watch_period_s
        assert period is not None
        phase = self._phase
        reads = self._reads
        if phase == _HEAD or (phase == _BODY and not self.flow.read_paused):
            if phase == _BODY and reads != self._watch_reads:
                self._strikes = 0  # the body moved
            elif phase == _HEAD and self.headers is not self._watch_head:
                self._strikes = 1  # another head than at the last wake-up: its first
            else:
                self._strikes += 1
            timeout = limits.header_timeout_s if phase == _HEAD else limits.body_timeout_s
            if timeout and self._strikes * period >= timeout:
                self._time_out(phase, timeout)
                return
        else:
            self._strikes = 0
        self._watch_reads = reads
        self._watch_head = self.headers
        self._watch = self.loop.call_later(period, self._watchdog)

    def _time_out(self, phase: int, timeout: float) -> None:
        if phase == _HEAD:
            self.limits.count("header_timeout")
            if self._reads == 0:
                self.transport.close()  # nothing of a request came: nothing to answer
                return
            message = f"request head not complete within --header-timeout-s={timeout:g}"
        else:
            self.limits.count("body_timeout")
            message = f"request body received nothing for --body-timeout-s={timeout:g}"
        self.logger.info("%s%s", _prefix(self.client), message)
        self._refuse(408, message)

    def _refuse(self, status: int, message: str) -> None:
        """Answer the request being read with ``status`` and close the connection: a
        lingering close (nginx's), so a client still sending gets the answer rather than a
        reset: the write side is shut, what still arrives is read and dropped, and the
        connection closed when the client closes it or :data:`LINGER_S` later."""
        cycle = self.cycle
        transport = self.transport
        if cycle is None or cycle.response_complete or not cycle.response_started:
            transport.write(refusal(status, message))
        self._phase = _BUSY  # nothing more is counted or timed
        if self._lingering or not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        self.parser = _DROP  # what still comes is dropped
        transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)

    def _check_head(self) -> None:
        """The head just in, measured (its reads passed the smaller head limit, or it has
        too many headers): Refused past a limit (the parser stops; data_received answers)."""
        limits = self.limits
        if len(self.url) > limits.max_url_bytes:
            raise Refused(
                414, "url_too_long", f"URL longer than --max-url-bytes={limits.max_url_bytes}"
            )
        if len(self.headers) > limits.max_headers:
            raise Refused(
                431,
                "too_many_headers",
                f"more than --max-headers={limits.max_headers} request headers",
            )
        size = len(self.url) + sum(len(name) + len(value) for name, value in self.headers)
        if size > limits.max_header_bytes:
            message = f"request head larger than --max-header-bytes={limits.max_header_bytes}"
            raise Refused(431, "header_too_large", message)

    def _head_too_large(self) -> None:
        limits = self.limits
        if self._in_url():
            limits.count("url_too_long")
            self._refuse(414, f"URL longer than --max-url-bytes={limits.max_url_bytes}")
        else:
            limits.count("header_too_large")
            self._refuse(
                431, f"request head larger than --max-header-bytes={limits.max_header_bytes}"
            )

    def _in_url(self) -> bool:
        """Whether the head being read has not got past its URL (no header yet)."""
        return not self.headers and self.scope is None

    # --- keep-alive: one timer an idle period -------------------------------------------
    def _unset_keepalive_if_required(self) -> None:
        self._idle_at = None

    def _keep_alive_check(self) -> None:
        self._keep_alive_timer = None
        idle_at = self._idle_at
        if idle_at is None:
            return  # busy: the next response arms it again
        left = idle_at + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._keep_alive_timer = self.loop.call_later(left, self._keep_alive_check)
        else:
            self.timeout_keep_alive_handler()

    def data_received(self, data: bytes) -> None:
        self._idle_at = None
        self._reads += 1
        if self._phase <= _HEAD:  # a read that begins in a head (or before one)
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if isinstance(exc, httptools.parser.errors.HttpParserCallbackError):
                refused = exc.__context__
                if isinstance(refused, Refused):  # a limit at the door: answered, counted
                    self.limits.count(refused.reason)
                    self._refuse(refused.status, str(refused))
                    return
                # One of our callbacks raised (a bug, not the client's request): say which.
                self.logger.error("Exception in a parser callback", exc_info=exc.__context__)
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._head_bytes > self._max_head and self._phase == _HEAD:
            # Reads past max_header_bytes and the head still not in (a header trickled in):
            # refused now, before httptools accumulates more of it.
            self._head_too_large()

    # --- parser callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._phase = _HEAD
        self.url = b""
        self.expect_100_continue = False
        self._connection_header = False
        self.headers = []
        self.scope = None  # type: ignore[assignment]  # built with the headers (_scope)

    def on_header(self, name: bytes, value: bytes) -> None:
        """uvicorn's, noting a Connection header. (A trailer, a header after a chunked
        body, lands in a list nobody reads: :meth:`on_headers_complete` hands the
        headers over.)"""
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        elif name == b"connection":
            self._connection_header = True
        self.headers.append((name, value))

    def _scope(self) -> dict[str, Any]:
        """uvicorn's scope of the request being parsed (its on_message_begin's)."""
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
            DISCONNECT_HOOKS: self._disconnect_hooks,
        }
        self.scope = scope  # type: ignore[assignment]
        return scope

    def on_headers_complete(self) -> None:
        """uvicorn's, building a :class:`Cycle`, or the fast path's request."""
        self._phase = _BODY
        if self._head_bytes > self._check_from or len(self.headers) > self._max_headers:
            self._check_head()
        self._head_bytes = 0
        parser = self.parser
        routes = self._fast_routes
        if routes is not None and not self.access_log:  # (uvicorn's send logs a response)
            methods = routes.get(self.url)
            if methods is not None:
                method = parser.get_method()
                handler = methods.get(method)
                if (
                    handler is not None
                    and not self.expect_100_continue
                    and not parser.should_upgrade()
                ):
                    # HTTP/1.0 keeps the connection only when a Connection header asks
                    # (llhttp): with none, keep-alive means 1.1 (get_http_version formats
                    # a string: ~2,000 instructions).
                    keep_alive = parser.should_keep_alive()
                    if keep_alive and not self._connection_header:
                        version = "1.1"
                    else:
                        version = parser.get_http_version()
                        keep_alive = keep_alive and version != "1.0"
                    request = handler.fast_request(
                        self, method, self.url, self.headers, version, keep_alive
                    )
                    if request is not None:
                        existing = self.cycle
                        self.cycle = request  # type: ignore[assignment]
                        if existing is None or existing.response_complete:
                            self._fast = request
                            request.activate()
                        else:  # pipelined: its turn comes in on_response_complete
                            self.flow.pause_reading()
                            self.pipeline.appendleft((request, None))  # type: ignore[arg-type]
                        return
        http_version = parser.get_http_version()
        scope = self._scope()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        # The scope has the headers; what the parser still calls on_header for (a chunked
        # body's trailers) goes to a new list, dropped: never forwarded.
        self.headers = []
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root_path = self.root_path
        if root_path:
            scope["path"] = root_path + path
            scope["raw_path"] = root_path.encode("ascii") + raw_path
        else:
            scope["path"] = path
            scope["raw_path"] = raw_path
        scope["query_string"] = parsed_url.query or b""

        app: ASGI3Application = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")

        existing_cycle = self.cycle
        self.cycle = cycle = Cycle(
            self,
            http_version != "1.0" and parser.should_keep_alive(),
        )
        scope[CYCLE] = cycle
        if existing_cycle is None or existing_cycle.response_complete:
            self._fast = None
            self._start_asgi_task(cycle, app)
        else:
            # Pipelined HTTP requests need to be queued up.
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle.is_fast:  # type: ignore[attr-defined]
            fast: FastRequest = cycle  # type: ignore[assignment]
            fast.feed(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._phase = _BUSY
        cycle = self.cycle
        if cycle.is_fast:  # type: ignore[attr-defined]
            fast: FastRequest = cycle  # type: ignore[assignment]
            fast.complete()
            return
        super().on_message_complete()

    def as_asgi(
        self,
        request: FastRequest,
        method: bytes,
        path: bytes,
        headers: list[tuple[bytes, bytes]],
        http_version: str,
        body: bytes,
    ) -> None:
        """Serve a fast request, its turn come and its body in, the ASGI way after all
        (the handler could not at once: no slot, no pooled connection): the scope and
        cycle uvicorn would have built, the body already received."""
        saved = self.scope, self.headers
        self.headers = headers
        scope = self._scope()
        self.scope, self.headers = saved
        scope["method"] = method.decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        scope["path"] = path.decode("ascii")  # a table path: no escape, no query string
        scope["raw_path"] = path
        scope["query_string"] = b""
        cycle = Cycle(self, request.keep_alive, scope)
        cycle.body = bytearray(body)
        cycle.more_body = False
        cycle.message_event.set()
        scope[CYCLE] = cycle
        if self.cycle is request:
            self.cycle = cycle
        if self._fast is request:
            self._fast = None
        self._start_asgi_task(cycle, self.app)

    def on_response_complete(self) -> None:
        """uvicorn's: the next pipelined request, else the keep-alive timeout."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            if app is None:  # a fast request
                request: FastRequest = cycle
                self._fast = request
                request.activate()
            else:
                self._fast = None
                self._start_asgi_task(cycle, app)
        else:  # the keep-alive timeout, armed once an idle period
            if self._phase == _BUSY:
                self._phase = _IDLE
            self._idle_at = self.loop.time()
            if self._keep_alive_timer is None:
                self._keep_alive_timer = self.loop.call_later(
                    self.timeout_keep_alive, self._keep_alive_check
                )

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        """uvicorn's, telling a :class:`Cycle` its task (the proxy cancels it when the
        client leaves; ``asyncio.current_task()`` would cost a ``getpid`` system call a
        request on Python 3.11)."""
        if getattr(self.config, "reset_contextvars", False) or not isinstance(cycle, Cycle):
            super()._start_asgi_task(cycle, app)
            return
        cycle.task = task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def resume_writing(self) -> None:
        """uvicorn's; and the fast request being served is told (it stopped reading its
        upstream while the client's buffer was full)."""
        self.flow.resume_writing()
        fast = self._fast
        if fast is not None:
            fast.writable()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.logger.level <= TRACE_LOG_LEVEL:
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection lost", _prefix(self.client))
        cycle = self.cycle
        if isinstance(cycle, Cycle):
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.message_event.set()
        if self.flow is not None:
            self.flow.resume_writing()
        if exc is None:
            self.transport.close()
        self._idle_at = None
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self.parser = None  # type: ignore[assignment]
        fast = self._fast
        if fast is not None:
            self._fast = None
            fast.lost()
        hooks = list(self._disconnect_hooks)
        self._disconnect_hooks.clear()
        for hook in hooks:
            hook()


class Cycle(RequestResponseCycle):
    """uvicorn's ``RequestResponseCycle`` (same attributes, same ASGI behaviour), lighter,
    and writing a response start marked :data:`BODY_FOLLOWS` with its body."""

    def __init__(
        self,
        protocol: HookedHttpToolsProtocol,
        keep_alive: bool,
        scope: dict[str, Any] | None = None,
    ) -> None:
        # Not super().__init__: the same attributes, set from the protocol directly.
        self.scope = protocol.scope if scope is None else scope  # type: ignore[assignment]
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.logger = protocol.logger
        self.access_logger = protocol.access_logger
        self.access_log = protocol.access_log
        self.default_headers = protocol.server_state.default_headers
        self.message_event = asyncio.Event()
        self.on_response = protocol.on_response_complete
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = protocol.expect_100_continue
        self.body = bytearray()
        self.limits = protocol.limits
        # disconnected, more_body, response_started, response_complete, chunked_encoding,
        # expected_content_length and _head start as the class's values below (an
        # instance attribute once set), which saves setting them for each request.

    is_fast = False  # a FastRequest (router.proxy's) is a Cycle too, this True
    disconnected = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    _head: bytes | None = None  # a start held for the body that follows
    task: asyncio.Task[None] | None = None  # the request's task, while it runs
    limits = _DEFAULT_LIMITS

    async def drain(self) -> None:
        """Wait until the client's connection takes writes again; a client that takes
        nothing for ``write_stall_s`` is cut off (:meth:`stalled`): the request then sees
        its client gone, as on a disconnect, and its slot comes back."""
        stall_s = self.limits.write_stall_s
        if stall_s is None:
            await self.flow.drain()
            return
        try:
            async with asyncio.timeout(stall_s):
                await self.flow.drain()
        except TimeoutError:
            self.stalled()

    def stalled(self) -> None:
        """The client read nothing of the response for ``write_stall_s``: counted, and the
        connection aborted (``connection_lost`` tells the request, as a disconnect)."""
        self.limits.count("write_stall")
        self.logger.info(
            "client read nothing for --write-stall-s=%g s: connection closed",
            self.limits.write_stall_s,
        )
        self.disconnected = True
        self.transport.abort()

    async def run_asgi(self, app: ASGI3Application) -> None:
        """uvicorn's, but ``on_response`` is reset to a shared no-op (not a new lambda), and
        the scope lets go of this cycle."""
        try:
            result = await app(  # type: ignore[func-returns-value]
                self.scope, self.receive, self.send
            )
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self.transport.close()
        else:
            if result is not None:
                msg = "ASGI callable should return None, but returned '%s'."
                self.logger.error(msg, result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("ASGI callable returned without completing response.")
                self.transport.close()
        finally:
            self.on_response = _nothing
            # The scope refers to this cycle and the cycle to the scope: a reference cycle
            # that only the garbage collector would free (~8 objects a request), broken here.
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope.pop(CYCLE, None)
            self.task = None

    # --- the proxy's direct calls (the scope's CYCLE key): no message dicts, no coroutine ---
    def whole_body(self) -> bytes | None:
        """The request's whole body when it is all in (what ``receive()`` would return at
        once with ``more_body`` False), taken as ``receive()`` takes it; None, having taken
        nothing, when ``receive()`` must be awaited."""
        if (
            self.more_body
            or self.disconnected
            or self.response_complete
            or self.waiting_for_100_continue
            or not self.message_event.is_set()
        ):
            return None
        if self.flow.read_paused:
            self.flow.resume_reading()
        self.message_event.clear()
        body = self.body
        self.body = bytearray()
        return bytes(body)

    def put_back(self, body: bytes) -> None:
        """Undo :meth:`whole_body` (or reading the body through ``receive()``): the next
        ``whole_body()`` gives ``body`` again. For an app in front of the proxy that reads
        the body to choose where the request goes (:mod:`router.model_pools`)."""
        self.body = bytearray(body)
        self.more_body = False
        self.message_event.set()

    def respond(self, status: int, headers: bytes, body: bytes) -> bool:
        """A whole response in one write, as ``send`` writes a start marked
        :data:`BODY_FOLLOWS` and its final body. ``headers``: the header block, each line
        ``name: value\\r\\n``, as an HTTP parser produced them (lowercase names, valid
        values: not checked again), with the Content-Length of ``body`` and no
        Transfer-Encoding or Connection. False, having done nothing,
        when ``send`` must be used instead (an access log, writing paused, a response
        already started); True otherwise, also when the client is gone (``send`` then
        writes nothing either)."""
        if self.access_log or self.response_started or self.flow.write_paused:
            return False
        if self.disconnected:
            return True
        self.write_whole(status, headers, body)
        self.on_response()
        return True

    def write_whole(self, status: int, headers: bytes, body: bytes) -> None:
        """:meth:`respond`'s write, whatever the flow control says (a bounded body), and
        without ``on_response`` (the caller calls it when done)."""
        self.response_started = True
        self.waiting_for_100_continue = False
        content = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            content += (name, b": ", value, b"\r\n")
        content.append(headers)
        keep_alive = self.keep_alive
        content.append(b"\r\n" if keep_alive else b"connection: close\r\n\r\n")
        if self.scope["method"] != "HEAD":
            content.append(body)
        self.transport.write(b"".join(content))
        self.response_complete = True
        self.message_event.set()
        if not keep_alive:
            self.transport.close()

    def stream_start(self, status: int, headers: bytes) -> bool:
        """Start a chunked response (no Content-Length), as ``send`` writes a start
        without one; then :meth:`stream_chunk` each chunk and :meth:`stream_end`.
        ``headers`` as for :meth:`respond` (no Content-Length, Transfer-Encoding or
        Connection). False, having done nothing, when ``send`` must be used instead (an
        access log, writing paused, a response already started, a HEAD request)."""
        if (
            self.access_log
            or self.response_started
            or self.flow.write_paused
            or self.scope["method"] == "HEAD"
        ):
            return False
        if self.disconnected:  # as send: nothing written, nothing changed
            return True
        self.write_stream_head(status, headers)
        return True

    def write_stream_head(self, status: int, headers: bytes) -> None:
        """:meth:`stream_start`'s write, whatever the flow control says."""
        self.response_started = True
        self.waiting_for_100_continue = False
        self.chunked_encoding = True
        content = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            content += (name, b": ", value, b"\r\n")
        content.append(headers)
        if not self.keep_alive:
            content.append(b"connection: close\r\n")
        content.append(b"transfer-encoding: chunked\r\n\r\n")
        self.transport.write(b"".join(content))

    def stream_chunk(self, chunk: bytes) -> None:
        """One chunk of a response begun with :meth:`stream_start` (the caller waits on
        ``flow.drain()`` while ``flow.write_paused``, as ``send`` does)."""
        if chunk and not self.disconnected:
            self.transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))

    def stream_end(self, tail: bytes) -> None:
        """The last chunk (``tail``, may be empty) and the end of the response."""
        if self.disconnected or self.response_complete:  # as send
            return
        self.write_stream_end(tail)
        self.on_response()

    def write_stream_end(self, tail: bytes) -> None:
        """:meth:`stream_end`'s write, without ``on_response`` (the caller calls it)."""
        last = b"%x\r\n%b\r\n0\r\n\r\n" % (len(tail), tail) if tail else b"0\r\n\r\n"
        self.transport.write(last)
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()

    async def receive(self) -> ASGIReceiveEvent:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            flow = self.flow
            if flow.read_paused:
                flow.resume_reading()
            event = self.message_event
            if not event.is_set():  # the whole body is usually in already: no coroutine
                await event.wait()
            event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body = self.body
        self.body = bytearray()
        return {"type": "http.request", "body": bytes(body), "more_body": self.more_body}

    async def send(self, message: ASGISendEvent) -> None:
        if self.access_log:  # uvicorn's own send logs each response
            await super().send(message)
            return
        if self.flow.write_paused and not self.disconnected:
            await self.drain()
        if self.disconnected:
            return
        msg: dict[str, Any] = message  # type: ignore[assignment]
        kind = msg["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{kind}'."
                )
            self._start(msg)
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected 'http.response.body', but got '{kind}'.")
            self._body(msg.get("body", b""), msg.get("more_body", False))
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}' sent, after response already completed."
            )

    def _start(self, message: dict[str, Any]) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        headers = message.get("headers", ())
        if self.default_headers:
            headers = [*self.default_headers, *headers]
        content = [STATUS_LINE[status_code]]
        has_connection_close = False
        for name, value in headers:
            if HEADER_RE.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection":
                connection = [token.lower().strip() for token in value.split(b",")]
                if b"close" in connection:
                    self.keep_alive = False
                    has_connection_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and self.scope["method"] != "HEAD"
            and status_code not in (204, 304)
        ):
            # Neither content-length nor transfer-encoding specified
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        head = b"".join(content)
        if message.get(BODY_FOLLOWS):
            self._head = head
        else:
            self.transport.write(head)

    def _body(self, body: bytes, more_body: bool) -> None:
        head = self._head
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
            data = b""
        elif self.chunked_encoding:
            if body:
                data = b"%x\r\n%b\r\n" % (len(body), body)
                if not more_body:
                    data += b"0\r\n\r\n"
            else:
                data = b"" if more_body else b"0\r\n\r\n"
        else:
            num_bytes = len(body)
            if num_bytes > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= num_bytes
            data = body
        if head is not None:
            self._head = None
            data = head + data
        if data:
            self.transport.write(data)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()
