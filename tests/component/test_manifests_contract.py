"""The manifests agree with the code: flags, metadata keys, ports, probes, names, metrics.

Every built kustomization (``kubectl kustomize``, see ``test_manifests_build.py``) is
checked against the real thing, never against a copy of it:

* an inflight container's configuration is its ``args`` (the subcommand) plus the
  ``INFLIGHT_<SUBCOMMAND>_*`` variables of its ``env`` and ``envFrom`` ConfigMaps, and
  loads with the real parser and settings model (``inflight.config.load``: flags over
  variables over defaults, one validation); the values agree with the ports, Services
  and ScaledObject beside them, and the router's hold deadline with ``inflight up``'s;
  every pod turns Kubernetes service links off;
* the ScaledObject's trigger metadata parses with the scaler's real metadata parser,
  uses only ``inflight.names`` META_* keys (and KEDA's own), states the policy's settings
  at the code's defaults (``inflight.names.METADATA_DEFAULTS``), points at the scaler
  Service's gRPC port, selects this stack's router, and its HPA behaviour, polling
  interval and cooldown are ``inflight.control.hpa``'s shipped constants;
* Services, probes and ServiceMonitors name ports that exist; RBAC lets the router read
  EndpointSlices;
* the metric names the ServiceMonitors keep and the PrometheusRule uses are the router's,
  scaler's and vLLM's names from ``inflight.names``;
* the router, emulator and scaler started with the manifests' own args and environment
  (host moved to 127.0.0.1, ports to 0: each reports the ports it got) answer the probe
  paths and serve, at the scraped path, only metric names the ServiceMonitors keep.

A container whose subcommand ``inflight`` does not have fails (every subcommand the
manifests run has landed; a skip would hide a broken manifest).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inflight import __version__, cli, config, names
from tests.component.test_manifests_build import KUSTOMIZATIONS, find, objects, one
from tests.support import INFLIGHT, ProcessTracker, openssl, wait_for

IMAGE = "inflight"
NAMESPACE_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

Obj = dict[str, Any]


# --- helpers ------------------------------------------------------------------------------


def series_names(metrics: dict[str, str]) -> set[str]:
    """The sample names Prometheus stores for ``{name: type}`` (histograms expand)."""
    out: set[str] = set()
    for name, kind in metrics.items():
        if kind == "histogram":
            out.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
        else:
            out.add(name)
    return out


VLLM_SERIES = set(names.VLLM_METRICS)


def deployment_container(objs: list[Obj], deployment: str) -> tuple[Obj, Obj]:
    dep = one(objs, "Deployment", deployment)
    containers = dep["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"Deployment {deployment}: expected one container"
    return dep, containers[0]


def expanded_args(obj: Obj, container: Obj) -> list[str]:
    """The container's args with ``$(VAR)`` expanded as the kubelet does."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = obj["metadata"]["namespace"]

    def expand(arg: str) -> str:
        def sub(match: re.Match[str]) -> str:
            assert match.group(1) in env, f"{arg}: ${match.group(1)} is not set in the container"
            return env[match.group(1)]

        return NAMESPACE_REF.sub(sub, arg)

    return [expand(a) for a in container.get("args", [])]


def container_env(objs: list[Obj], obj: Obj, container: Obj) -> dict[str, str]:
    """The container's variables as the kubelet sets them: ``envFrom`` ConfigMaps first,
    then ``env`` (which wins); the namespace from the downward API."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        maps = [c for c in find(objs, "ConfigMap") if c["metadata"]["name"] == ref]
        assert len(maps) == 1, f"{container['name']}: envFrom names ConfigMap {ref}, not built"
        env.update(maps[0].get("data", {}))
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = obj["metadata"]["namespace"]
    return env


def parse_inflight(args: list[str]) -> argparse.Namespace:
    """Parse a container's args with the real ``inflight`` parser; fail with its message."""
    subcommand = args[0]
    assert subcommand in cli.available_subcommands(), (
        f"the manifests run `inflight {subcommand}`, which inflight does not have "
        f"(subcommands: {sorted(cli.available_subcommands())}); args {args}"
    )
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return cli.build_parser().parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"`inflight {' '.join(args)}` is rejected (exit {exc.code}):\n{err.getvalue()}")


