"""A request's priority (vLLM's ``priority`` convention: lower first; 0 if absent), from
the sources the operator trusts (issue 39, item 4).

By default a client cannot choose its class: every request has priority 0 unless the
deployment names a header its gateway sets (``--priority-header NAME``: the gateway
overwrites whatever the client sent under that name), gives a route its priority
(``--route-priority /v1/embeddings=10``: the path, query string aside), or opts in to the
client's own ``x-request-priority`` header and body ``priority`` (``--client-priority``: a
trusted client, or a benchmark). In that order: the trusted header, the route, the client.
:class:`PrioritySource` is that rule; :func:`request_priority` the client's own statement;
:func:`parse_route_priority` one ``--route-priority`` value.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from router.errors import BadPriority

if TYPE_CHECKING:  # (router.upstream imports aiohttp and httptools; router.config imports this)
    from router.upstream import RequestHeaders

PRIORITY_HEADER = b"x-request-priority"


def _header_int(name: bytes, value: bytes) -> int:
    try:
        return int(value)
    except ValueError:
        raise BadPriority(
            f"{name.decode('latin-1')} must be an integer, got {value[:40]!r}"
        ) from None


def request_priority(headers: RequestHeaders, body: bytes) -> int:
    """A request's priority as its client states it: the ``x-request-priority`` header,
    else the JSON body's ``priority`` (parsed only when the body names it). BadPriority
    when either is not an integer.

    >>> request_priority([(b"x-request-priority", b"-1")], b"{}")
    -1
    >>> request_priority([], b'{"model": "m", "priority": 5}')
    5
    """
    for name, value in headers:
        if name == PRIORITY_HEADER:
            return _header_int(name, value)
    if b'"priority"' not in body:
        return 0
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return 0  # not JSON, or nested too deeply: the upstream (or token admission) answers
    priority = doc.get("priority", 0) if isinstance(doc, dict) else 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadPriority(f"priority must be an integer, got {str(priority)[:40]!r}")
    return priority


def parse_route_priority(text: str) -> tuple[str, int]:
    """One ``--route-priority ROUTE=PRIORITY`` value: ValueError naming what is wrong.

    >>> parse_route_priority("/v1/embeddings=10")
    ('/v1/embeddings', 10)
    """
    route, sep, value = text.rpartition("=")
    route = route.strip()
    if not sep or not route.startswith("/") or "?" in route:
        raise ValueError(
            f"--route-priority wants ROUTE=PRIORITY with ROUTE a path such as "
            f"/v1/embeddings (no query string), got {text!r}"
        )
    try:
        return route, int(value)
    except ValueError:
        raise ValueError(
            f"--route-priority {text!r}: PRIORITY must be an integer, got {value!r}"
        ) from None


class PrioritySource:
    """``priority(path, headers, body)``: the trusted header's value when the request has it
    (``header``, lowercase), else its route's (``routes``: path without the query string →
    priority), else the client's own statement when ``client`` (opted in), else 0.

    >>> PrioritySource(None, False)(b"/v1/completions", [(b"x-request-priority", b"-9")], b"{}")
    0
    >>> PrioritySource(b"x-tenant-priority")(b"/v1/chat", [(b"x-tenant-priority", b"5")], b"")
    5
    >>> PrioritySource(None, True)(b"/v1/completions", [(b"x-request-priority", b"-9")], b"{}")
    -9
    >>> PrioritySource(routes={"/v1/embeddings": 10})(b"/v1/embeddings?x=1", [], b"{}")
    10
    """

    __slots__ = ("client", "header", "routes")

    def __init__(
        self,
        header: bytes | None = None,
        client: bool = False,
        routes: dict[str, int] | None = None,
    ) -> None:
        self.header = header.lower() if header else None
        self.client = client
        self.routes = {r.encode("latin-1"): p for r, p in (routes or {}).items()}

    def __call__(self, path: bytes, headers: RequestHeaders, body: bytes) -> int:
        header = self.header
        if header is not None:
            for name, value in headers:
                if name == header:
                    return _header_int(name, value)
        routes = self.routes
        if routes:
            priority = routes.get(path.partition(b"?")[0])
            if priority is not None:
                return priority
        if self.client:
            return request_priority(headers, body)
        return 0
