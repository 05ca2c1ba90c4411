"""The router's admin routes on FastAPI: ``/router/status`` matches the schema it serves.

A real router subprocess in front of a real emulator (one slot), two requests through it
so one runs and one is held; the status document is validated against the router's own
OpenAPI schema (``/openapi.json``), which must also refuse what ARCHITECTURE.md does not
allow (an unknown state, an extra field, a negative count).
"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import jsonschema

from tests.support import ProcessTracker, Server, wait_for

MODEL = "test-model"


def status_schema(router: Server) -> dict[str, Any]:
    """The response schema of ``GET /router/status``, with the components it refers to."""
    openapi = httpx.get(f"{router.url}/openapi.json", timeout=10).json()
    op = openapi["paths"]["/router/status"]["get"]
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    return {**schema, "components": openapi["components"]}


def long_request() -> bytes:
    data = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 100_000}).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    )


def test_status_validates_against_the_routers_openapi_schema(procs: ProcessTracker) -> None:
    emulator = procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", MODEL,
         "--max-num-seqs", "1", "--max-model-len", "200000", "--time-scale", "0.1",
         "--startup-s", "0"],
        name="emulator",
    )  # fmt: skip
    router = procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "1",
         "--endpoints", emulator.url, "--hold-when-full", "--max-queue", "4"],
        name="router",
    )  # fmt: skip
    schema = status_schema(router)
    validator = jsonschema.Draft202012Validator(schema)
    conns = [socket.create_connection(("127.0.0.1", router.port)) for _ in range(2)]
    try:
        for conn in conns:
            conn.sendall(long_request())

        def status() -> dict[str, Any] | None:
            doc = httpx.get(f"{router.url}/router/status", timeout=10).json()
            return doc if doc["inflight"] == 2 else None

        doc = wait_for(status, 30, what="one running and one held request")
    finally:
        for conn in conns:
            conn.close()
    assert doc == {
        "inflight": 2,
        "queued": 1,
        "slots_per_endpoint": 1,
        "endpoints": [{"url": emulator.url, "state": "ready", "inflight": 1}],
    }
    validator.validate(doc)
    wait_for(
        lambda: httpx.get(f"{router.url}/router/status", timeout=10).json()["inflight"] == 0,
        30,
        what="the requests to be released",
    )


BAD_DOCUMENTS = [
    {"inflight": 0, "queued": 0, "slots_per_endpoint": 1,
     "endpoints": [{"url": "http://a", "state": "sleeping", "inflight": 0}]},
    {"inflight": 0, "queued": 0, "slots_per_endpoint": 1, "endpoints": [], "extra": 1},
    {"inflight": -1, "queued": 0, "slots_per_endpoint": 1, "endpoints": []},
    {"inflight": 0, "queued": 0, "endpoints": []},
]  # fmt: skip


def test_the_served_schema_refuses_what_the_contract_does_not_allow(
    procs: ProcessTracker,
) -> None:
    router = procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--endpoints", ""], name="router"
    )
    validator = jsonschema.Draft202012Validator(status_schema(router))
    for bad in BAD_DOCUMENTS:
        assert not validator.is_valid(bad), bad
    empty = httpx.get(f"{router.url}/router/status", timeout=10).json()
    validator.validate(empty)
    # The admin app serves no interactive docs; /v1/* is not part of its schema.
    assert httpx.get(f"{router.url}/docs", timeout=10).status_code == 404
    paths = httpx.get(f"{router.url}/openapi.json", timeout=10).json()["paths"]
    assert not any(p.startswith("/v1/") for p in paths)
