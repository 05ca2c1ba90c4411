"""router/model_pools.py without I/O: which pool a request and an endpoint belong to, the
aggregated /v1/models, vLLM's 404, and the pools' labelled series."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from inflight import names
from inflight.emulator.openai_api import ApiError
from router.dispatch import Dispatcher
from router.model_pools import ModelFront, ModelPools, model_not_found, model_of
from router.pool import DRAINING, Pool
from router.proxy import Proxy

U1, U2, U3 = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"


def pools(discover: bool = False) -> ModelPools:
    return ModelPools(lambda: Dispatcher(Pool(4), hold_when_full=True), discover=discover)


def urls(p: ModelPools, name: str) -> list[str]:
    return [ep.url for ep in p.pools[name].dispatcher.pool.endpoints() if ep.state != DRAINING]


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (b'{"model": "a", "prompt": "x"}', "a"),
        (b' {"messages": [], "model": "a"}', "a"),
        # A nested "model" (a JSON schema in response_format) is not the request's.
        (b'{"response_format": {"schema": {"model": "x"}}, "prompt": "p"}', None),
        (b'{"model": 3}', None),
        (b"[1]", None),
        (b"--boundary\r\nContent-Disposition: form-data", None),
        (b'{"model": "a"', None),
        (b"", None),
    ],
)
def test_model_of(body: bytes, model: str | None) -> None:
    assert model_of(body) == model


def test_unknown_model_body_is_vllms() -> None:
    """The emulator's error is vLLM's (its serving layer's NotFoundError for a model)."""
    vllm = ApiError(404, "The model `nope` does not exist.", "model").body()
    assert json.loads(model_not_found("nope")) == vllm


def test_discovery_puts_each_endpoint_in_its_first_base_models_pool() -> None:
    p = pools(discover=True)
    p.apply([U1, U2, U3])
    assert p.pools == {}  # nobody answered /v1/models yet: no pool
    p.learn(U1, [{"id": "a"}])
    p.learn(U2, [{"id": "b"}, {"id": "b-lora", "parent": "b"}])
    p.learn(U3, [{"id": "b"}])
    assert (urls(p, "a"), urls(p, "b")) == ([U1], [U2, U3])
    lookup = p.lookup("b-lora")
    assert lookup is not None and lookup.name == "b"
    assert p.lookup("c") is None
    default = p.default()
    assert default is not None and default.name == "a"
    assert [m["id"] for m in p.models_list(0)["data"]] == ["a", "b", "b-lora"]


def test_an_endpoint_that_leaves_discovery_leaves_its_pool_which_stays() -> None:
    p = pools(discover=True)
    p.apply([U1, U2])
    p.learn(U1, [{"id": "a"}])
    p.learn(U2, [{"id": "b"}])
    b = p.pools["b"]
    ep = b.dispatcher.pool.get(U2)
    assert ep is not None
    b.dispatcher.pool.acquire(ep)  # a request in flight on it
    p.apply([U1])
    assert ep.state == DRAINING and ep.inflight == 1, "it finishes what it holds"
    b.dispatcher.release(ep)
    assert p.pools["b"].dispatcher.pool.endpoints() == []
    assert p.lookup("b") is b, "a pool once seen stays: its requests wait for a replica"
    assert [m["id"] for m in p.models_list(0)["data"]] == ["a", "b"]
    p.learn(U2, [{"id": "b"}])  # answered after it left: ignored
    assert urls(p, "b") == []


def test_counts_survive_rediscovery() -> None:
    p = pools(discover=True)
    p.apply([U1])
    p.learn(U1, [{"id": "a"}])
    pool = p.pools["a"].dispatcher.pool
    ep = pool.get(U1)
    assert ep is not None
    pool.acquire(ep)
    p.apply([U1])
    p.learn(U1, [{"id": "a"}])
    assert pool.get(U1) is ep and ep.inflight == 1


def test_configured_pools_learn_the_other_ids_of_their_endpoints() -> None:
    p = pools()
    p.set_endpoints("a", [U1])
    p.set_endpoints("b", [])
    assert p.to_probe() == [U1]
    p.learn(U1, [{"id": "a"}, {"id": "a-lora", "parent": "a"}])
    hit = p.lookup("a-lora")
    assert hit is not None and hit.name == "a"
    # b has no endpoint yet: still listed, so clients see the model (requests are held).
    listed = {m["id"]: m for m in p.models_list(0)["data"]}
    assert set(listed) == {"a", "a-lora", "b"}
    assert listed["b"]["object"] == "model" and listed["b"]["parent"] is None


def test_every_pools_series_carries_its_model() -> None:
    p = pools()
    p.set_endpoints("a", [U1])
    p.set_endpoints("b", [U2, U3])
    for _ in range(3):
        p.pools["a"].dispatcher.enter()
    registry = CollectorRegistry()
    registry.register(p.collector())
    value = registry.get_sample_value
    assert value(names.ROUTER_INFLIGHT, {"model": "a"}) == 3
    assert value(names.ROUTER_INFLIGHT, {"model": "b"}) == 0
    assert value(names.ROUTER_ENDPOINTS, {"model": "b", "state": "ready"}) == 2
    assert value(names.ROUTER_INFLIGHT) is None, "no series without a model"


class _NoUpstream:
    """The front's own answers never reach an upstream."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"upstream used: {name}")


async def _call(front: ModelFront, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    sent: list[MutableMapping[str, Any]] = []
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode()}
    scope |= {"headers": [(b"content-type", b"application/json")], "query_string": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await front(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_front_answers_unknown_models_and_the_list_itself() -> None:
    p = pools()
    p.set_endpoints("a", [U1])
    p.bind(lambda d, m: Proxy(d, m, lambda: _NoUpstream(), 1 << 20, 1.0))
    front = ModelFront(p, 1 << 20)
    status, body = asyncio.run(
        _call(front, "POST", "/v1/completions", b'{"model": "zz", "prompt": "x"}')
    )
    assert (status, json.loads(body)) == (404, json.loads(model_not_found("zz")))
    status, body = asyncio.run(_call(front, "GET", "/v1/models"))
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["a"]
    # A route the router does not forward is the proxy's answer, whatever the model.
    status, body = asyncio.run(_call(front, "POST", "/v1/nothing", b'{"model": "zz"}'))
    assert status == 404 and json.loads(body)["error"]["type"] == "route_not_found"


def test_a_body_over_the_limit_is_413_not_forwarded() -> None:
    p = pools()
    p.set_endpoints("a", [U1])
    p.bind(lambda d, m: Proxy(d, m, lambda: _NoUpstream(), 16, 1.0))
    front = ModelFront(p, 16)
    status, body = asyncio.run(_call(front, "POST", "/v1/completions", b'{"model": "a", "x": 1}'))
    assert status == 413 and json.loads(body)["error"]["type"] == "request_too_large"


def test_a_front_without_pools_says_so() -> None:
    front = ModelFront(pools(discover=True), 1 << 20)
    status, body = asyncio.run(_call(front, "POST", "/v1/completions", b'{"model": "a"}'))
    assert status == 503 and json.loads(body)["error"]["type"] == "no_ready_endpoint"
