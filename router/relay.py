"""How a response is relayed, the same on every path: one place for each rule.

The router relays an upstream response three ways: the ASGI way (``send`` messages), the
ASGI way through the protocol's direct writes (:meth:`router.proxy.Proxy._stream`), and the
fast path (:mod:`router.fast_path`, in the upstream client's callbacks). The mechanics
differ; the rules do not, and they live here:

* which responses are read whole and written in one go (:func:`one_shot`), and which are
  streamed as they come;
* when an OpenAI stream has reached its end (:meth:`Reply.relayed`: its ``data: [DONE]``
  event is relayed, so a client that leaves after it is not a client that left early);
* what the client is told when the upstream breaks mid-response (:func:`broken_tail` ends
  a stream already begun, :func:`broken_body` is the 502 of a one-shot response of which
  nothing was sent);
* what is recorded of a work request's response, by one object on every path
  (:class:`Reply`): its time to first byte when the status line is written, its stream's
  end, a mid-response failure, and its end (W and status, together).
"""

from __future__ import annotations

from typing import Protocol

from router.errors import error_body, sse_error_event
from router.metrics import NO_ENDPOINT, RouterMetrics
from router.pool import Endpoint
from router.upstream import UpstreamFailure

# A response up to this size with a Content-Length is read whole and sent in one write
# (fewer writes for ordinary completions); anything else is streamed.
ONE_SHOT_MAX_BYTES = 256 * 1024
# The status counted for a client that left (nginx's convention).
CLIENT_CLOSED = 499
# The last event of an OpenAI stream (vLLM writes it as its own chunk).
SSE_DONE = b"data: [DONE]\n\n"
SSE_DONE_CRLF = b"data: [DONE]\r\n\r\n"


def one_shot(length: int | None, is_sse: bool) -> bool:
    """Whether a response is read whole, then written at once: a Content-Length up to
    :data:`ONE_SHOT_MAX_BYTES`, and not an event stream."""
    return length is not None and length <= ONE_SHOT_MAX_BYTES and not is_sse


def broken_tail(message: str, is_sse: bool) -> bytes:
    """The last bytes of a response already begun whose upstream broke: an SSE error event
    for an event stream, else nothing (a body with a Content-Length is left short and the
    connection closed, so the client sees it cut off)."""
    return sse_error_event("upstream_broken", message) if is_sse else b""


def broken_body(message: str) -> bytes:
    """The body of the 502 for a one-shot response that broke before anything was sent."""
    return error_body(502, "upstream_broken", message)


class Reply:
    """One work request's response as every path writes it down (a mixin: the ASGI way's
    request watch and the fast path's cycle are each one, so no object is added a request).

    The I/O differs by path (``send`` messages, the protocol's direct writes, the upstream
    client's callbacks); what is *recorded* of a response does not, and is recorded here
    only:

    * :meth:`began`: the status line is written: its time to first byte (TTFB);
    * :meth:`relayed`: a chunk of an event stream went out; its ``data: [DONE]`` marks the
      response whole (``finished``), so a client that leaves after it did not leave early;
    * :meth:`broke`: the upstream broke mid-response: counted by its reason, the request
      marked done (nothing left to cancel), and the bytes the client is told: the tail of a
      stream already begun (:func:`broken_tail`) or, with nothing sent, the 502 body
      (:func:`broken_body`);
    * :meth:`ended`: the request is over: its time in the system (W) and its status,
      together (with its TTFB too, one clock read, when the response was written whole).

    A class using it provides ``_proxy`` (its metrics and clock), ``t0`` (when the request
    came; None for a metadata call, which is neither timed nor counted), ``done`` and
    ``finished``.
    """

    __slots__ = ()
    _proxy: _Counts
    t0: float | None
    done: bool
    finished: int

    def began(self) -> None:
        """The response's status line is written: its time to first byte."""
        t0 = self.t0
        if t0 is not None:
            proxy = self._proxy
            proxy.metrics.ttfb.observe(proxy.clock() - t0)

    def relayed(self, chunk: bytes, status: int) -> None:
        """A chunk of an event stream was relayed: the stream's end, if it ends with the
        ``data: [DONE]`` event (the one place this rule is written)."""
        if chunk.endswith(SSE_DONE) or chunk.endswith(SSE_DONE_CRLF):
            self.finished = status  # type: ignore[misc]  # (a slot of the class using it)

    def broke(self, ep: Endpoint, exc: UpstreamFailure, begun: bool, is_sse: bool) -> bytes:
        """The upstream ``ep`` broke mid-response: counted; what the client is told (the
        tail of a response ``begun``, else a whole 502 body)."""
        self.done = True  # type: ignore[misc]  # (a slot of the class using it)
        self._proxy.metrics.upstream_error(ep.label, exc.reason)
        message = f"upstream {ep.label} failed mid-response"
        if begun:
            return broken_tail(message, is_sse)
        return broken_body(message)

    def ended(self, ep: Endpoint | None, code: int, first_byte: bool = False) -> None:
        """The request is over with ``code`` (its endpoint, if one took it): W and status
        counted; its time to first byte too when ``first_byte`` (written whole just now)."""
        t0 = self.t0
        if t0 is None:
            return
        proxy = self._proxy
        metrics = proxy.metrics
        elapsed = proxy.clock() - t0
        if first_byte:
            metrics.ttfb.observe(elapsed)
        metrics.done(ep.label if ep is not None else NO_ENDPOINT, code, elapsed)


class _Counts(Protocol):
    """What :class:`Reply` records through: the proxy's metrics and clock."""

    metrics: RouterMetrics

    def clock(self) -> float: ...
