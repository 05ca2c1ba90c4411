"""The manifests' cluster-side hardening, checked on every built kustomization.

* Every pod: the runtime's default seccomp profile, no privilege escalation, every
  capability dropped; inflight's own containers also run as a non-root user on a
  read-only root filesystem. No pod but the router (which watches EndpointSlices) gets a
  service-account token.
* Pod Security admission: the namespace's ``enforce`` level admits every pod (checked
  here with the Pod Security Standards' rules for the fields a pod can set), it warns and
  audits against ``restricted``, and where it enforces less than ``restricted`` (the base,
  for vLLM's image) the only pods short of it are vLLM's, for running as root.
* NetworkPolicy ``vllm`` selects every model's replicas and nothing else, and opens their
  port only to the router's pods and to Prometheus (the namespace the scaler's Prometheus
  URL names).
* The scaler bounds its Prometheus fetches a second, at a rate its admitted triggers
  need at KEDA's and the HPA's periods.
* Component ``scaler-tls-cert-manager`` issues exactly the Secrets the base's mutual TLS
  mounts and reads, for the name KEDA dials, from one CA.

No API server, admission controller or CNI runs here: that a cluster enforces these is
not tested.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest

from inflight.control.hpa import HPA_SYNC_PERIOD_S
from tests.component.test_manifests_build import (
    KUBERNETES_VERSION,
    KUSTOMIZATIONS,
    _crd_errors,
    find,
    objects,
    one,
)
from tests.component.test_manifests_contract import (
    Obj,
    container_port,
    container_settings,
    scaled_object,
)
from tests.component.test_manifests_exposure import build_with_component

INFLIGHT_IMAGE = "inflight"
PSA = "pod-security.kubernetes.io/"
#: Capabilities the baseline profile lets a container add (Pod Security Standards).
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
#: Volume types the restricted profile allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}


@pytest.fixture(params=KUSTOMIZATIONS)
def built(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    return request.param, objects(request.param)


def pods(objs: list[Obj]) -> list[tuple[str, Obj]]:
    """(Deployment name, pod template spec) of every Deployment."""
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in find(objs, "Deployment")
    ]


def _containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def _is_inflight(container: Obj) -> bool:
    return str(container["image"]).split(":")[0].rsplit("/", 1)[-1] == INFLIGHT_IMAGE


def baseline_violations(spec: Obj) -> list[str]:
    """What in ``spec`` the Pod Security Standards' baseline profile refuses."""
    out = [f"{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    out += [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    pod_sc = spec.get("securityContext", {})
    if pod_sc.get("seccompProfile", {}).get("type") == "Unconfined":
        out.append("pod seccompProfile Unconfined")
    for c in _containers(spec):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        if added:
            out.append(f"{c['name']}: adds {sorted(added)}")
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append(f"{c['name']}: seccompProfile Unconfined")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{c['name']}: hostPort")
    return out


def restricted_violations(spec: Obj) -> list[str]:
    """What in ``spec`` the restricted profile refuses (baseline's refusals included)."""
    out = baseline_violations(spec)
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    pod_sc = spec.get("securityContext", {})
    for c in _containers(spec):
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            out.append(f"{c['name']}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{c['name']}: capabilities do not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: adds capabilities")
    return out


PROFILES = {"baseline": baseline_violations, "restricted": restricted_violations}


def test_the_checker_refuses_what_the_standards_refuse() -> None:
    """The profile checks above can fail: a root, escalating, unconfined pod is refused."""
    bad: Obj = {
        "hostNetwork": True,
        "securityContext": {"seccompProfile": {"type": "Unconfined"}},
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "c",
                "image": "x",
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
            }
        ],
    }
    assert len(baseline_violations(bad)) == 5
    restricted = restricted_violations(bad)
    for what in ("allowPrivilegeEscalation", "runAsNonRoot", "drop ALL", "hostPath"):
        assert any(what in v for v in restricted), (what, restricted)


