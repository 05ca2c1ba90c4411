"""A request's priority class as the client states it (vLLM's ``priority`` convention)."""

from __future__ import annotations

import json

from router.errors import BadPriority
from router.upstream import RequestHeaders

PRIORITY_HEADER = b"x-request-priority"


def request_priority(headers: RequestHeaders, body: bytes) -> int:
    """A request's priority, vLLM's convention (lower first; 0 if absent): the
    ``x-request-priority`` header, else the JSON body's ``priority`` (parsed only when the
    body names it). BadPriority when either is not an integer.

    >>> request_priority([(b"x-request-priority", b"-1")], b"{}")
    -1
    >>> request_priority([], b'{"model": "m", "priority": 5}')
    5
    """
    for name, value in headers:
        if name == PRIORITY_HEADER:
            try:
                return int(value)
            except ValueError:
                raise BadPriority(
                    f"x-request-priority must be an integer, got {value[:40]!r}"
                ) from None
    if b'"priority"' not in body:
        return 0
    try:
        doc = json.loads(body)
    except ValueError:
        return 0  # not JSON: the upstream answers it
    priority = doc.get("priority", 0) if isinstance(doc, dict) else 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadPriority(f"priority must be an integer, got {str(priority)[:40]!r}")
    return priority
