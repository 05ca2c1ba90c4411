"""A request's priority (vLLM's ``priority`` convention: lower first; 0 if absent), from
the sources the operator trusts (issue 39, item 4).

By default a client cannot choose its class: every request has priority 0 unless the
deployment names a header its gateway sets (``--priority-header NAME``: the gateway
overwrites whatever the client sent under that name), or opts in to the client's own
``x-request-priority`` header and body ``priority`` (``--client-priority``: a trusted
client, or a benchmark). :class:`PrioritySource` is that rule; :func:`request_priority` the
client's own statement.
"""

from __future__ import annotations

import json

from router.errors import BadPriority
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


class PrioritySource:
    """``priority(headers, body)``: the trusted header's value when the request has it
    (``header``, lowercase), else the client's own statement when ``client`` (opted in),
    else 0.

    >>> PrioritySource(None, False)([(b"x-request-priority", b"-9")], b'{"priority": -9}')
    0
    >>> PrioritySource(b"x-tenant-priority", False)([(b"x-tenant-priority", b"5")], b"{}")
    5
    >>> PrioritySource(None, True)([(b"x-request-priority", b"-9")], b"{}")
    -9
    """

    __slots__ = ("client", "header")

    def __init__(self, header: bytes | None = None, client: bool = False) -> None:
        self.header = header.lower() if header else None
        self.client = client

    def __call__(self, headers: RequestHeaders, body: bytes) -> int:
        header = self.header
        if header is not None:
            for name, value in headers:
                if name == header:
                    return _header_int(name, value)
        if self.client:
            return request_priority(headers, body)
        return 0
