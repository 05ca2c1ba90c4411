"""One router, two model pools (router/model_pools.py), in front of real emulator processes.

Clients are the OpenAI SDK and urllib; the replicas are emulators serving one model each.
Conditions are polled with ``wait_for`` (60 s: the machine is small and shared); nothing
asserts on speed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from tests.support import ProcessTracker, Server, wait_for

TIME_SCALE = "0.1"


def start_emulator(procs: ProcessTracker, *served: str) -> Server:
    return procs.start_inflight(
        [
            "emulator",
            "--host", "127.0.0.1",
            "--port", "{port}",
            "--served-model-name", *served,
            "--max-num-seqs", "2",
            "--time-scale", TIME_SCALE,
            "--startup-s", "0",
        ],
        name="emulator",
    )  # fmt: skip


def start_router(procs: ProcessTracker, *source: str) -> Server:
    return procs.start_inflight(
        [
            "router",
            "--host", "127.0.0.1",
            "--port", "{port}",
            "--slots-per-endpoint", "2",
            "--health-interval-s", "0.5",
            "--discover-interval-s", "0.2",
            "--hold-when-full",
            *source,
        ],
        name="router",
    )  # fmt: skip


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def by_model(router: Server) -> dict[str, list[str]]:
    doc = get_json(router.url + "/router/status")
    return {m["model"]: [e["url"] for e in m["endpoints"]] for m in doc.get("models") or []}


def gauge(router: Server, name: str) -> dict[str, float]:
    """``name``'s samples by their ``model`` label."""
    with urllib.request.urlopen(router.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[s.labels.get(names.ROUTER_MODEL_LABEL, "")] = s.value
    return out


def write_list(path: Path, urls: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(urls))
    tmp.rename(path)


def test_configured_pools_route_by_model_and_answer_vllms_404(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    a = start_emulator(procs, "model-a")
    b = start_emulator(procs, "model-b", "model-b-lora")
    file_a, file_b = tmp_path / "a.json", tmp_path / "b.json"
    write_list(file_a, [a.url])
    write_list(file_b, [b.url])
    router = start_router(
        procs,
        "--model-endpoints-file", f"model-a={file_a}",
        "--model-endpoints-file", f"model-b={file_b}",
    )  # fmt: skip
    assert by_model(router) == {"model-a": [a.url], "model-b": [b.url]}
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)

    for model in ("model-a", "model-b"):
        out = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert out.model == model  # the emulator of that model answered
    stream = client.completions.create(model="model-b", prompt="hi", max_tokens=3, stream=True)
    assert "".join(c.choices[0].text for c in stream)
    # Each pool counted its own requests: finished, by the pool's model label.
    with urllib.request.urlopen(router.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    finished = {
        s.labels["model"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == names.ROUTER_REQUESTS_RECEIVED
    }
    assert finished == {"model-a": 1.0, "model-b": 2.0}
    assert gauge(router, names.ROUTER_INFLIGHT) == {"model-a": 0.0, "model-b": 0.0}

    # An id the pool's endpoint lists (another served name, an adapter) routes there, once
    # the router has read the endpoint's /v1/models.
    wait_for(
        lambda: (
            {m["id"] for m in get_json(router.url + "/v1/models")["data"]}
            == {"model-a", "model-b", "model-b-lora"}
        ),
        timeout_s=60,
        what="the aggregated /v1/models",
    )
    lora = client.completions.create(model="model-b-lora", prompt="hi", max_tokens=2)
    assert lora.model == "model-b-lora"

    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="nope", prompt="hi", max_tokens=2)
    assert info.value.body == {
        "message": "The model `nope` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    # A route the router does not forward is still the proxy's 404, read before any body.
    req = urllib.request.Request(router.url + "/v1/load_lora_adapter", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 404
    assert json.loads(err.value.read())["error"]["type"] == "route_not_found"
    # The limits at the door come before the pools: counted once, the router's (no model).
    long_url = urllib.request.Request(router.url + "/v1/" + "a" * 9000, method="GET")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(long_url, timeout=5)
    assert err.value.code == 414
    with urllib.request.urlopen(router.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    refused = [
        (s.labels, s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == names.ROUTER_CLIENT_ERRORS and s.labels["reason"] == "url_too_long"
    ]
    assert refused == [({"reason": "url_too_long"}, 1.0)]

    # A pool's file changes: only that pool's endpoints follow.
    a2 = start_emulator(procs, "model-a")
    write_list(file_a, [a.url, a2.url])
    wait_for(
        lambda: len(by_model(router)["model-a"]) == 2,
        timeout_s=60,
        what="model-a's second endpoint",
    )
    assert by_model(router)["model-b"] == [b.url]


def test_discovered_pools_from_each_endpoints_models(procs: ProcessTracker) -> None:
    a = start_emulator(procs, "model-a")
    b1 = start_emulator(procs, "model-b")
    b2 = start_emulator(procs, "model-b")
    router = start_router(procs, "--endpoints", f"{a.url},{b1.url},{b2.url}", "--discover-models")
    wait_for(
        lambda: by_model(router) == {"model-a": [a.url], "model-b": [b1.url, b2.url]},
        timeout_s=60,
        what="the pools discovered from /v1/models",
    )
    assert gauge(router, names.ROUTER_SLOTS_PER_ENDPOINT) == {"model-a": 2.0, "model-b": 2.0}
    ready = gauge(router, names.ROUTER_ENDPOINTS)  # the last state's sample per model
    assert set(ready) == {"model-a", "model-b"}
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)
    out = client.completions.create(model="model-b", prompt="hi", max_tokens=2)
    assert out.model == "model-b"
    models = client.models.list()
    assert sorted(m.id for m in models.data) == ["model-a", "model-b"]


def test_one_pool_keeps_an_endpoint_of_another_model_out_and_names_the_flag(
    procs: ProcessTracker,
) -> None:
    """Issue 38, item 0, as a new user tried it: emulators serving ``alpha`` and ``beta``
    behind one router with no model flags sent alpha's requests to beta's replica (404).
    Now the router reads each endpoint's /v1/models and keeps the one serving another
    model than the pool's out of rotation (a tie: the endpoint listed first), says so in
    /router/status and /metrics, and its log names --discover-models."""
    alpha = start_emulator(procs, "alpha")
    beta = start_emulator(procs, "beta")
    router = start_router(procs, "--endpoints", f"{alpha.url},{beta.url}")

    def beta_out() -> bool:
        eps = {e["url"]: e["state"] for e in get_json(router.url + "/router/status")["endpoints"]}
        return eps.get(beta.url) == "wrong_model" and eps.get(alpha.url) == "ready"

    wait_for(beta_out, timeout_s=60, what="beta's endpoint out of rotation")
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="none", max_retries=0)
    for _ in range(6):  # least-outstanding would have sent about half to beta (404)
        done = client.completions.create(model="alpha", prompt="hi", max_tokens=2)
        assert done.model == "alpha"
    with urllib.request.urlopen(router.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    states = {
        s.labels["state"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == names.ROUTER_ENDPOINTS
    }
    assert states["wrong_model"] == 1 and states["ready"] == 1
    log = Path(router.process.log_path or "").read_text()
    assert "serves model 'beta', not the pool's 'alpha'" in log and "--discover-models" in log