def settings_model(subcommand: str) -> type[config.Settings]:
    from external_scaler.cli import ScalerSettings
    from inflight.emulator.cli import EmulatorSettings
    from router.config import RouterSettings

    models: dict[str, type[config.Settings]] = {
        "emulator": EmulatorSettings,
        "router": RouterSettings,
        "scaler": ScalerSettings,
    }
    return models[subcommand]


def load_settings(args: list[str], env: dict[str, str]) -> Any:
    """The settings ``inflight <args>`` would run with under ``env`` (and nothing else of
    this process's INFLIGHT_* variables), validated by the real model; fail with its
    message."""
    with pytest.MonkeyPatch.context() as mp:
        for var in list(os.environ):
            if var.upper().startswith("INFLIGHT_"):
                mp.delenv(var)
        for var, value in env.items():
            mp.setenv(var, value)
        namespace = parse_inflight(args)  # the parser reads the environment too
        try:
            return config.load(settings_model(args[0]), namespace)
        except config.ConfigError as exc:
            pytest.fail(f"`inflight {' '.join(args)}` with {env} is rejected: {exc}")


def container_settings(objs: list[Obj], deployment: str) -> tuple[Obj, Obj, Any]:
    """The Deployment, its container and the settings its inflight command loads."""
    dep, container = deployment_container(objs, deployment)
    settings = load_settings(expanded_args(dep, container), container_env(objs, dep, container))
    return dep, container, settings


def test_a_subcommand_inflight_lacks_fails_the_check_not_skips_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", (("router", "inflight_no_such_module_xyz"),))
    try:
        parse_inflight(["router", "--port=8000"])
    except AssertionError as exc:
        assert "which inflight does not have" in str(exc)
    except BaseException as exc:  # pytest.skip raises an OutcomeException, not an Exception
        pytest.fail(f"a missing subcommand must fail the check, not {type(exc).__name__}: {exc}")
    else:
        pytest.fail("a missing subcommand passed the check")


def flag_values(args: list[str]) -> dict[str, str]:
    """``--name=value`` / ``--name value`` pairs of a foreign command (vLLM's)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if "=" in arg:
                key, value = arg[2:].split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                key, value = arg[2:], args[i + 1]
                i += 1
            else:
                key, value = arg[2:], ""
            out[key] = value
        i += 1
    return out


def container_port(container: Obj, ref: int | str) -> int:
    """Resolve a port name (or number) against the container's declared ports."""
    ports = container.get("ports", [])
    for port in ports:
        if ref in (port.get("name"), port["containerPort"]):
            return int(port["containerPort"])
    raise AssertionError(f"container {container['name']}: no port {ref!r} in {ports}")


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def service_backends(objs: list[Obj], service: Obj) -> list[tuple[Obj, Obj]]:
    """Every Deployment (and its container) a Service selects (overlays/two-models: a
    model's replicas each)."""
    return [
        deployment_container(objs, d["metadata"]["name"])
        for d in find(objs, "Deployment")
        if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
    ]


def service_backend(objs: list[Obj], service: Obj) -> tuple[Obj, Obj]:
    """The one Deployment (and its container) a Service selects."""
    matched = [dep for dep, _container in service_backends(objs, service)]
    assert len(matched) == 1, (
        f"Service {service['metadata']['name']} selects {len(matched)} Deployments"
    )
    return deployment_container(objs, matched[0]["metadata"]["name"])


def service_target(objs: list[Obj], service_name: str, port_ref: int | str) -> int:
    """The container port behind ``service_name``'s port (by name or number)."""
    service = one(objs, "Service", service_name)
    for port in service["spec"]["ports"]:
        if port_ref in (port.get("name"), port["port"]):
            _dep, container = service_backend(objs, service)
            return container_port(container, port.get("targetPort", port["port"]))
    raise AssertionError(f"Service {service_name} has no port {port_ref!r}")


def scaled_object(objs: list[Obj]) -> tuple[Obj, dict[str, str]]:
    so = one(objs, "ScaledObject", "vllm")
    triggers = so["spec"]["triggers"]
    assert [t["type"] for t in triggers] == ["external"], "one external trigger expected"
    return so, dict(triggers[0]["metadata"])


