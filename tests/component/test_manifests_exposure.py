"""The manifests' exposure and HPA-tolerance options agree with the code.

* NetworkPolicy ``inflight-scaler`` (every kustomization): it selects exactly the
  scaler's pods, opens the gRPC port only to KEDA's operator (namespace ``keda``, pod
  label ``app: keda-operator``, as KEDA's Helm chart labels it), and nothing else but the
  metrics port that Prometheus scrapes and the TLS probes use.
* Component ``hpa-scale-up-tolerance``: an overlay with it builds, validates against the
  ScaledObject schema (KEDA ≥ 2.18's field), and tells the scaler the same tolerance it
  gives the HPA, which the scaler's real parser reads.

No API server and no CNI run here: that a cluster enforces the policy is not tested.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from external_scaler.metadata import parse_metadata
from tests.component.test_manifests_build import (
    KUBERNETES_VERSION,
    MANIFESTS,
    _crd_errors,
    find,
    kubectl,
    objects,
    one,
)
from tests.component.test_manifests_contract import (
    Obj,
    container_port,
    deployment_container,
    scaled_object,
)

KEDA_NAMESPACE = "keda"
KEDA_OPERATOR_LABELS = {"app": "keda-operator"}
COMPONENT = MANIFESTS / "components" / "hpa-scale-up-tolerance"


@pytest.fixture(params=["base", "overlays/emulator"])
def objs(request: pytest.FixtureRequest) -> list[Obj]:
    return objects(request.param)


def test_only_kedas_operator_reaches_the_scalers_grpc_port(objs: list[Obj]) -> None:
    policy = one(objs, "NetworkPolicy", "inflight-scaler")
    kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)
    spec = policy["spec"]
    dep, container = deployment_container(objs, "inflight-scaler")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"] == {"matchLabels": dep["spec"]["selector"]["matchLabels"]}
    assert all(pod_labels.get(k) == v for k, v in spec["podSelector"]["matchLabels"].items())
    # Selecting no other Deployment's pods.
    for other in find(objs, "Deployment"):
        if other is not dep:
            labels = other["spec"]["template"]["metadata"]["labels"]
            selector = spec["podSelector"]["matchLabels"]
            assert not all(labels.get(k) == v for k, v in selector.items()), other["metadata"]
    assert spec["policyTypes"] == ["Ingress"]

    grpc_port = container_port(container, "grpc")
    metrics_port = container_port(container, "metrics")
    opened: dict[int, list[Any]] = {}
    for rule in spec["ingress"]:
        for port in rule["ports"]:
            assert port.get("protocol", "TCP") == "TCP"
            opened.setdefault(container_port(container, port["port"]), []).append(rule.get("from"))
    assert set(opened) == {grpc_port, metrics_port}, "only the gRPC and metrics ports"
    assert opened[grpc_port] == [
        [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": KEDA_NAMESPACE}
                },
                "podSelector": {"matchLabels": KEDA_OPERATOR_LABELS},
            }
        ]
    ], "the gRPC port must be open to KEDA's operator pods only (one peer, both selectors)"
    # The ScaledObject dials that port (through the Service) from KEDA's namespace.
    _so, meta = scaled_object(objs)
    assert meta["scalerAddress"].endswith(f":{grpc_port}")


def test_every_probe_of_the_scaler_is_one_the_policy_lets_in(objs: list[Obj]) -> None:
    """Probes come from the kubelet (the node, never blocked), but the HTTP ones also
    name the metrics port, which is open; the gRPC one names the gRPC port."""
    _dep, container = deployment_container(objs, "inflight-scaler")
    for key in ("readinessProbe", "livenessProbe"):
        action = container[key].get("httpGet") or container[key].get("grpc")
        assert container_port(container, action["port"]) in {
            container_port(container, "grpc"),
            container_port(container, "metrics"),
        }


def build_with_component(tmp_path: Path, component: str = COMPONENT.name) -> list[Obj]:
    """An overlay of the emulator stack with ``components/<component>``, as a user would
    write it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)  # kustomize refuses absolute paths
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/overlays/emulator"],
                "components": [f"{rel}/components/{component}"],
            }
        )
    )
    proc = subprocess.run(
        [kubectl(), "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def test_tolerance_component_sets_the_hpa_and_tells_the_scaler(tmp_path: Path) -> None:
    objs = build_with_component(tmp_path)
    so, meta = scaled_object(objs)
    assert not _crd_errors(so)
    scale_up = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    assert scale_up["tolerance"] == "0"
    spec = parse_metadata(meta).policy  # the scaler's real parser
    assert spec.hpa_scale_up_tolerance == float(scale_up["tolerance"])
    # The rest of the shipped behaviour is untouched.
    base_so, _ = scaled_object(objects("overlays/emulator"))
    base_up = base_so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    assert {k: v for k, v in scale_up.items() if k != "tolerance"} == base_up


@pytest.mark.parametrize("bad", ["-1", "ten", -1])
def test_schema_rejects_a_bad_tolerance(bad: object) -> None:
    so = one(objects("base"), "ScaledObject", "vllm")
    so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["tolerance"] = (
        bad
    )
    assert _crd_errors(so), f"tolerance {bad!r} accepted"


def test_component_documents_its_version_floor() -> None:
    text = (COMPONENT / "kustomization.yaml").read_text()
    assert "1.33" in text and "HPAConfigurableTolerance" in text and "2.18" in text
