"""Header filtering on the hot path: hop-by-hop headers never cross the router."""

from __future__ import annotations

from router.headers import request_headers, response_headers


def test_request_headers_drop_hop_by_hop_and_connection_named_ones() -> None:
    raw = [
        (b"host", b"evil:1"),
        (b"connection", b"keep-alive, X-Private"),
        (b"x-private", b"1"),
        (b"keep-alive", b"timeout=5"),
        (b"transfer-encoding", b"chunked"),
        (b"content-length", b"10"),
        (b"upgrade", b"h2c"),
        (b"te", b"trailers"),
        (b"proxy-authorization", b"x"),
        (b"authorization", b"Bearer k"),
        (b"Content-Type", b"application/json"),
    ]
    assert request_headers(raw) == (
        [(b"authorization", b"Bearer k"), (b"content-type", b"application/json")],
        10,  # the declared Content-Length, read in the same pass
    )


def test_request_headers_read_the_largest_content_length_and_ignore_a_bad_one() -> None:
    assert request_headers([(b"content-length", b"5"), (b"Content-Length", b"7")])[1] == 7
    assert request_headers([(b"content-length", b"x")]) == ([], 0)


def test_response_headers_keep_length_drop_hop_by_hop() -> None:
    raw = (
        (b"Content-Type", b"text/event-stream"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Connection", b"close, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Content-Length", b"12"),
        (b"X-Request-Id", b"abc"),
    )
    assert response_headers(list(raw)) == [
        (b"content-type", b"text/event-stream"),
        (b"content-length", b"12"),
        (b"x-request-id", b"abc"),
    ]
