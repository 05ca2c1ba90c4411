"""Contract: every metric name in the dashboards and rules is one the router or the scaler
actually exports (their real registries), and one that ``inflight.names`` defines.

A renamed metric in ``router/metrics.py`` or ``external_scaler/metrics.py`` makes a
dashboard panel go blank silently in production; this test fails instead.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from prometheus_client import CollectorRegistry

from dashboards import build as b
from inflight import names as n

ROOT = b.REPO_ROOT
_KEYWORDS = {
    "bool", "and", "or", "unless", "offset", "inf", "nan", "le", "group_left", "group_right",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (functions, labels and strings dropped).

    >>> sorted(metric_names('sum by (le) (rate(a_bucket{job=~"$job"}[1m])) / b'))
    ['a_bucket', 'b']
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    found = set()
    for m in re.finditer(r"(?<![\w.:$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        found.add(word)
    return found


def _dashboard_exprs() -> list[str]:
    exprs = []
    for path in sorted((ROOT / b.DASHBOARD_DIR).glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            exprs += [t["expr"] for t in panel.get("targets", [])]
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                m = re.fullmatch(r"label_values\(([\w:]+), *\w+\)", var["query"])
                assert m, var["query"]
                exprs.append(m.group(1))
    return exprs


def _rule_exprs() -> list[str]:
    groups = yaml.safe_load((ROOT / b.RULES_FILE).read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def _used() -> set[str]:
    used: set[str] = set()
    for expr in _dashboard_exprs() + _rule_exprs():
        used |= metric_names(expr)
    return used - set(n.RECORDED_NAMES)


def _exposed(registry: CollectorRegistry) -> set[str]:
    """Names as Prometheus stores them: counters with _total, histograms' three series."""
    out = set()
    for family in registry.collect():
        if family.type == "counter":
            out.add(family.name + "_total")
        elif family.type == "histogram":
            out |= {family.name + sfx for sfx in ("_bucket", "_sum", "_count")}
        else:
            out.add(family.name)
    return out


def _from_names(table: dict[str, str]) -> set[str]:
    out = set()
    for name, kind in table.items():
        if kind == "histogram":
            out |= {name + sfx for sfx in ("_bucket", "_sum", "_count")}
        else:
            out.add(name)
    return out


def _router_exposed() -> set[str]:
    from router.dispatch import Dispatcher
    from router.metrics import RouterMetrics
    from router.pool import Pool

    registry = CollectorRegistry()
    RouterMetrics(registry, Dispatcher(Pool(4)))
    return _exposed(registry)


def _scaler_exposed() -> set[str]:
    from external_scaler.metrics import ScalerMetrics

    registry = CollectorRegistry()
    ScalerMetrics(registry)
    return _exposed(registry)


def test_extractor_finds_names_and_skips_functions_labels_and_strings() -> None:
    expr = (
        'clamp_min((max(router_endpoints{state="ready",job=~"$job"})) + '
        "(sum(increase(x_total[10s])) > bool 0.5), 1) * on (namespace, job) inflight:a:b"
    )
    assert metric_names(expr) == {"router_endpoints", "x_total", "inflight:a:b"}


def test_dashboards_and_rules_read_only_names_from_inflight_names() -> None:
    used = _used()
    known = (
        _from_names(n.ROUTER_METRICS)
        | _from_names(n.SCALER_METRICS)
        | _from_names(n.PROMETHEUS_METRICS)
        | _from_names(n.VLLM_METRICS)
    )
    assert not used - known, f"not in inflight/names.py: {sorted(used - known)}"
    # The signals the issue is about are really on the dashboards and in the rules.
    for name in (
        n.ROUTER_INFLIGHT,
        n.ROUTER_REQUESTS_RECEIVED,
        n.ROUTER_REQUEST_DURATION + "_bucket",
        n.ROUTER_SLOTS_PER_ENDPOINT,
        n.ROUTER_ENDPOINTS,
        n.ROUTER_ENDPOINT_INFLIGHT,
        n.ROUTER_QUEUED,
        n.SCALER_METRIC_VALUE,
        n.SCALER_DESIRED_REPLICAS,
        n.SCALER_ERRORS,
        n.SCALER_QUERY_DURATION + "_bucket",
    ):
        assert name in used, name


def test_every_name_used_is_exported_by_the_router_or_the_scaler() -> None:
    # ``up`` comes from Prometheus itself, for every target it scrapes; vLLM's names are held
    # to a vLLM release and to the emulator by tests/unit/test_vllm_contract.py.
    exposed = (
        _router_exposed()
        | _scaler_exposed()
        | set(n.PROMETHEUS_METRICS)
        | _from_names(n.VLLM_METRICS)
    )
    missing = _used() - exposed
    assert not missing, f"used by dashboards/rules but exported by nobody: {sorted(missing)}"


def test_router_and_scaler_registries_match_the_names_module() -> None:
    """If this fails, a part drifted from inflight/names.py (or names.py changed)."""
    assert _router_exposed() == _from_names(n.ROUTER_METRICS)
    assert _scaler_exposed() == _from_names(n.SCALER_METRICS)


@pytest.mark.parametrize("expr", _rule_exprs())
def test_rules_use_only_recording_names_they_define(expr: str) -> None:
    # (vLLM's own names have a colon too: ``vllm:…``.)
    recorded = {m for m in metric_names(expr) if ":" in m and m not in n.VLLM_METRICS}
    assert recorded <= set(n.RECORDED_NAMES), recorded


def test_the_scaler_alert_matches_the_scalers_error_kinds() -> None:
    """Source failures (Prometheus or, with the direct source, the routers) page; metadata
    faults, a caller's deadline and internal errors do not. Every kind is a names.py one."""
    from external_scaler import errors

    rules = yaml.safe_load((ROOT / b.RULES_FILE).read_text())["groups"][1]["rules"]
    [alert] = [r for r in rules if r["alert"] == "InflightScalerSourceUnavailable"]
    kinds = set(re.search(r'kind=~"([^"]+)"', alert["expr"]).group(1).split("|"))  # type: ignore[union-attr]
    assert kinds == {
        n.SCALER_ERROR_SOURCE,
        n.SCALER_ERROR_SOURCE_TIMEOUT,
        n.SCALER_ERROR_SOURCE_EMPTY,
        n.SCALER_ERROR_NO_SAMPLES,
        n.SCALER_ERROR_ROUTER_POLL,
    }
    assert kinds <= set(n.SCALER_ERROR_KINDS)
    # The error tree's kinds are the names.py ones the alert means.
    assert {
        errors.SourceError.kind,
        errors.SourceTimeout.kind,
        errors.SourceEmpty.kind,
    } <= kinds
    # A window that may understate L is answered (up or hold, never down), so KEDA does not
    # fall back: its kinds are counted but do not page as "unavailable".
    assert {n.SCALER_ERROR_SOURCE_PARTIAL, n.SCALER_ERROR_SOURCE_STALE}.isdisjoint(kinds)
    assert errors.SourceRejected.kind == n.SCALER_ERROR_SOURCE_REJECTED
    assert errors.SourceRejected.kind not in kinds  # a metadata fault, not the source
