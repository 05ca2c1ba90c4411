"""EndpointSlices → endpoint list, with the ``kubernetes`` client's own model classes.

No Kubernetes API server can run on this machine, so the watch loop itself
(``router.k8s._watch_forever``) is not exercised here; these tests cover the part that
decides which addresses become endpoints, fed with the exact objects the client returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubernetes.client import (
    DiscoveryV1EndpointPort,
    V1Endpoint,
    V1EndpointConditions,
    V1EndpointSlice,
    V1ObjectMeta,
)

from router.k8s import SliceSet, endpoints_from_slices


def endpoint(ip: str, ready: bool | None = True, terminating: bool | None = False) -> V1Endpoint:
    return V1Endpoint(
        addresses=[ip],
        conditions=V1EndpointConditions(ready=ready, serving=ready, terminating=terminating),
    )


def slice_(
    name: str,
    endpoints: list[V1Endpoint],
    ports: Sequence[tuple[str | None, int]],
    address_type: str = "IPv4",
) -> V1EndpointSlice:
    return V1EndpointSlice(
        address_type=address_type,
        metadata=V1ObjectMeta(name=name, labels={"kubernetes.io/service-name": "vllm"}),
        endpoints=endpoints,
        ports=[DiscoveryV1EndpointPort(name=n, port=p, protocol="TCP") for n, p in ports],
    )


PORTS: list[tuple[str | None, int]] = [("http", 8000), ("metrics", 9090)]


def test_ready_only_named_port_terminating_excluded() -> None:
    slices = [
        slice_(
            "vllm-abc",
            [
                endpoint("10.0.0.1"),
                endpoint("10.0.0.2", ready=False),  # starting: not ready
                endpoint("10.0.0.3", ready=False, terminating=True),  # going away
                endpoint("10.0.0.4", ready=True, terminating=True),  # terminating wins
                endpoint("10.0.0.5", ready=None, terminating=None),  # nil ready = ready
            ],
            PORTS,
        ),
        slice_("vllm-def", [endpoint("10.0.1.1"), endpoint("10.0.0.1")], PORTS),
    ]
    assert endpoints_from_slices(slices, "http") == [
        "http://10.0.0.1:8000",
        "http://10.0.0.5:8000",
        "http://10.0.1.1:8000",
    ]
    assert endpoints_from_slices(slices, "metrics")[0] == "http://10.0.0.1:9090"


def test_slice_without_the_named_port_contributes_nothing() -> None:
    slices = [slice_("s", [endpoint("10.0.0.1")], [("grpc", 50051)])]
    assert endpoints_from_slices(slices, "http") == []


def test_unnamed_single_port_is_used_without_a_name() -> None:
    one = [slice_("s", [endpoint("10.0.0.1")], [(None, 8000)])]
    assert endpoints_from_slices(one, None) == ["http://10.0.0.1:8000"]
    two = [slice_("s", [endpoint("10.0.0.1")], PORTS)]
    assert endpoints_from_slices(two, None) == []  # ambiguous: name the port


def test_ipv6_addresses_are_bracketed() -> None:
    slices = [slice_("s6", [endpoint("fd00::1")], PORTS, address_type="IPv6")]
    assert endpoints_from_slices(slices, "http") == ["http://[fd00::1]:8000"]


def test_empty_slice_and_no_slices() -> None:
    assert endpoints_from_slices([slice_("s", [], PORTS)], "http") == []
    assert endpoints_from_slices([], "http") == []


def test_watch_events_update_the_list() -> None:
    state = SliceSet("http")
    assert state.reset([slice_("a", [endpoint("10.0.0.1")], PORTS)]) == ["http://10.0.0.1:8000"]
    added = state.event("ADDED", slice_("b", [endpoint("10.0.0.2")], PORTS))
    assert added == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    modified = state.event("MODIFIED", slice_("a", [endpoint("10.0.0.1", ready=False)], PORTS))
    assert modified == ["http://10.0.0.2:8000"]
    assert state.event("DELETED", slice_("b", [], PORTS)) == []