def keep_regex(objs: list[Obj], monitor: str) -> re.Pattern[str]:
    """The ServiceMonitor's ``keep`` regex on ``__name__`` (anchored, as Prometheus does)."""
    sm = one(objs, "ServiceMonitor", monitor)
    (endpoint,) = sm["spec"]["endpoints"]
    keeps = [
        r["regex"]
        for r in endpoint.get("metricRelabelings", [])
        if r.get("action") == "keep" and r.get("sourceLabels") == ["__name__"]
    ]
    assert len(keeps) == 1, f"ServiceMonitor {monitor}: expected one keep rule on __name__"
    return re.compile(f"^(?:{keeps[0]})$")


def metric_tokens(expr: str) -> set[str]:
    """Metric names (and recorded series) in a PromQL expression; strings removed."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return {
        t
        for t in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text)
        if t.startswith(("router_", "inflight_scaler_", "vllm:", "inflight:"))
    }


@pytest.fixture(params=KUSTOMIZATIONS)
def objs(request: pytest.FixtureRequest) -> Iterator[list[Obj]]:
    yield objects(request.param)


# --- flags --------------------------------------------------------------------------------


def test_every_inflight_container_runs_the_package_version(objs: list[Obj]) -> None:
    images = {
        c["image"]
        for d in find(objs, "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["image"].split(":")[0].rsplit("/", 1)[-1] == IMAGE
    }
    assert images == {f"{IMAGE}:{__version__}"}


def test_router_settings_load_and_agree(objs: list[Obj]) -> None:
    dep, container, settings = container_settings(objs, "inflight-router")
    assert settings.host == "0.0.0.0", "listen on the pod IP, not loopback"
    assert settings.port == container_port(container, "http")
    assert settings.k8s_namespace == dep["metadata"]["namespace"]
    service = one(objs, "Service", settings.k8s_service)
    port_names = [p.get("name") for p in service["spec"]["ports"]]
    assert settings.k8s_port_name in port_names, f"port not a port of {settings.k8s_service}"
    _so, meta = scaled_object(objs)
    assert settings.slots_per_endpoint == int(meta[names.META_SLOTS_PER_REPLICA])
    assert settings.hold_when_full, "held requests must count in L while KEDA scales"
    assert settings.discover_kv_tokens, "admit on each replica's KV tokens (inflight up's)"
    assert settings.token_admission
    from inflight.control.hold_order import HOLD_DEADLINE_S

    assert settings.hold_deadline_s == HOLD_DEADLINE_S, "what `inflight up` runs (README)"


def test_scaler_settings_load_and_agree(objs: list[Obj]) -> None:
    _dep, container, settings = container_settings(objs, "inflight-scaler")
    assert settings.host == "0.0.0.0"
    assert settings.grpc_port == container_port(container, "grpc")
    assert settings.metrics_port == container_port(container, "metrics")
    assert settings.prometheus_url.startswith("http")


def test_inflight_containers_are_configured_through_their_configmap(objs: list[Obj]) -> None:
    """``args`` is the subcommand alone; every setting is an INFLIGHT_<SUBCOMMAND>_*
    variable, from the container's ConfigMap (or the downward API for the namespace)."""
    for dep in find(objs, "Deployment"):
        for container in dep["spec"]["template"]["spec"]["containers"]:
            if container["image"].split(":")[0] != IMAGE:
                continue
            args = container.get("args", [])
            assert len(args) == 1, f"{container['name']}: flags in args {args}, not in env"
            prefix = f"INFLIGHT_{args[0].upper()}_"
            env = container_env(objs, dep, container)
            assert container.get("envFrom"), f"{container['name']}: no ConfigMap"
            assert all(var.startswith(prefix) for var in env), (
                f"{container['name']}: variables {sorted(env)} outside {prefix}*"
            )


def test_every_pod_turns_service_links_off(objs: list[Obj]) -> None:
    """The kubelet sets <SERVICE>_PORT=tcp://… for every Service in the namespace unless a
    pod opts out: Service inflight-router would give the router INFLIGHT_ROUTER_PORT (read
    as its --port), Service vllm gives vLLM VLLM_PORT (which vLLM refuses)."""
    services = {s["metadata"]["name"].upper().replace("-", "_") for s in find(objs, "Service")}
    assert {"INFLIGHT_ROUTER", "INFLIGHT_SCALER", "VLLM"} <= services  # why it matters
    for dep in find(objs, "Deployment"):
        spec = dep["spec"]["template"]["spec"]
        assert spec.get("enableServiceLinks") is False, dep["metadata"]["name"]


