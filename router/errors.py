"""The router's error tree, mapped once to HTTP at the proxy boundary.

::

    RouterError                 -> 5xx with a JSON body {"error": {"message", "type", "code"}}
    ├── NoEndpoint              -> 503 + Retry-After (no ready endpoint, not holding)
    ├── QueueFull               -> 503 + Retry-After (--max-queue reached)
    ├── QueueTimeout            -> 504 (held longer than --queue-timeout-s)
    ├── UpstreamUnavailable     -> 502 (refused/reset on the first try and the retry, or any
    │                                  other upstream failure before the response headers)
    └── UpstreamTimeout         -> 504 (no response headers in time)

Request errors (body over --max-body-bytes -> 413) are answered directly by the proxy.
"""

from __future__ import annotations

import json


class RouterError(Exception):
    status = 500
    kind = "router_error"
    retry_after_s: int | None = None


class NoEndpoint(RouterError):
    status = 503
    kind = "no_ready_endpoint"
    retry_after_s = 1


class QueueFull(RouterError):
    status = 503
    kind = "router_queue_full"
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


def error_body(status: int, kind: str, message: str) -> bytes:
    """An OpenAI-style JSON error body, so SDK clients show the message."""
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


def sse_error_event(kind: str, message: str) -> bytes:
    """The last event of a stream that broke upstream after bytes were sent."""
    return b"data: " + json.dumps({"error": {"message": message, "type": kind}}).encode() + b"\n\n"
