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
attributes of uvicorn's own); ``tests/component/test_router_server.py`` and
``tests/integration/test_router_emulator.py``'s disconnect tests run through it.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn._types import ASGI3Application, ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

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

Hooks = set[Callable[[], None]]


def _nothing() -> None:
    """A finished cycle's ``on_response``."""


class HookedHttpToolsProtocol(HttpToolsProtocol):
    """``uvicorn.run(app, http=HookedHttpToolsProtocol)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._disconnect_hooks: Hooks = set()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]
        scope[DISCONNECT_HOOKS] = self._disconnect_hooks

    def on_headers_complete(self) -> None:
        """uvicorn's, building a :class:`Cycle`."""
        parser = self.parser
        http_version = parser.get_http_version()
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
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
            self._start_asgi_task(cycle, app)
        else:
            # Pipelined HTTP requests need to be queued up.
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))

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

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        hooks = list(self._disconnect_hooks)
        self._disconnect_hooks.clear()
        for hook in hooks:
            hook()


class Cycle(RequestResponseCycle):
    """uvicorn's ``RequestResponseCycle`` (same attributes, same ASGI behaviour), lighter,
    and writing a response start marked :data:`BODY_FOLLOWS` with its body."""

    def __init__(self, protocol: HookedHttpToolsProtocol, keep_alive: bool) -> None:
        # Not super().__init__: the same attributes, set from the protocol directly.
        self.scope = protocol.scope
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
        # disconnected, more_body, response_started, response_complete, chunked_encoding,
        # expected_content_length and _head start as the class's values below (an
        # instance attribute once set), which saves setting them for each request.

    disconnected = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    _head: bytes | None = None  # a start held for the body that follows
    task: asyncio.Task[None] | None = None  # the request's task, while it runs

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
        the body to choose where the request goes (:mod:`router.models`)."""
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
        self.on_response()
        return True

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
        return True

    def stream_chunk(self, chunk: bytes) -> None:
        """One chunk of a response begun with :meth:`stream_start` (the caller waits on
        ``flow.drain()`` while ``flow.write_paused``, as ``send`` does)."""
        if chunk and not self.disconnected:
            self.transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))

    def stream_end(self, tail: bytes) -> None:
        """The last chunk (``tail``, may be empty) and the end of the response."""
        if self.disconnected or self.response_complete:  # as send
            return
        last = b"%x\r\n%b\r\n0\r\n\r\n" % (len(tail), tail) if tail else b"0\r\n\r\n"
        self.transport.write(last)
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

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
            await self.flow.drain()
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