def test_replica_args_agree(objs: list[Obj]) -> None:
    """vLLM (base) or the emulator (overlay): slots, port and model name line up."""
    dep, container = deployment_container(objs, "vllm")
    _so, meta = scaled_object(objs)
    slots = int(meta[names.META_SLOTS_PER_REPLICA])
    args = expanded_args(dep, container)
    if container["image"].split(":")[0] == IMAGE:
        settings = load_settings(args, container_env(objs, dep, container))
        assert args[0] == "emulator"
        assert (settings.host, settings.port) == ("0.0.0.0", container_port(container, "http"))
        assert settings.max_num_seqs == slots
    else:
        flags = flag_values(args)
        assert container["command"] == ["vllm", "serve"]
        assert int(flags["max-num-seqs"]) == slots
        assert int(flags["port"]) == container_port(container, "http")
        assert flags["host"] == "0.0.0.0"
        gpus = container["resources"]["limits"]["nvidia.com/gpu"]
        assert int(gpus) == int(flags.get("tensor-parallel-size", "1")), "one GPU per TP rank"


# --- ScaledObject ---------------------------------------------------------------------------


def test_scaledobject_metadata_parses_with_the_real_scaler_parser(objs: list[Obj]) -> None:
    _so, meta = scaled_object(objs)
    from external_scaler.metadata import KEDA_KEYS, parse_metadata

    ours = set(meta) - KEDA_KEYS
    assert ours <= set(names.METADATA_DEFAULTS), (
        f"unknown keys: {ours - set(names.METADATA_DEFAULTS)}"
    )
    spec = parse_metadata(meta)
    assert spec.metric_name == meta[names.META_METRIC_NAME]
    assert spec.policy.slots_per_replica == int(meta[names.META_SLOTS_PER_REPLICA])
    assert spec.policy.time_scale == 1.0, "production runs in real time"


def test_scaledobject_states_the_scalers_own_defaults(objs: list[Obj]) -> None:
    """The trigger spells out the policy's settings for its reader (targetSaturation, the
    windows, …); each must be the default the code has (``inflight.names.DEFAULT_*``, the
    text ``METADATA_DEFAULTS``, which the policy's and ``inflight up``'s defaults are built
    from), or the YAML would drift from the code unseen. Only the selector (this stack's
    router), slotsPerReplica (vLLM's --max-num-seqs here, ``test_replica_args_agree``) and
    the replica bounds (the ScaledObject's own, ``test_the_trigger_states_the_replica_bounds``)
    belong to the deployment."""
    _so, meta = scaled_object(objs)
    from external_scaler.metadata import KEDA_KEYS, parse_metadata

    own = {
        names.META_SELECTOR,
        names.META_MODEL,  # one model pool's (overlays/two-models)
        names.META_CAPACITY_SELECTOR,  # this stack's vLLM job (docs/capacity.md)
        names.META_SLOTS_PER_REPLICA,
        names.META_MIN_REPLICA_COUNT,
        names.META_MAX_REPLICA_COUNT,
    }
    stated = {k: v for k, v in meta.items() if k not in KEDA_KEYS and k not in own}
    assert {
        names.META_TARGET_SATURATION,
        names.META_SCALE_UP_WINDOW_S,
        names.META_SCALE_DOWN_WINDOW_S,
    } <= set(stated), "the base ScaledObject states the policy's settings"
    assert stated == {k: names.METADATA_DEFAULTS[k] for k in stated}
    defaults = parse_metadata({k: meta[k] for k in own if k in meta})
    assert parse_metadata(meta) == defaults


def test_the_trigger_states_the_replica_bounds(objs: list[Obj]) -> None:
    """KEDA does not pass minReplicaCount/maxReplicaCount to an external scaler, and the
    scaler needs them (on partial data an answer at the minimum lowers nothing): the
    trigger repeats the ScaledObject's, and they must agree."""
    so, meta = scaled_object(objs)
    from external_scaler.metadata import parse_metadata

    policy = parse_metadata(meta).policy
    assert (policy.min_replicas, policy.max_replicas) == (
        so["spec"]["minReplicaCount"],
        so["spec"]["maxReplicaCount"],
    )