def test_every_pod_is_confined(built: tuple[str, list[Obj]]) -> None:
    name, objs = built
    problems = []
    for deployment, spec in pods(objs):
        seccomp = spec.get("securityContext", {}).get("seccompProfile")
        if seccomp != {"type": "RuntimeDefault"}:
            problems.append(f"{deployment}: pod seccompProfile {seccomp}")
        for c in _containers(spec):
            sc = c.get("securityContext", {})
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{deployment}/{c['name']}: allowPrivilegeEscalation")
            if sc.get("capabilities") != {"drop": ["ALL"]}:
                problems.append(f"{deployment}/{c['name']}: capabilities {sc.get('capabilities')}")
            if _is_inflight(c):
                pod_sc = spec.get("securityContext", {})
                if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
                    problems.append(f"{deployment}/{c['name']}: not runAsNonRoot")
                if sc.get("readOnlyRootFilesystem") is not True:
                    problems.append(f"{deployment}/{c['name']}: root filesystem writable")
    assert not problems, f"manifests/{name}:\n" + "\n".join(problems)


def test_only_the_router_gets_a_service_account_token(built: tuple[str, list[Obj]]) -> None:
    """The router needs one to watch EndpointSlices (its k8s endpoint source); every other
    pod opts out. The router's token is for its own ServiceAccount, which has the Role."""
    name, objs = built
    for deployment, spec in pods(objs):
        if deployment == "inflight-router":
            _dep, _c, settings = container_settings(objs, deployment)
            assert settings.k8s_service, "the router watches no Service: it needs no token"
            assert spec.get("automountServiceAccountToken", True) is True
            assert spec["serviceAccountName"] == "inflight-router"
            binding = one(objs, "RoleBinding", "inflight-router-endpointslices")
            assert {s["name"] for s in binding["subjects"]} == {spec["serviceAccountName"]}
        else:
            assert spec.get("automountServiceAccountToken") is False, (
                f"manifests/{name}: Deployment {deployment} mounts a token it never uses"
            )


def test_pod_security_labels_admit_every_pod_and_warn_on_restricted(
    built: tuple[str, list[Obj]],
) -> None:
    name, objs = built
    labels = one(objs, "Namespace", "inflight")["metadata"].get("labels", {})
    enforce = labels.get(PSA + "enforce")
    assert enforce in PROFILES, f"manifests/{name}: the namespace enforces {enforce!r}"
    assert labels.get(PSA + "warn") == labels.get(PSA + "audit") == "restricted"
    for mode in ("enforce", "warn", "audit"):
        assert labels.get(f"{PSA}{mode}-version") == "latest"
    short = {d: restricted_violations(spec) for d, spec in pods(objs)}
    for deployment, spec in pods(objs):
        refused = PROFILES[enforce](spec)
        assert not refused, f"manifests/{name}: {enforce} refuses {deployment}: {refused}"
    if enforce == "restricted":
        return
    # Less than restricted only for vLLM's image, which runs as root; and only then.
    vllm_images = {
        d: c["image"] for d, spec in pods(objs) for c in spec["containers"] if "vllm" in c["image"]
    }
    assert vllm_images, f"manifests/{name} enforces {enforce} without vLLM's image in it"
    assert {d for d, v in short.items() if v} == set(vllm_images)
    for deployment in vllm_images:
        assert all("runAsNonRoot" in v for v in short[deployment]), short[deployment]


def test_without_vllm_the_namespace_enforces_restricted() -> None:
    for name in KUSTOMIZATIONS:
        objs = objects(name)
        if any("vllm/" in c["image"] for _d, spec in pods(objs) for c in spec["containers"]):
            continue
        labels = one(objs, "Namespace", "inflight")["metadata"]["labels"]
        assert labels[PSA + "enforce"] == "restricted", f"manifests/{name}"


