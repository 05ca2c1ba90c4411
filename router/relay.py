"""How a response is relayed, the same on every path: one place for each rule.

The router relays an upstream response three ways: the ASGI way (``send`` messages), the
ASGI way through the protocol's direct writes (:meth:`router.proxy.Proxy._stream`), and the
fast path (:mod:`router.fast_path`, in the upstream client's callbacks). The mechanics
differ; the rules do not, and they live here:

* which responses are read whole and written in one go (:func:`one_shot`), and which are
  streamed as they come;
* when an OpenAI stream has reached its end (:func:`ends_stream`: its ``data: [DONE]``
  event is relayed, so a client that leaves after it is not a client that left early);
* what the client is told when the upstream breaks mid-response (:func:`broke` counts it
  and names it; :func:`broken_tail` ends a stream already begun, :func:`broken_body` is the
  502 of a one-shot response of which nothing was sent);
* how a finished work request is counted (:meth:`router.metrics.RouterMetrics.done`: its
  time in the system, W, and its status, together), and that its time to first byte is
  observed when the status line is written.
"""

from __future__ import annotations

from router.errors import error_body, sse_error_event
from router.metrics import RouterMetrics
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


def ends_stream(chunk: bytes) -> bool:
    """Whether ``chunk`` ends an OpenAI stream (its ``data: [DONE]`` event)."""
    return chunk.endswith(SSE_DONE) or chunk.endswith(SSE_DONE_CRLF)


def broke(metrics: RouterMetrics, ep: Endpoint, exc: UpstreamFailure) -> str:
    """The upstream ``ep`` broke mid-response: counted (by its reason); what the client is
    told."""
    metrics.upstream_error(ep.label, exc.reason)
    return f"upstream {ep.label} failed mid-response"


def broken_tail(message: str, is_sse: bool) -> bytes:
    """The last bytes of a response already begun whose upstream broke: an SSE error event
    for an event stream, else nothing (a body with a Content-Length is left short and the
    connection closed, so the client sees it cut off)."""
    return sse_error_event("upstream_broken", message) if is_sse else b""


def broken_body(message: str) -> bytes:
    """The body of the 502 for a one-shot response that broke before anything was sent."""
    return error_body(502, "upstream_broken", message)
