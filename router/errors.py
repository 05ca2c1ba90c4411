"""The router's error tree, mapped once to HTTP at the proxy boundary.

::

    RouterError                 -> its status, JSON body {"error": {"message", "type", "code"}}
    ├── RequestRefused          -> 4xx, answered by the router, never forwarded (router.routes)
    │   ├── BadPath             -> 400 (dot-segment, encoded dot/slash/backslash, not /v1/)
    │   ├── BadPriority         -> 400 (x-request-priority or body priority not an integer)
    │   ├── BadBudget           -> 400, vLLM's body (a budget vLLM would refuse: router.tokens)
    │   ├── BadBody             -> 400 (a body nested too deeply to read: router.tokens)
    │   ├── RouteNotFound       -> 404 (path not in the route table)
    │   └── MethodNotAllowed    -> 405 + Allow (path in the table, another method)
    ├── NoEndpoint              -> 503 + Retry-After (no ready endpoint, not holding)
    ├── QueueFull               -> 503 + Retry-After (--max-queue reached)
    ├── HeldTooLong             -> 503 + Retry-After (overtaken past its class's deadline
    │                                  + --max-late-s: the lateness bound)
    ├── Shed                    -> 429 + Retry-After (a sheddable class, no free slot)
    ├── QueueTimeout            -> 504 (held longer than --queue-timeout-s)
    ├── UpstreamUnavailable     -> 502 (refused/reset on the first try and the retry, or any
    │                                  other upstream failure before the response headers)
    └── UpstreamTimeout         -> 504 (no response headers in time)

A body over --max-body-bytes (413) is answered directly by the proxy.

:class:`NotDelivered` is not a RouterError: it never reaches a client. The upstream client
raises it (refused, never accepted, reset before any response byte) and the dispatcher's
admission (:class:`router.dispatch.Admission`) catches it to retry on another endpoint.
"""

from __future__ import annotations

import json


class RouterError(Exception):
    status = 500
    kind = "router_error"
    retry_after_s: int | None = None
    allow: bytes | None = None  # the Allow header of a 405
    param: str | None = None  # the request field at fault (vLLM's error ``param``)
    reason = "bad_request"  # its router_client_errors_total reason, where counted there


class RequestRefused(RouterError):
    status = 400
    kind = "bad_request"


class BadPath(RequestRefused):
    status = 400
    kind = "bad_path"


class BadPriority(RequestRefused):
    status = 400
    kind = "bad_priority"


class RouteNotFound(RequestRefused):
    status = 404
    kind = "route_not_found"


class MethodNotAllowed(RequestRefused):
    status = 405
    kind = "method_not_allowed"

    def __init__(self, message: str, allow: bytes) -> None:
        super().__init__(message)
        self.allow = allow


class NoEndpoint(RouterError):
    status = 503
    kind = "no_ready_endpoint"
    retry_after_s = 1


class QueueFull(RouterError):
    status = 503
    kind = "router_queue_full"
    retry_after_s = 1


class HeldTooLong(RouterError):
    """Held past its class's deadline plus ``--max-late-s`` while others were served
    (:mod:`inflight.control.hold_order`): refused so that no request waits without bound."""

    status = 503
    kind = "router_held_too_long"
    retry_after_s = 1


class Shed(RouterError):
    """A request of a sheddable priority class found no free slot: refused, never held."""

    status = 429
    kind = "router_shed"
    retry_after_s = 1


class QueueTimeout(RouterError):
    status = 504
    kind = "router_queue_timeout"


class UpstreamUnavailable(RouterError):
    status = 502
    kind = "upstream_unavailable"


class UpstreamTimeout(RouterError):
    status = 504
    kind = "upstream_timeout"


class NotDelivered(Exception):
    """The request never reached the endpoint, so it is safe to send to another one.

    ``reason`` is the ``router_upstream_errors_total`` label (``connect``, ``reset``).
    """

    reason = "connect"


def error_body(status: int, kind: str, message: str, param: str | None = None) -> bytes:
    """An OpenAI-style JSON error body, so SDK clients show the message (with ``param``:
    vLLM's, naming the field at fault)."""
    if param is None:
        return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
    error = {"message": message, "type": kind, "param": param, "code": status}
    return json.dumps({"error": error}).encode()


def sse_error_event(kind: str, message: str) -> bytes:
    """The last event of a stream that broke upstream after bytes were sent."""
    return b"data: " + json.dumps({"error": {"message": message, "type": kind}}).encode() + b"\n\n"
