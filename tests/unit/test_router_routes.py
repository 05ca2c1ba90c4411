"""The proxy's route table and path checks (router.routes): pure, table-driven."""

from __future__ import annotations

import pytest

from router.errors import BadPath, MethodNotAllowed, RequestRefused, RouteNotFound
from router.routes import OPENAI_ROUTES, RouteSpecError, RouteTable, parse_route

TABLE = RouteTable(OPENAI_ROUTES)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", b"/v1/completions"),
        ("POST", b"/v1/chat/completions"),
        ("POST", b"/v1/embeddings"),
        ("POST", b"/v1/responses"),
        ("GET", b"/v1/responses/resp_0123-abc"),
        ("POST", b"/v1/responses/resp_0123/cancel"),
        ("POST", b"/v1/audio/transcriptions"),
        ("GET", b"/v1/models"),
        ("HEAD", b"/v1/models"),  # a GET without the body (was 405)
        ("HEAD", b"/v1/responses/resp_1"),
        ("OPTIONS", b"/v1/chat/completions"),  # a CORS preflight (was 405)
        ("OPTIONS", b"/v1/completions"),
        ("OPTIONS", b"/v1/models"),
        ("OPTIONS", b"/v1/responses/resp_1/cancel"),
    ],
)
def test_openai_routes_are_forwarded(method: str, path: bytes) -> None:
    assert method in TABLE.lookup(method, path).methods


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/../admin",
        b"/v1/./completions",
        b"/v1/completions/..",
        b"/v1/completions/../../admin",
        b"/v1/%2e%2e/admin",
        b"/v1/%2E%2E/admin",
        b"/v1/.%2e/x",
        b"/v1/%2e./x",
        b"/v1/%2E/completions",
        b"/v1/responses/%2e%2e",
        b"/v1/responses/..",
        b"/v1/a%2fb",
        b"/v1%2F..%2Fadmin",
        b"/v1/a%5C..%5cadmin",
        b"/v1/..\\admin",
        b"/%761/completions",  # "/v1/" only once decoded: not what is forwarded
    ],
)
def test_dot_segments_and_hiding_escapes_are_400(path: bytes) -> None:
    for method in ("GET", "POST"):
        with pytest.raises(BadPath):
            TABLE.lookup(method, path)


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/load_lora_adapter",
        b"/v1/unload_lora_adapter",
        b"/v1/completions/",
        b"/v1//completions",
        b"/v1/%63ompletions",  # an escaped letter: not a table path as sent
        b"/v1/responses/",
        b"/v1/responses/a/b",
        b"/v1/.well-known",
        b"/v1/",
    ],
)
def test_paths_outside_the_table_are_404(path: bytes) -> None:
    with pytest.raises(RouteNotFound):
        TABLE.lookup("POST", path)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", b"/v1/completions", b"POST, OPTIONS"),
        ("HEAD", b"/v1/completions", b"POST, OPTIONS"),  # HEAD only where GET is
        ("DELETE", b"/v1/chat/completions", b"POST, OPTIONS"),
        ("PUT", b"/v1/embeddings", b"POST, OPTIONS"),
        ("POST", b"/v1/models", b"GET, HEAD, OPTIONS"),
        ("DELETE", b"/v1/responses/resp_1", b"GET, HEAD, OPTIONS"),
    ],
)
def test_other_methods_are_405_with_allow(method: str, path: bytes, allow: bytes) -> None:
    with pytest.raises(MethodNotAllowed) as info:
        TABLE.lookup(method, path)
    assert info.value.allow == allow
    assert info.value.status == 405


def test_every_refusal_is_a_request_refused_with_its_status() -> None:
    cases = {b"/v1/../x": 400, b"/v1/nope": 404, b"/v1/models": 405}
    for path, status in cases.items():
        with pytest.raises(RequestRefused) as info:
            TABLE.lookup("POST", path)
        assert info.value.status == status


def test_allowed_routes_join_the_table() -> None:
    extra = [parse_route("POST:/v1/load_lora_adapter"), parse_route("delete:/v1/models")]
    table = RouteTable((*OPENAI_ROUTES, *extra))
    assert "POST" in table.lookup("POST", b"/v1/load_lora_adapter").methods
    assert table.lookup("GET", b"/v1/models").allow == b"GET, HEAD, DELETE, OPTIONS"
    with pytest.raises(RouteNotFound):
        table.lookup("POST", b"/v1/unload_lora_adapter")


def test_a_template_route_from_the_flag() -> None:
    table = RouteTable([parse_route("GET:/v1/files/{file_id}/content")])
    assert table.lookup("GET", b"/v1/files/file-1/content").allow == b"GET, HEAD, OPTIONS"
    for path in (b"/v1/files/%2e%2e/content", b"/v1/files/../content"):
        with pytest.raises(BadPath):
            table.lookup("GET", path)
    with pytest.raises(RouteNotFound):
        table.lookup("GET", b"/v1/files/a%20b/content")  # an escape never fills a {name}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/v1/completions", "expected METHOD:/v1/path"),
        ("FETCH:/v1/x", "method must be one of"),
        ("CONNECT:/v1/x", "method must be one of"),
        ("POST:/admin", "must start with /v1/"),
        ("POST:v1/x", "must start with /v1/"),
        ("POST:/v1/../admin", "bad path segment '..'"),
        ("POST:/v1/./x", "bad path segment '.'"),
        ("POST:/v1//x", "bad path segment ''"),
        ("POST:/v1/x/", "bad path segment ''"),
        ("POST:/v1/a%2fb", "bad path segment 'a%2fb'"),
        ("POST:/v1/x?y=1", "bad path segment 'x?y=1'"),
        ("POST:/v1/{1x}", "bad path segment '{1x}'"),
    ],
)
def test_bad_route_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(RouteSpecError, match=message.replace("?", r"\?")):
        parse_route(text)