def test_only_the_router_and_prometheus_reach_the_replicas(built: tuple[str, list[Obj]]) -> None:
    name, objs = built
    policy = one(objs, "NetworkPolicy", "vllm")
    kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    selector = spec["podSelector"]["matchLabels"]

    def selected(dep: Obj) -> bool:
        labels = dep["spec"]["template"]["metadata"]["labels"]
        return all(labels.get(k) == v for k, v in selector.items())

    # Every Deployment behind Service vllm (each model's replicas), and nothing else.
    service_selector = one(objs, "Service", "vllm")["spec"]["selector"]
    replicas = {
        d["metadata"]["name"]
        for d in find(objs, "Deployment")
        if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v
               for k, v in service_selector.items())
    }  # fmt: skip
    assert replicas and {
        d["metadata"]["name"] for d in find(objs, "Deployment") if selected(d)
    } == (replicas), (
        f"manifests/{name}: the policy must select exactly the replicas {sorted(replicas)}"
    )

    (rule,) = spec["ingress"]
    for dep_name in replicas:
        _dep, container = deployment_container_of(objs, dep_name)
        assert [container_port(container, p["port"]) for p in rule["ports"]] == [
            container_port(container, "http")
        ]
    assert all(p.get("protocol", "TCP") == "TCP" for p in rule["ports"])
    router = one(objs, "Deployment", "inflight-router")
    router_labels = router["spec"]["template"]["metadata"]["labels"]
    _dep, _c, scaler = container_settings(objs, "inflight-scaler")
    prometheus_namespace = urlparse(scaler.prometheus_url).hostname.split(".")[1]
    peers = rule["from"]
    assert len(peers) == 2, peers
    same_namespace = [p for p in peers if set(p) == {"podSelector"}]
    assert len(same_namespace) == 1
    router_selector = same_namespace[0]["podSelector"]["matchLabels"]
    assert all(router_labels.get(k) == v for k, v in router_selector.items())
    for other in find(objs, "Deployment"):
        if other is not router:
            labels = other["spec"]["template"]["metadata"]["labels"]
            assert not all(labels.get(k) == v for k, v in router_selector.items()), other
    (monitoring,) = [p for p in peers if "namespaceSelector" in p]
    assert monitoring == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": prometheus_namespace}},
        "podSelector": {"matchLabels": PROMETHEUS_POD_LABELS},
    }, "Prometheus' pods, in the namespace INFLIGHT_SCALER_PROMETHEUS_URL names"


def test_the_scaler_bounds_its_prometheus_fetches(built: tuple[str, list[Obj]]) -> None:
    """On, and not below what every admitted trigger needs: each fetched once a KEDA
    polling interval (IsActive) and once an HPA sync (GetMetrics)."""
    name, objs = built
    _dep, _c, settings = container_settings(objs, "inflight-scaler")
    so, _meta = scaled_object(objs)
    needed = settings.max_triggers * (1 / so["spec"]["pollingInterval"] + 1 / HPA_SYNC_PERIOD_S)
    assert settings.max_queries_per_s >= needed > 0, (
        f"manifests/{name}: --max-queries-per-s {settings.max_queries_per_s} "
        f"(0 is no bound); {settings.max_triggers} triggers need {needed:g} a second"
    )


def deployment_container_of(objs: list[Obj], deployment: str) -> tuple[Obj, Obj]:
    dep = one(objs, "Deployment", deployment)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return dep, container


def test_cert_manager_component_issues_the_secrets_tls_reads(tmp_path: Path) -> None:
    objs = build_with_component(tmp_path, "scaler-tls-cert-manager")
    custom = [o for o in objs if o["apiVersion"] == "cert-manager.io/v1"]
    errors = [e for o in custom for e in _crd_errors(o)]
    assert not errors, "\n".join(errors)
    namespace = one(objs, "Namespace", "inflight")["metadata"]["name"]
    assert {o["metadata"]["namespace"] for o in custom} == {namespace}
    certificates = {c["spec"]["secretName"]: c["spec"] for c in find(objs, "Certificate")}
    issuers = {i["metadata"]["name"]: i["spec"] for i in find(objs, "Issuer")}

    # The scaler mounts the server certificate's Secret; KEDA reads the client's.
    dep, _container, _settings = container_settings(objs, "inflight-scaler")
    mounted = {
        v["secret"]["secretName"]
        for v in dep["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    so, meta = scaled_object(objs)
    ta = one(objs, "TriggerAuthentication", so["spec"]["triggers"][0]["authenticationRef"]["name"])
    keda_secrets = {r["name"] for r in ta["spec"]["secretTargetRef"]}
    (server_secret,) = mounted
    (client_secret,) = keda_secrets
    server, client = certificates[server_secret], certificates[client_secret]
    host = meta["scalerAddress"].rpartition(":")[0]
    assert host in server["dnsNames"], "the server certificate must name the address KEDA dials"
    assert "server auth" in server["usages"] and "client auth" in client["usages"]
    # One CA signs both, and cert-manager's CA Issuer writes it as ca.crt into both.
    assert server["issuerRef"] == client["issuerRef"]
    ca_issuer = issuers[server["issuerRef"]["name"]]
    ca = certificates[ca_issuer["ca"]["secretName"]]
    assert ca["isCA"] is True
    assert "selfSigned" in issuers[ca["issuerRef"]["name"]]
    assert {r["key"] for r in ta["spec"]["secretTargetRef"]} == {"ca.crt", "tls.crt", "tls.key"}
