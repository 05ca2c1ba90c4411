"""Component ``pod-deletion-cost``: off in the base (no PATCH on pods, the flag unset); an
overlay with it gives the router's ServiceAccount ``patch`` on pods in its own namespace and
turns ``--deletion-cost`` on through the router's ConfigMap, which the router's own settings
accept (router/deletion_cost.py). No API server runs here: kustomize builds offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from router.config import add_arguments, settings_from_args
from tests.component.test_manifests_build import find, objects
from tests.component.test_manifests_exposure import build_with_component

Obj = dict[str, Any]


def _pod_rules(objs: list[Obj]) -> list[Obj]:
    return [
        rule
        for role in find(objs, "Role")
        for rule in role.get("rules", [])
        if "pods" in rule.get("resources", [])
    ]


def _router_env(objs: list[Obj]) -> dict[str, str]:
    (cm,) = [
        c for c in find(objs, "ConfigMap") if c["metadata"]["name"].startswith("inflight-router")
    ]
    return dict(cm["data"])


def test_the_base_has_no_pod_patch_and_no_deletion_cost() -> None:
    objs = objects("overlays/emulator")
    assert _pod_rules(objs) == []
    assert "INFLIGHT_ROUTER_DELETION_COST" not in _router_env(objs)


def test_the_component_grants_patch_on_pods_to_the_router_and_turns_it_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = build_with_component(tmp_path, "pod-deletion-cost")
    assert _pod_rules(objs) == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    (binding,) = [
        b for b in find(objs, "RoleBinding") if b["roleRef"]["name"].endswith("deletion-cost")
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "inflight-router", "namespace": "inflight"}
    ]
    env = _router_env(objs)
    assert env["INFLIGHT_ROUTER_DELETION_COST"] == "true"
    # The router's settings accept the ConfigMap as its pod gets it (namespace from the
    # downward API): --deletion-cost with its Kubernetes source.
    for name, value in {**env, "INFLIGHT_ROUTER_K8S_NAMESPACE": "inflight"}.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args([]))
    assert settings.deletion_cost and settings.k8s is not None
