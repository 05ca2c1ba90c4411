"""``controller.kubernetes.io/pod-deletion-cost`` on the vLLM pods, kept up to date by the router
(``--deletion-cost``, with ``--k8s-namespace``; off by default).

On Kubernetes the ReplicaSet controller, not us, picks the pod that goes on a scale-down; it
deletes pods with the lowest deletion cost first (KEP-2255; an int32 annotation, pods without
one count as 0; best effort: pods that are not ready, say, still go first). This job writes the
scale-down rule's order (:func:`inflight.control.scale_down.deletion_costs`: fewest requests in
flight, then fewest prefix blocks no other replica holds, then pod name) onto the pods, so the
controller's choice is the rule's, as ``inflight up``'s supervisor's is.

Every ``check_s`` it reads each endpoint's requests in flight and unique prefix blocks from
the dispatchers (on the event loop), lists the Service's EndpointSlices to map an endpoint's
URL to its pod (``targetRef``), and PATCHes the pods whose value changed, each at most once per
``min_interval_s`` (:class:`Throttle`): Kubernetes warns that updating the annotation often
(say, from a metric) loads the API server. The value is a rank, so it moves only when the
order does. The PATCH is a JSON merge patch (``application/merge-patch+json``) of that one
annotation: the client's generated ``patch_namespaced_pod`` would send a dict as a JSON Patch.
RBAC: ``patch`` on pods (``manifests/components/pod-deletion-cost``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from inflight.control.scale_down import COLD, Warmth, deletion_costs
from router.config import K8sSource
from router.dispatch import Dispatcher
from router.k8s import SERVICE_NAME_LABEL, _slice_port

log = logging.getLogger(__name__)

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
MERGE_PATCH = "application/merge-patch+json"


def pods_by_url(slices: Iterable[Any], port_name: str | None) -> dict[str, str]:
    """Each endpoint URL (as :func:`router.k8s.endpoints_from_slices` writes it) → the name
    of the pod behind it (the endpoint's ``targetRef`` of kind Pod); others are skipped."""
    pods: dict[str, str] = {}
    for slice_ in slices:
        port = _slice_port(slice_, port_name)
        if port is None:
            continue
        ipv6 = (slice_.address_type or "") == "IPv6"
        for ep in slice_.endpoints or []:
            ref = ep.target_ref
            if ref is None or ref.kind != "Pod" or not ref.name:
                continue
            for address in ep.addresses or []:
                host = f"[{address}]" if ipv6 else address
                pods[f"http://{host}:{port}"] = ref.name
    return pods


def warmth_by_url(dispatchers: Sequence[Dispatcher]) -> dict[str, Warmth]:
    """Each endpoint's requests in flight and prefix blocks no other holds (0 without
    ``--dispatch prefix``). Read on the event loop: the pools change there."""
    out: dict[str, Warmth] = {}
    for d in dispatchers:
        for v in d.pool.snapshot():
            unique = d.prefix.unique_blocks(v.url) if d.prefix is not None else 0
            out[v.url] = Warmth(v.inflight, unique)
    return out


def pod_costs(pods: Mapping[str, str], warmth: Mapping[str, Warmth]) -> dict[str, int]:
    """Each pod's deletion cost: the scale-down rule's rank, ties by pod name (a pod the
    router does not know yet counts as cold)."""
    by_pod = {pod: warmth.get(url, COLD) for url, pod in pods.items()}
    return deletion_costs(sorted(by_pod.items(), reverse=True))


class Throttle:
    """Which pods to patch now: those whose value differs from the last one written, and
    whose last patch is at least ``min_interval_s`` old."""

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self._written: dict[str, tuple[int, float]] = {}  # pod → (value, when)

    def due(self, costs: Mapping[str, int], now_s: float) -> dict[str, int]:
        for gone in set(self._written) - set(costs):
            del self._written[gone]
        due = {}
        for pod, value in costs.items():
            last = self._written.get(pod)
            if last is None or (last[0] != value and now_s - last[1] >= self.min_interval_s):
                due[pod] = value
        return due

    def written(self, pod: str, value: int, now_s: float) -> None:
        self._written[pod] = (value, now_s)


def patch_body(value: int) -> dict[str, Any]:
    """The merge patch that sets the annotation (its value a string, as annotations are)."""
    return {"metadata": {"annotations": {ANNOTATION: str(value)}}}


def patch_pod(api_client: Any, namespace: str, pod: str, value: int) -> None:
    """PATCH one pod's annotation through the client's own transport (config, auth, TLS)."""
    api_client.call_api(
        "/api/v1/namespaces/{namespace}/pods/{name}",
        "PATCH",
        path_params={"namespace": namespace, "name": pod},
        header_params={"Content-Type": MERGE_PATCH, "Accept": "application/json"},
        body=patch_body(value),
        auth_settings=["BearerToken"],
        response_type=None,
        _preload_content=False,
    )


def sync_once(
    api_client: Any,
    source: K8sSource,
    warmth: Mapping[str, Warmth],
    throttle: Throttle,
    now_s: float,
) -> dict[str, int]:
    """One round (blocking: the client is synchronous): list the slices, patch what is due;
    returns what was written. A failed patch is logged and retried next round."""
    from kubernetes import client

    selector = f"{SERVICE_NAME_LABEL}={source.service}"
    slices = client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
        source.namespace, label_selector=selector
    )
    costs = pod_costs(pods_by_url(slices.items, source.port_name), warmth)
    written = {}
    for pod, value in throttle.due(costs, now_s).items():
        try:
            patch_pod(api_client, source.namespace, pod, value)
        except Exception as exc:  # API errors (403 without the RBAC, 404 a pod just gone)
            log.warning("pod-deletion-cost: PATCH pod %s failed: %s", pod, exc)
            continue
        throttle.written(pod, value, now_s)
        written[pod] = value
    return written


async def deletion_cost_job(
    dispatchers: Callable[[], Sequence[Dispatcher]],
    source: K8sSource,
    min_interval_s: float,
    _get_session: object,
    check_s: float = 5.0,
    api_client: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Background job for the app: a round every ``check_s`` (the API in a thread)."""
    if api_client is None:  # pragma: no cover - the router's own, configured by load_config
        from kubernetes import client

        api_client = client.ApiClient()
    throttle = Throttle(min_interval_s)
    while True:
        warmth = warmth_by_url(dispatchers())
        try:
            await asyncio.to_thread(sync_once, api_client, source, warmth, throttle, clock())
        except Exception as exc:  # the list failed: next round
            log.warning("pod-deletion-cost: listing EndpointSlices failed: %s", exc)
        await asyncio.sleep(check_s)
