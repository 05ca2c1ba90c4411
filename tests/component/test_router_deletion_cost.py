"""``--deletion-cost`` (router/deletion_cost.py) against the Kubernetes API's request shapes.

No API server can run here: a stand-in on 127.0.0.1 answers the two calls the job makes, as
the API documents them (an EndpointSliceList for the Service's label selector; a PATCH of
one pod), through the ``kubernetes`` client itself, so the client's paths, headers and
serialisation are what is checked: the list's selector, the merge patch's content type and
body, the string value, the rate limit, and what a refused PATCH leaves to retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client

from router.config import K8sSource
from router.deletion_cost import (
    ANNOTATION,
    MERGE_PATCH,
    Throttle,
    deletion_cost_job,
    pod_costs,
    pods_by_url,
    sync_once,
    warmth_by_url,
)
from router.dispatch import Dispatcher
from router.pool import Pool
from tests.support import LoopbackHTTPServer, QuietHandler

NS, SERVICE = "llm", "vllm"
A, B = "http://10.0.0.1:8000", "http://10.0.0.2:8000"
SLICES = {
    "kind": "EndpointSliceList",
    "apiVersion": "discovery.k8s.io/v1",
    "metadata": {"resourceVersion": "7"},
    "items": [
        {
            "metadata": {"name": "vllm-x1", "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": True},
                 "targetRef": {"kind": "Pod", "name": "vllm-a", "namespace": NS}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": True},
                 "targetRef": {"kind": "Pod", "name": "vllm-b", "namespace": NS}},
                {"addresses": ["10.0.0.9"], "conditions": {"ready": True}},  # no pod: skipped
            ],
        }
    ],
}  # fmt: skip


class FakeApi:
    """Records every request; refuses PATCHes of the pods in ``refuse`` with 403."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.refuse: set[str] = set()
        self.lists = 0
        self.lock = threading.Lock()
        self.listed_thrice = threading.Event()  # the job's third round has begun
        api = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                api.record(self, None)
                self.respond(json.dumps(SLICES).encode())

            def do_PATCH(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.record(self, body)
                pod = self.path.rsplit("/", 1)[1]
                if pod in api.refuse:
                    status = {"kind": "Status", "status": "Failure", "code": 403}
                    self.respond(json.dumps(status).encode(), status=403)
                    return
                self.respond(json.dumps({"kind": "Pod", "metadata": {"name": pod}}).encode())

        self.server = LoopbackHTTPServer(Handler)

    def record(self, handler: QuietHandler, body: Any) -> None:
        url = urlsplit(handler.path)
        with self.lock:
            self.requests.append(
                {"method": handler.command, "path": url.path, "query": parse_qs(url.query),
                 "content_type": handler.headers.get("Content-Type"), "body": body}
            )  # fmt: skip
            self.lists += handler.command == "GET"
            if self.lists >= 3:
                self.listed_thrice.set()

    def patches(self) -> dict[str, str]:
        """Pod → the annotation value PATCHed, and clear the record."""
        with self.lock:
            out = {
                r["path"].rsplit("/", 1)[1]: r["body"]["metadata"]["annotations"][ANNOTATION]
                for r in self.requests
                if r["method"] == "PATCH"
            }
            self.requests.clear()
        return out


@pytest.fixture
def api() -> Any:
    fake = FakeApi()
    try:
        yield fake
    finally:
        fake.server.close()


def api_client(url: str) -> client.ApiClient:
    config = client.Configuration(host=url)
    config.api_key = {"BearerToken": "t"}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(config)


def dispatcher() -> Dispatcher:
    pool = Pool(4, rng=random.Random(0))
    pool.set_endpoints([A, B])
    return Dispatcher(pool)


def test_the_pods_get_the_rules_order_as_a_merge_patch(api: FakeApi) -> None:
    d = dispatcher()
    ep_a = d.pool.get(A)
    assert ep_a is not None
    d.pool.acquire(ep_a)  # a has a request in flight: b leaves first
    source = K8sSource(NS, SERVICE, "http")
    throttle = Throttle(30.0)
    written = sync_once(api_client(api.server.url), source, warmth_by_url([d]), throttle, 0.0)
    assert written == {"vllm-a": 1, "vllm-b": 0}
    (listing,) = [r for r in api.requests if r["method"] == "GET"]
    assert listing["path"] == f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
    assert listing["query"]["labelSelector"] == [f"kubernetes.io/service-name={SERVICE}"]
    patches = [r for r in api.requests if r["method"] == "PATCH"]
    assert {r["path"] for r in patches} == {
        f"/api/v1/namespaces/{NS}/pods/vllm-a",
        f"/api/v1/namespaces/{NS}/pods/vllm-b",
    }
    for r in patches:  # a merge patch of the one annotation, its value a string
        assert r["content_type"] == MERGE_PATCH
        assert set(r["body"]) == {"metadata"} and set(r["body"]["metadata"]) == {"annotations"}
    assert api.patches() == {"vllm-a": "1", "vllm-b": "0"}


def test_a_pod_is_patched_only_when_its_value_changed_and_not_within_the_interval(
    api: FakeApi,
) -> None:
    d = dispatcher()
    ep_a, ep_b = d.pool.get(A), d.pool.get(B)
    assert ep_a is not None and ep_b is not None
    d.pool.acquire(ep_a)
    source, throttle = K8sSource(NS, SERVICE, "http"), Throttle(30.0)
    ac = api_client(api.server.url)
    sync_once(ac, source, warmth_by_url([d]), throttle, 0.0)
    assert api.patches() == {"vllm-a": "1", "vllm-b": "0"}
    sync_once(ac, source, warmth_by_url([d]), throttle, 5.0)  # nothing changed
    assert api.patches() == {}
    d.pool.acquire(ep_b)
    d.pool.acquire(ep_b)  # b busier now: the order flips
    sync_once(ac, source, warmth_by_url([d]), throttle, 10.0)  # 10 s after the last: too soon
    assert api.patches() == {}
    sync_once(ac, source, warmth_by_url([d]), throttle, 30.0)
    assert api.patches() == {"vllm-a": "0", "vllm-b": "1"}
    sync_once(ac, source, warmth_by_url([d]), throttle, 90.0)  # changed nothing since
    assert api.patches() == {}


def test_a_refused_patch_is_logged_and_retried(
    api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    d = dispatcher()
    source, throttle = K8sSource(NS, SERVICE, "http"), Throttle(30.0)
    ac = api_client(api.server.url)
    api.refuse = {"vllm-b"}
    with caplog.at_level(logging.WARNING, logger="router.deletion_cost"):
        written = sync_once(ac, source, warmth_by_url([d]), throttle, 0.0)
    assert "vllm-b" not in written and "PATCH pod vllm-b failed" in caplog.text
    api.patches()
    api.refuse = set()
    # Nothing in flight: ties by pod name, vllm-b leaves first (0). Its first write is due
    # at once; vllm-a, written, is not patched again.
    assert sync_once(ac, source, warmth_by_url([d]), throttle, 1.0) == {"vllm-b": 0}
    assert api.patches() == {"vllm-b": "0"}


def test_pods_are_named_by_target_ref_and_ties_go_by_pod_name() -> None:
    slices = client.ApiClient().deserialize(
        type("R", (), {"data": json.dumps(SLICES)})(), "V1EndpointSliceList"
    )
    pods = pods_by_url(slices.items, "http")
    assert pods == {A: "vllm-a", B: "vllm-b"}
    assert pods_by_url(slices.items, "metrics") == {}
    # Nothing known: the later pod name leaves first (the rank is stable between rounds).
    assert pod_costs(pods, {}) == {"vllm-b": 0, "vllm-a": 1}


def test_the_background_job_writes_the_pods_and_keeps_going(api: FakeApi) -> None:
    """The router's job (deletion_cost_job): reads the dispatchers on the loop, calls the
    API in a thread, round after round; cancelled with the app."""
    d = dispatcher()
    ep_b = d.pool.get(B)
    assert ep_b is not None
    d.pool.acquire(ep_b)

    async def run() -> None:
        job = asyncio.create_task(
            deletion_cost_job(
                lambda: [d], K8sSource(NS, SERVICE, "http"), 30.0, None, check_s=0.01,
                api_client=api_client(api.server.url),
            )
        )  # fmt: skip
        try:
            assert await asyncio.to_thread(api.listed_thrice.wait, 30), "3 rounds"
            assert not job.done()  # a round's failure would not end it either
        finally:
            job.cancel()

    asyncio.run(run())
    assert sum(r["method"] == "PATCH" for r in api.requests) == 2  # once each, over 3 rounds
    assert api.patches() == {"vllm-a": "0", "vllm-b": "1"}
