"""Kubernetes discovery: a Service's EndpointSlices → the router's endpoint list.

The core (:func:`endpoints_from_slices`) is pure and takes the ``kubernetes`` client's own
model objects (``V1EndpointSlice``), so tests hand in real model instances without an API
server. The shell (:func:`watch_service_job`) lists and watches the slices labelled
``kubernetes.io/service-name=<service>`` in a thread (the client is synchronous) and
posts every new list to the event loop.

Rules: only endpoints whose ``conditions.ready`` is true (nil counts as true, as the API
documents) and that are not ``terminating``; the port is chosen by name
(``--k8s-port-name``), or the slice's only port when no name is given.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from router.config import K8sSource
from router.endpoint_lists import Sink, apply

log = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _slice_port(slice_: Any, port_name: str | None) -> int | None:
    ports = slice_.ports or []
    if port_name is None:
        return ports[0].port if len(ports) == 1 and ports[0].port else None
    for port in ports:
        if port.name == port_name and port.port:
            return int(port.port)
    return None


def endpoints_from_slices(slices: Iterable[Any], port_name: str | None) -> list[str]:
    """Base URLs of the ready, non-terminating addresses, sorted and de-duplicated.

    A slice without the named port contributes nothing (its pods are not serving the
    port we route to).
    """
    urls: set[str] = set()
    for slice_ in slices:
        port = _slice_port(slice_, port_name)
        if port is None:
            continue
        ipv6 = (slice_.address_type or "") == "IPv6"
        for ep in slice_.endpoints or []:
            cond = ep.conditions
            ready = True if cond is None or cond.ready is None else bool(cond.ready)
            terminating = bool(cond.terminating) if cond is not None else False
            if not ready or terminating:
                continue
            for address in ep.addresses or []:
                host = f"[{address}]" if ipv6 else address
                urls.add(f"http://{host}:{port}")
    return sorted(urls)


class SliceSet:
    """The current slices of one Service, by name, updated from watch events."""

    def __init__(self, port_name: str | None) -> None:
        self.port_name = port_name
        self._slices: dict[str, Any] = {}

    def reset(self, slices: Iterable[Any]) -> list[str]:
        self._slices = {s.metadata.name: s for s in slices}
        return self.urls()

    def event(self, kind: str, slice_: Any) -> list[str]:
        """Apply a watch event (ADDED, MODIFIED, DELETED); return the new URL list."""
        name = slice_.metadata.name
        if kind == "DELETED":
            self._slices.pop(name, None)
        else:
            self._slices[name] = slice_
        return self.urls()

    def urls(self) -> list[str]:
        return endpoints_from_slices(self._slices.values(), self.port_name)


class K8sConfigError(RuntimeError):
    """No usable Kubernetes configuration (neither in-cluster nor a kubeconfig)."""


def load_config() -> None:
    """Load the in-cluster service account, else ``~/.kube/config`` (``$KUBECONFIG``).

    Called once at startup, so a router without credentials fails at once with a clear
    message instead of running with zero endpoints.
    """
    from kubernetes import config

    try:
        config.load_incluster_config()
        return
    except config.ConfigException as in_cluster:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as kubeconfig:
            raise K8sConfigError(
                "--k8s-namespace: no Kubernetes credentials: not in a cluster "
                f"({in_cluster}) and no usable kubeconfig ({kubeconfig})"
            ) from None


def _watch_forever(
    source: K8sSource, push: Callable[[list[str]], None], stop: threading.Event
) -> None:  # pragma: no cover - needs an API server, which cannot run here
    from kubernetes import client, watch

    api = client.DiscoveryV1Api()
    selector = f"{SERVICE_NAME_LABEL}={source.service}"
    slices = SliceSet(source.port_name)
    delay_s = 1.0
    while not stop.is_set():
        try:
            listing = api.list_namespaced_endpoint_slice(source.namespace, label_selector=selector)
            push(slices.reset(listing.items))
            version = listing.metadata.resource_version if listing.metadata else None
            delay_s = 1.0
            while not stop.is_set():
                stream = watch.Watch().stream(
                    api.list_namespaced_endpoint_slice,
                    source.namespace,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=60,
                )
                for event in stream:
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    push(slices.event(event["type"], obj))
                    if stop.is_set():
                        return
        except Exception as exc:  # API errors, 410 Gone: relist after a pause
            log.warning("EndpointSlice watch failed (%s); relisting in %.0f s", exc, delay_s)
            stop.wait(delay_s)
            delay_s = min(delay_s * 2, 30.0)


async def watch_service_job(
    sink: Sink, source: K8sSource, _get_session: object
) -> None:  # pragma: no cover - needs an API server
    """Background job for the app: keep the pool in step with the Service's slices."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def push(urls: list[str]) -> None:
        loop.call_soon_threadsafe(apply, sink, urls)

    thread = threading.Thread(
        target=_watch_forever, args=(source, push, stop), name="k8s-watch", daemon=True
    )
    thread.start()
    try:
        await asyncio.Event().wait()
    finally:
        stop.set()
