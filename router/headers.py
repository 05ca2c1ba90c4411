"""Which headers cross the router, in each direction, and how they are written.

RFC 9110 §7.6.1's hop-by-hop headers, and those named in a ``Connection`` header, are never
forwarded in either direction; nor are those the upstream client sets itself (host,
content-length: a response's Content-Length is passed on with the body it measures). One
pass each: the ASGI way's request headers (:func:`request_headers`, names lowercased), the
fast path's (:func:`forward_headers`, uvicorn's names are lowercase already), a response's
as ASGI pairs (:func:`response_headers`) or as a header block written directly
(:func:`response_block`), and the block of an error the router answers itself
(:func:`error_block`).
"""

from __future__ import annotations

from router.upstream import RESPONSE_DROP, RequestHeaders

# Never forwarded in either direction (a response's Content-Length goes with its body).
HOP_BY_HOP = RESPONSE_DROP | {b"content-length"}
# An error answered by the router (router.errors.error_body) is JSON.
JSON_HEADERS = [(b"content-type", b"application/json")]


def request_headers(raw: list[tuple[bytes, bytes]]) -> tuple[RequestHeaders, int]:
    """Forwardable request headers (hop-by-hop ones and those named in Connection
    dropped, names lowercased), and the declared Content-Length (0 if none or unreadable;
    the largest if several), in one pass."""
    out = []
    declared = 0
    extra: set[bytes] | None = None
    for item in raw:
        name = item[0]
        lname = name.lower()
        if lname in HOP_BY_HOP:
            if lname == b"content-length":
                try:
                    length = int(item[1])
                except ValueError:
                    length = 0
                if length > declared:  # the largest, if several
                    declared = length
            elif lname == b"connection":
                extra = extra or set()
                extra.update(v.strip().lower() for v in item[1].split(b","))
            continue
        out.append(item if lname == name else (lname, item[1]))
    if extra:
        out = [item for item in out if item[0] not in extra]
    return out, declared


def forward_headers(
    headers: list[tuple[bytes, bytes]],
) -> tuple[RequestHeaders, int, bool]:
    """:func:`request_headers` of headers whose names are lowercase already (uvicorn's),
    and whether the body is chunked (a Transfer-Encoding)."""
    out = []
    declared = 0
    chunked = False
    extra: set[bytes] | None = None
    for item in headers:
        name = item[0]
        if name in HOP_BY_HOP:
            if name == b"content-length":
                try:
                    length = int(item[1])
                except ValueError:
                    length = 0
                if length > declared:
                    declared = length
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"connection":
                extra = extra or set()
                extra.update(v.strip().lower() for v in item[1].split(b","))
            continue
        out.append(item)
    if extra:
        out = [item for item in out if item[0] not in extra]
    return out, declared, chunked


def response_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    extra: set[bytes] = set()
    out = []
    for name, value in raw:
        lname = name.lower()
        if lname == b"connection":
            extra.update(v.strip().lower() for v in value.split(b","))
            continue
        if lname in RESPONSE_DROP:
            continue
        out.append((lname, value))
    if extra:
        out = [(n, v) for n, v in out if n not in extra]
    return out


def response_block(raw: list[tuple[bytes, bytes]]) -> bytes:
    """:func:`response_headers` as a header block (``name: value\\r\\n`` lines), in one
    pass when no Connection header names others to drop."""
    out: list[bytes] = []
    for name, value in raw:
        lname = name.lower()
        if lname in RESPONSE_DROP:
            if lname == b"connection":
                return b"".join(b"%s: %s\r\n" % item for item in response_headers(raw))
            continue
        out += (lname, b": ", value, b"\r\n")
    return b"".join(out)


def error_block(body: bytes) -> bytes:
    """The header block of an error answered by the router (as
    :meth:`router.proxy.Proxy._reply_error` writes it)."""
    return b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