def test_the_scaler_parser_rejects_what_the_manifests_must_not_contain(objs: list[Obj]) -> None:
    """The metadata check can fail: a misspelt key and a non-matcher selector are refused."""
    _so, meta = scaled_object(objs)
    from external_scaler.errors import MetadataError
    from external_scaler.metadata import parse_metadata

    with pytest.raises(MetadataError, match="slotsPerReplika"):
        parse_metadata({**meta, "slotsPerReplika": "4"})
    with pytest.raises(MetadataError, match=names.META_SELECTOR):
        parse_metadata({**meta, names.META_SELECTOR: "up == 1"})


def test_scaledobject_points_at_the_scaler_and_the_replicas(objs: list[Obj]) -> None:
    so, meta = scaled_object(objs)
    namespace = so["metadata"]["namespace"]
    host, _, port = meta["scalerAddress"].rpartition(":")
    service, ns, svc = host.split(".")[:3]
    assert (ns, svc) == (namespace, "svc"), (
        f"scalerAddress {meta['scalerAddress']} must name the Service in namespace {namespace}"
        " (KEDA runs in its own namespace)"
    )
    _dep, _container, settings = container_settings(objs, "inflight-scaler")
    assert service_target(objs, service, int(port)) == settings.grpc_port
    target = so["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
    one(objs, "Deployment", target["name"])


def test_scaledobject_selector_selects_this_stacks_router(objs: list[Obj]) -> None:
    """Prometheus Operator labels a target ``namespace`` and ``job`` (= Service name)."""
    so, meta = scaled_object(objs)
    from external_scaler.selector import parse_selector

    canonical = parse_selector(names.META_SELECTOR, meta[names.META_SELECTOR])
    matchers = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', canonical))
    router_sm = one(objs, "ServiceMonitor", "inflight-router")
    assert "jobLabel" not in router_sm["spec"], "job would no longer be the Service name"
    (router_service,) = [
        s
        for s in find(objs, "Service")
        if selects(router_sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert matchers == {
        "namespace": so["metadata"]["namespace"],
        "job": router_service["metadata"]["name"],
    }
    assert meta[names.META_SOURCE] == "router"


def test_scaledobject_behaviour_is_the_shipped_one(objs: list[Obj]) -> None:
    from inflight.control.hpa import (
        KEDA_COOLDOWN_PERIOD_S,
        KEDA_POLLING_INTERVAL_S,
        SHIPPED_BEHAVIOR,
        ScalingRules,
    )

    def rules(r: ScalingRules) -> dict[str, Any]:
        return {
            "stabilizationWindowSeconds": int(r.stabilization_window_s),
            "selectPolicy": r.select_policy,
            "policies": [
                {"type": p.type, "value": p.value, "periodSeconds": int(p.period_s)}
                for p in r.policies
            ],
        }

    so, _meta = scaled_object(objs)
    spec = so["spec"]
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior == {
        "scaleUp": rules(SHIPPED_BEHAVIOR.scale_up),
        "scaleDown": rules(SHIPPED_BEHAVIOR.scale_down),
    }
    assert spec["pollingInterval"] == KEDA_POLLING_INTERVAL_S
    assert spec["cooldownPeriod"] == KEDA_COOLDOWN_PERIOD_S
    low, high = spec["minReplicaCount"], spec["maxReplicaCount"]
    assert 1 <= low <= high
    assert low <= spec["fallback"]["replicas"] <= high


# --- Services, probes, RBAC -----------------------------------------------------------------


def test_services_reach_declared_container_ports(objs: list[Obj]) -> None:
    for service in find(objs, "Service"):
        backends = service_backends(objs, service)
        assert backends, f"Service {service['metadata']['name']} selects no Deployment"
        for _dep, container in backends:
            for port in service["spec"]["ports"]:
                container_port(container, port.get("targetPort", port["port"]))


def test_probes_use_declared_ports(objs: list[Obj]) -> None:
    for dep in find(objs, "Deployment"):
        for container in dep["spec"]["template"]["spec"]["containers"]:
            probes = [container.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe")]
            assert container.get("readinessProbe"), f"{container['name']} has no readinessProbe"
            for probe in filter(None, probes):
                action = probe.get("httpGet") or probe.get("grpc")
                assert action, f"{container['name']}: probe is neither httpGet nor grpc"
                container_port(container, action["port"])


def test_router_rbac_reads_endpointslices(objs: list[Obj]) -> None:
    dep, _container = deployment_container(objs, "inflight-router")
    account = dep["spec"]["template"]["spec"]["serviceAccountName"]
    one(objs, "ServiceAccount", account)
    bindings = [
        b
        for b in find(objs, "RoleBinding")
        if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"])
    ]
    assert bindings, f"no RoleBinding for ServiceAccount {account}"
    verbs: set[str] = set()
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        role = one(objs, "Role", binding["roleRef"]["name"])
        for rule in role["rules"]:
            if "discovery.k8s.io" in rule["apiGroups"] and "endpointslices" in rule["resources"]:
                verbs.update(rule["verbs"])
    assert {"get", "list", "watch"} <= verbs


# --- metric names -----------------------------------------------------------------------------


def test_servicemonitors_select_one_service_and_its_ports(objs: list[Obj]) -> None:
    for sm in find(objs, "ServiceMonitor"):
        selector = sm["spec"]["selector"]["matchLabels"]
        matched = [s for s in find(objs, "Service") if selects(selector, s["metadata"]["labels"])]
        assert len(matched) == 1, (
            f"ServiceMonitor {sm['metadata']['name']}: {len(matched)} Services"
        )
        port_names = {p.get("name") for p in matched[0]["spec"]["ports"]}
        for endpoint in sm["spec"]["endpoints"]:
            assert endpoint["port"] in port_names
            assert endpoint.get("path", "/metrics") == "/metrics"


@pytest.mark.parametrize(
    ("monitor", "metrics"),
    [
        ("inflight-router", names.ROUTER_METRICS),
        ("inflight-scaler", names.SCALER_METRICS),
    ],
)
def test_servicemonitors_keep_exactly_the_shared_names(
    objs: list[Obj], monitor: str, metrics: dict[str, str]
) -> None:
    keep = keep_regex(objs, monitor)
    wanted = series_names(metrics)
    assert [n for n in sorted(wanted) if not keep.match(n)] == []
    # Nothing else: every name the regex lists is a shared name, so a stale one is noticed.
    listed = {n.rstrip("_") for n in re.findall(r"[a-z][a-z0-9_:]*", keep.pattern)}
    listed -= {"bucket", "sum", "count"}
    assert listed - set(metrics) == set()
    assert not keep.match("python_gc_objects_collected_total")


def test_vllm_servicemonitor_keeps_vllm_names(objs: list[Obj]) -> None:
    keep = keep_regex(objs, "vllm")
    assert all(keep.match(n) for n in VLLM_SERIES)


def test_prometheusrule_uses_only_kept_shared_names(objs: list[Obj]) -> None:
    rules = find(objs, "PrometheusRule")
    assert rules, "no PrometheusRule in the build (manifests/generated not included?)"
    keeps = {
        "router_": (series_names(names.ROUTER_METRICS), keep_regex(objs, "inflight-router")),
        "inflight_scaler_": (
            series_names(names.SCALER_METRICS),
            keep_regex(objs, "inflight-scaler"),
        ),
        "vllm:": (VLLM_SERIES, keep_regex(objs, "vllm")),
    }
    all_rules = [r for obj in rules for g in obj["spec"]["groups"] for r in g["rules"]]
    recorded = {r["record"] for r in all_rules if "record" in r}
    problems = []
    used_router = set()
    for rule in all_rules:
        for token in metric_tokens(str(rule["expr"])):
            if token.startswith("inflight:"):
                if token not in recorded:
                    problems.append(f"{token}: not recorded by any rule")
                continue
            prefix = next(p for p in keeps if token.startswith(p))
            known, keep = keeps[prefix]
            if token not in known:
                problems.append(f"{token}: not a name in inflight/names.py")
            elif not keep.match(token):
                problems.append(f"{token}: dropped by the ServiceMonitor")
            if prefix == "router_":
                used_router.add(token)
    assert not problems, "\n".join(problems)
    assert names.ROUTER_INFLIGHT in used_router, "the rules do not use L at all"


# --- the real servers, started with the manifests' args ---------------------------------------


def _local(env: dict[str, str], subcommand: str, *ports: str) -> dict[str, str]:
    """The manifests' variables moved to loopback: ``…_HOST`` → 127.0.0.1, each of
    ``ports`` → 0 (the server picks one and reports it in its ready file, which
    ``procs.start`` reads). Every other value is the manifests' own."""
    prefix = f"INFLIGHT_{subcommand.upper()}_"
    assert all(prefix + p.upper() in env for p in ("host", *ports)), sorted(env)
    return {**env, prefix + "HOST": "127.0.0.1", **{prefix + p.upper(): "0" for p in ports}}


def _scrape(url: str) -> set[str]:
    """Sample names served at ``url``, less prometheus_client's ``*_created`` timestamps
    (which the ServiceMonitors drop on purpose: nothing reads them)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.name
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if not s.name.endswith("_created")
    }


def _probe_paths(container: Obj) -> set[str]:
    return {
        container[k]["httpGet"]["path"]
        for k in ("startupProbe", "readinessProbe", "livenessProbe")
        if "httpGet" in container.get(k, {})
    }


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def test_router_answers_its_probes_and_serves_kept_metrics(procs: ProcessTracker) -> None:
    objs = objects("base")
    dep, container, _settings = container_settings(objs, "inflight-router")
    args = expanded_args(dep, container)
    # No API server here: swap EndpointSlice discovery for an empty static list, set the
    # way a ConfigMap would (an empty value is zero endpoints).
    env = {
        k: v
        for k, v in _local(container_env(objs, dep, container), "router", "port").items()
        if not k.startswith("INFLIGHT_ROUTER_K8S_")
    }
    env["INFLIGHT_ROUTER_ENDPOINTS"] = ""
    (path,) = _probe_paths(container)
    server = procs.start([*INFLIGHT, *args], name="router", ready_path=path, env=env)
    samples = _scrape(server.url + "/metrics")
    keep = keep_regex(objs, "inflight-router")
    ours = {s for s in samples if s.startswith("router_")}
    assert names.ROUTER_INFLIGHT in ours
    assert [s for s in sorted(ours) if not keep.match(s)] == []


def test_emulator_answers_its_probes_and_serves_kept_metrics(procs: ProcessTracker) -> None:
    objs = objects("overlays/emulator")
    dep, container, _settings = container_settings(objs, "vllm")
    args = expanded_args(dep, container)
    env = _local(container_env(objs, dep, container), "emulator", "port")
    env["INFLIGHT_EMULATOR_STARTUP_S"] = "0"
    server = procs.start([*INFLIGHT, *args], name="emulator", ready_path=None, env=env)
    for path in sorted(_probe_paths(container)):
        url = server.url + path
        wait_for(lambda: _get_ok(url), timeout_s=30.0, what=f"emulator {path}")  # noqa: B023
    samples = _scrape(server.url + "/metrics")
    keep = keep_regex(objs, "vllm")
    ours = {s for s in samples if s.startswith("vllm:")}
    assert {names.VLLM_RUNNING, names.VLLM_WAITING} <= ours
    assert [s for s in sorted(ours) if not keep.match(s)] == []


# --- TLS between KEDA and the scaler (on in every kustomization) ------------------------------

#: The TriggerAuthentication parameters KEDA's external scaler reads for (m)TLS.
KEDA_TLS_PARAMETERS = {"caCert", "tlsClientCert", "tlsClientKey"}


def test_mutual_tls_is_on_at_both_ends(objs: list[Obj]) -> None:
    """KEDA dials TLS with a client certificate (a TriggerAuthentication with all three
    parameters) and the scaler serves TLS requiring one, from files in a mounted Secret."""
    so, _meta = scaled_object(objs)
    dep, container, settings = container_settings(objs, "inflight-scaler")
    auth = so["spec"]["triggers"][0].get("authenticationRef")
    assert settings.tls_cert is not None and auth is not None, (
        "TLS between KEDA and the scaler is on by default: KEDA dials TLS only with a "
        "TriggerAuthentication, the scaler serves it only with --tls-cert: "
        f"authenticationRef={auth}, --tls-cert={settings.tls_cert}"
    )
    ta = one(objs, "TriggerAuthentication", auth["name"])
    assert {r["parameter"] for r in ta["spec"]["secretTargetRef"]} == KEDA_TLS_PARAMETERS
    assert settings.tls_key and settings.tls_client_ca, "mutual TLS needs a key and a client CA"
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    secrets = {
        v["name"]: v["secret"]["secretName"]
        for v in dep["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    for path in (settings.tls_cert, settings.tls_key, settings.tls_client_ca):
        assert any(
            path.startswith(mounts[name].rstrip("/") + "/") for name in secrets if name in mounts
        ), f"{path} is not in a mounted Secret"
    # The kubelet's gRPC probe cannot speak TLS: the probes must use plain HTTP.
    for key in ("readinessProbe", "livenessProbe"):
        assert "grpc" not in container[key], f"{key} is a gRPC probe on a TLS port"


def _make_certificates(tmp: Path, server_dns: str) -> None:
    """The CA, server and client certificates, as docs/kubernetes.md makes them."""
    (tmp / "san.ext").write_text(f"subjectAltName=DNS:{server_dns}\n")
    (tmp / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    x509 = ("x509", "-req", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1")
    new = ("req", "-newkey", "rsa:2048", "-nodes")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=inflight-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=tmp)  # fmt: skip
    openssl(*new, "-subj", "/CN=inflight-scaler", "-keyout", "server.key", "-out",
             "server.csr", cwd=tmp)  # fmt: skip
    openssl(*x509, "-in", "server.csr", "-extfile", "san.ext", "-out", "server.crt", cwd=tmp)
    openssl(*new, "-subj", "/CN=keda", "-keyout", "client.key", "-out", "client.csr", cwd=tmp)
    openssl(*x509, "-in", "client.csr", "-extfile", "client.ext", "-out", "client.crt", cwd=tmp)
    # The Secret's file names, as the component mounts them.
    (tmp / "tls.crt").write_bytes((tmp / "server.crt").read_bytes())
    (tmp / "tls.key").write_bytes((tmp / "server.key").read_bytes())


def test_scaler_serves_mutual_tls_and_kept_metrics_with_the_base_args(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    """The scaler, started with the base's args and environment and certificates made as
    the docs say, answers its HTTP probes, answers gRPC health to a client with KEDA's
    certificate (at the name KEDA dials), refuses one without, and serves only metric
    names its ServiceMonitor keeps. Nothing listens at its Prometheus URL: it must still
    start and report itself serving."""
    objs = objects("base")
    _so, meta = scaled_object(objs)
    dep, container, settings = container_settings(objs, "inflight-scaler")
    args = expanded_args(dep, container)
    host = meta["scalerAddress"].rpartition(":")[0]
    _make_certificates(tmp_path, host)
    (mount,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "tls"]
    env = _local(container_env(objs, dep, container), "scaler", "grpc_port", "metrics_port")
    env = {k: v.replace(mount.rstrip("/") + "/", f"{tmp_path}/") for k, v in env.items()}
    env["INFLIGHT_SCALER_PROMETHEUS_URL"] = "http://127.0.0.1:9"
    probe = container["readinessProbe"]["httpGet"]
    assert container_port(container, probe["port"]) == settings.metrics_port
    server = procs.start([*INFLIGHT, *args], name="scaler-tls", ready_path=probe["path"], env=env)
    grpc_port = server.ports["grpc"]
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    def check(credentials: grpc.ChannelCredentials) -> int | str:
        options = [("grpc.ssl_target_name_override", host)]
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials, options) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)
            except grpc.RpcError as exc:
                return str(exc.code())

    ca = (tmp_path / "ca.crt").read_bytes()
    keda = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=(tmp_path / "client.key").read_bytes(),
        certificate_chain=(tmp_path / "client.crt").read_bytes(),
    )
    serving = health_pb2.HealthCheckResponse.SERVING
    wait_for(lambda: check(keda) == serving, timeout_s=30.0, what="mTLS health SERVING")
    assert check(grpc.ssl_channel_credentials(root_certificates=ca)) != serving
    samples = _scrape(server.url + "/metrics")
    keep = keep_regex(objs, "inflight-scaler")
    ours = {s for s in samples if s.startswith("inflight_scaler_")}
    assert ours, "the scaler serves no inflight_scaler_ series"
    assert [s for s in sorted(ours) if not keep.match(s)] == []
