"""``manifests/overlays/two-models``: one router, a Deployment and a ScaledObject a model.

Built offline with kustomize (``test_manifests_build``'s helpers); the generic checks of
every kustomization (schemas, the router's and scaler's settings, the first ScaledObject's
contract) run on it too, from ``KUSTOMIZATIONS``.
"""

from __future__ import annotations

from typing import Any

from external_scaler.metadata import parse_metadata
from inflight import names
from tests.component.test_manifests_build import find, objects, one
from tests.component.test_manifests_contract import (
    container_env,
    container_settings,
    deployment_container,
    selects,
)

OVERLAY = "overlays/two-models"


def served_model(objs: list[dict[str, Any]], deployment: str) -> str:
    dep, container = deployment_container(objs, deployment)
    return container_env(objs, dep, container)["INFLIGHT_EMULATOR_SERVED_MODEL_NAME"]


def test_a_scaledobject_a_model_each_reading_its_own_models_l() -> None:
    objs = objects(OVERLAY)
    scaled = {so["spec"]["scaleTargetRef"]["name"]: so for so in find(objs, "ScaledObject")}
    assert set(scaled) == {"vllm", "vllm-b"}
    models = {}
    for deployment, so in scaled.items():
        (trigger,) = so["spec"]["triggers"]
        spec = parse_metadata(trigger["metadata"])
        assert spec.model == served_model(objs, deployment), deployment
        models[deployment] = spec.model
    assert len(set(models.values())) == 2, models
    # The second is the first but for its model and target: they cannot drift apart.
    a, b = scaled["vllm"], scaled["vllm-b"]
    meta_a = {**a["spec"]["triggers"][0]["metadata"], names.META_MODEL: ""}
    meta_b = {**b["spec"]["triggers"][0]["metadata"], names.META_MODEL: ""}
    assert meta_a == meta_b
    strip = ("scaleTargetRef", "triggers")
    assert {k: v for k, v in a["spec"].items() if k not in strip} == {
        k: v for k, v in b["spec"].items() if k not in strip
    }


def test_the_router_discovers_both_models_through_one_service() -> None:
    objs = objects(OVERLAY)
    _dep, _container, settings = container_settings(objs, "inflight-router")
    assert settings.discover_models and settings.model_pools
    service = one(objs, "Service", settings.k8s_service)
    for deployment in ("vllm", "vllm-b"):
        pod_labels = one(objs, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        assert selects(service["spec"]["selector"], pod_labels), deployment
    # Each Deployment selects only its own pods.
    a = one(objs, "Deployment", "vllm")["spec"]["selector"]["matchLabels"]
    b_pods = one(objs, "Deployment", "vllm-b")["spec"]["template"]["metadata"]["labels"]
    assert not selects(a, b_pods)
