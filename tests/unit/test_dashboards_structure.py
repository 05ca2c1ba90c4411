"""The committed dashboards, rule file and manifests are what ``inflight dashboards build``
generates, and their structure is what Grafana and the Prometheus Operator need.

No Grafana server can run here, so the dashboards are checked as JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import build as b
from dashboards import prom_rules
from inflight import names as n
from inflight.cli import main

ROOT = b.REPO_ROOT
DASHBOARD_FILES = sorted((ROOT / b.DASHBOARD_DIR).glob("*.json"))


def _walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every (path, value) in a JSON tree."""
    out = [(path, node)]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _walk(v, f"{path}[{i}]")
    return out


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def test_committed_files_equal_what_build_generates() -> None:
    stale = b.stale(ROOT, b.render())
    assert not stale, f"run `inflight dashboards build`; out of date: {stale}"


def test_check_flag_fails_on_a_stale_file_and_passes_on_fresh_ones(tmp_path: Path) -> None:
    assert main(["dashboards", "build", "--root", str(tmp_path)]) == 0
    assert main(["dashboards", "build", "--check", "--root", str(tmp_path)]) == 0
    target = tmp_path / b.DASHBOARD_DIR / "saturation.json"
    target.write_text(target.read_text().replace("Saturation", "Saturatoin", 1))
    assert main(["dashboards", "build", "--check", "--root", str(tmp_path)]) == 1
    (tmp_path / b.RULES_FILE).unlink()
    assert main(["dashboards", "build", "--check", "--root", str(tmp_path)]) == 1


def test_build_writes_every_generated_file(tmp_path: Path) -> None:
    assert main(["dashboards", "build", "--root", str(tmp_path)]) == 0
    for rel in (b.RULES_FILE, b.PROMETHEUSRULE_FILE, b.CONFIGMAP_FILE):
        assert (tmp_path / rel).is_file(), rel
    assert sorted(p.name for p in (tmp_path / b.DASHBOARD_DIR).iterdir()) == [
        "saturation.json",
        "scaler.json",
    ]


def test_there_are_two_dashboards() -> None:
    assert [p.name for p in DASHBOARD_FILES] == ["saturation.json", "scaler.json"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_dashboard_uses_a_datasource_variable_never_a_hard_coded_uid(path: Path) -> None:
    board = json.loads(path.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    refs = [v for p, v in _walk(board) if p.endswith(".datasource") and isinstance(v, dict)]
    assert refs, "no datasource references at all"
    for ref in refs:
        assert ref == {"type": "prometheus", "uid": "${datasource}"}, ref
    # No uid anywhere except the dashboard's own and the datasource references.
    uids = [(p, v) for p, v in _walk(board) if p.endswith(".uid")]
    assert all(v == "${datasource}" for p, v in uids if p != ".uid"), uids


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_dashboard_has_label_selector_variables_used_by_every_query(path: Path) -> None:
    board = json.loads(path.read_text())
    names = [v["name"] for v in board["templating"]["list"] if v["type"] == "query"]
    assert {"namespace", "job"} <= set(names)
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"]["uid"] == "${datasource}"
            assert var["includeAll"] and var["allValue"] == ".*"
    for panel in _panels(board):
        for target in panel["targets"]:
            assert 'namespace=~"$namespace"' in target["expr"], (panel["title"], target)


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_panel_has_targets_with_unique_ref_ids_and_ids_are_unique(path: Path) -> None:
    board = json.loads(path.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), ids
    assert len(_panels(board)) >= 7
    for panel in _panels(board):
        assert panel["title"] and panel["description"], panel.get("title")
        targets = panel["targets"]
        assert targets, panel["title"]
        assert all(t["expr"].strip() for t in targets)
        refs = [t["refId"] for t in targets]
        assert len(refs) == len(set(refs)), panel["title"]
    # Grafana lays out on a 24-column grid.
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel.get("title")


def _panel(board: dict[str, Any], title_part: str) -> dict[str, Any]:
    found = [p for p in _panels(board) if title_part in p["title"]]
    assert len(found) == 1, f"expected one panel titled like {title_part!r}, got {found}"
    return found[0]


def test_saturation_dashboard_has_the_panels_the_issue_asks_for() -> None:
    board = json.loads((ROOT / b.DASHBOARD_DIR / "saturation.json").read_text())
    # L and λ on one panel, λ on the right axis.
    l_lambda = _panel(board, "L (in flight) and λ")
    overrides = l_lambda["fieldConfig"]["overrides"]
    assert {"id": "custom.axisPlacement", "value": "right"} in overrides[0]["properties"]
    assert overrides[0]["matcher"] == {"id": "byFrameRefID", "options": "B"}
    assert "router_requests_received_total" in l_lambda["targets"][1]["expr"]
    # Saturation with the 1.0 line.
    sat = _panel(board, "Saturation")
    defaults = sat["fieldConfig"]["defaults"]
    assert defaults["custom"]["thresholdsStyle"]["mode"] == "line"
    assert [s["value"] for s in defaults["thresholds"]["steps"]] == [None, 1.0]
    # The fallacy panel: both rules' desired replicas.
    fallacy = _panel(board, "What a QPS rule would do")
    exprs = [t["expr"] for t in fallacy["targets"]]
    assert any("increase(router_requests_received_total" in e and "[10s]" in e for e in exprs)
    assert any("ceil(" in e and "router_inflight_requests" in e for e in exprs)
    for title in ("W:", "Little's Law", "Ready replicas", "per endpoint", "held at the router"):
        _panel(board, title)


def test_saturation_dashboard_shows_the_prefix_hit_rates_side_by_side_and_the_door() -> None:
    board = json.loads((ROOT / b.DASHBOARD_DIR / "saturation.json").read_text())
    exprs = [t["expr"] for t in _panel(board, "Prefix cache hit rate")["targets"]]
    assert len(exprs) == 2
    router, engines = exprs
    assert "router_prefix_cache_hits_total" in router and "by (model)" in router
    assert "vllm:prefix_cache_hits_total" in engines and "$vllm_job" in engines
    (door,) = [t["expr"] for t in _panel(board, "refused at the door")["targets"]]
    assert "router_client_errors_total" in door and "by (reason)" in door


def test_saturation_dashboard_counts_the_routers_missing_from_l() -> None:
    """Issue #15: a router whose scrape fails drops out of every sum of L silently; the
    stat counts such routers, with the scaler's own definition of "down"."""
    board = json.loads((ROOT / b.DASHBOARD_DIR / "saturation.json").read_text())
    missing = _panel(board, "Routers missing")
    assert missing["type"] == "stat"
    [target] = missing["targets"]
    sel = 'namespace=~"$namespace",job=~"$job"'
    assert target["expr"] == f"count({n.promql(n.PROMQL_ROUTERS_DOWN, sel)}) or vector(0)"
    steps = missing["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(s["value"], s["color"]) for s in steps] == [(None, "green"), (1.0, "red")]
    # on top of the L panels, before anyone reads a partial L
    assert missing["gridPos"]["y"] < _panel(board, "L (in flight) and λ")["gridPos"]["y"]


def _row_of(board: dict[str, Any], panel: dict[str, Any]) -> str:
    """The title of the row ``panel`` sits in: the last row above it."""
    rows = [p for p in board["panels"] if p["type"] == "row"]
    above = [r for r in rows if r["gridPos"]["y"] < panel["gridPos"]["y"]]
    title: str = max(above, key=lambda r: r["gridPos"]["y"])["title"]
    return title


def test_scaler_dashboard_has_the_panels_the_issue_asks_for() -> None:
    board = json.loads((ROOT / b.DASHBOARD_DIR / "scaler.json").read_text())
    for title in ("Value and target", "Derived replica count", "Active", "latency", "Errors"):
        _panel(board, title)


def test_scaler_dashboard_says_which_capacity_dimension_binds() -> None:
    """Issue 23: the binding gauge by dimension, and vLLM's KV share beside it, read from
    the replicas' job (a variable of its own: the trigger's capacitySelector)."""
    board = json.loads((ROOT / b.DASHBOARD_DIR / "scaler.json").read_text())
    binding = _panel(board, "Binding capacity dimension")
    assert binding["type"] == "state-timeline"
    [target] = binding["targets"]
    assert target["expr"].startswith("max by (metric_name, dimension) (")
    assert n.SCALER_CAPACITY_BINDING in target["expr"]
    assert "{{dimension}}" in target["legendFormat"]
    [mapping] = binding["fieldConfig"]["defaults"]["mappings"]
    assert mapping["options"]["1"]["text"] == "binds"
    kv = _panel(board, "KV cache")
    exprs = [t["expr"] for t in kv["targets"]]
    sel = 'namespace=~"$namespace",job=~"$vllm_job"'
    share = f"({n.promql(n.PROMQL_KV_USAGE, sel)}) / ({n.promql(n.PROMQL_KV_RUNNING, sel)})"
    assert share in exprs  # the scaler's own PromQL for U and R
    assert n.promql(n.PROMQL_KV_WAITING, sel) in exprs
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["vllm_job"]["query"] == f"label_values({n.VLLM_KV_CACHE_USAGE}, job)"


def test_scaler_dashboard_graphs_l_in_each_capacity_dimension() -> None:
    """Both dimensions' L on one timeseries in the KV row, by trigger and dimension, so the
    one that does not bind shows how far it is from binding."""
    board = json.loads((ROOT / b.DASHBOARD_DIR / "scaler.json").read_text())
    panel = _panel(board, "L in each capacity dimension")
    assert panel["type"] == "timeseries"
    [target] = panel["targets"]
    sel = 'namespace=~"$namespace",job=~"$job",metric_name=~"$metric_name"'
    want = f"max by (metric_name, dimension) ({n.SCALER_DIMENSION_INFLIGHT}{{{sel}}})"
    assert target["expr"] == want
    assert target["legendFormat"] == "{{metric_name}} {{dimension}}"
    assert _row_of(board, panel) == "Capacity: which dimension binds"


def test_scaler_dashboard_shows_when_a_scale_up_was_held() -> None:
    """The late scale-up's hold changes no replica count, so only its gauge shows it: a
    state timeline by trigger in the first row, 1 mapped to "held"."""
    sel = 'namespace=~"$namespace",job=~"$job",metric_name=~"$metric_name"'
    board = json.loads((ROOT / b.DASHBOARD_DIR / "scaler.json").read_text())
    panel = _panel(board, "Scale-up held")
    assert (panel["type"], _row_of(board, panel)) == ("state-timeline", "What KEDA is told")
    assert [(t["expr"], t["legendFormat"]) for t in panel["targets"]] == [
        (f"max by (metric_name) ({n.SCALER_SCALE_UP_HELD}{{{sel}}})", "{{metric_name}}")
    ]
    [mapping] = panel["fieldConfig"]["defaults"]["mappings"]
    assert mapping["options"]["1"]["text"] == "held"
    assert "startupSeconds" in panel["description"]
    # ... and how often, from the counter: held answers over all answers, per trigger.
    share = _panel(board, "Share of KEDA's polls held")
    assert (share["type"], _row_of(board, share)) == ("timeseries", "What KEDA is told")
    held = f"sum by (metric_name) (rate({n.SCALER_HELD_DECISIONS}{{{sel}}}[5m]))"
    every = f"sum by (metric_name) (rate({n.SCALER_DECISIONS}{{{sel}}}[5m]))"
    assert [t["expr"] for t in share["targets"]] == [f"{held} / {every}"]
    assert share["fieldConfig"]["defaults"]["unit"] == "percentunit"


# --- rules -----------------------------------------------------------------------------


def _rules_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / b.RULES_FILE).read_text())
    return data


def _alerts() -> list[dict[str, Any]]:
    return [r for g in _rules_file()["groups"] for r in g["rules"] if "alert" in r]


def _duration_s(text: str) -> int:
    m = re.fullmatch(r"(\d+)([smh])", text)
    assert m, text
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def test_every_alert_has_summary_description_with_value_severity_and_for() -> None:
    alerts = _alerts()
    assert {a["alert"] for a in alerts} == {
        "InflightSustainedQueueing",
        "InflightSaturatedAtMaxReplicas",
        "InflightEndpointImbalance",
        "InflightLittlesLawMismatch",
        "InflightScalerSourceUnavailable",
        "InflightScalerOnPartialData",
        "InflightNoReadyEndpoints",
        "InflightKvCapacityBinding",
        "InflightKvSaturatedAtMaxReplicas",
        "InflightRouterKvCapacityUnread",
        "InflightPrefixIndexDiverges",
    }
    for a in alerts:
        ann = a["annotations"]
        assert ann["summary"], a["alert"]
        assert "$value" in ann["description"], a["alert"]
        assert a["labels"]["severity"] in ("warning", "critical")
        # Production durations: long enough to ride out a replica start.
        assert _duration_s(a["for"]) >= 300, a["alert"]


def test_every_alert_has_a_runbook_section() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    headings = {h.strip().lower() for h in re.findall(r"^## (.+)$", runbook, re.M)}
    for a in _alerts():
        url = a["annotations"]["runbook_url"]
        path, anchor = url.split("#")
        assert path == prom_rules.RUNBOOK_PATH
        assert anchor in headings, f"docs/runbook.md has no '## {a['alert']}' section"


def test_recording_rules_cover_l_lambda_w_capacity_and_saturation() -> None:
    records = {r["record"] for g in _rules_file()["groups"] for r in g["rules"] if "record" in r}
    assert {n.REC_L, n.REC_LAMBDA, n.REC_W, n.REC_CAPACITY, n.REC_SATURATION} <= records
    assert records == set(n.RECORDED_NAMES)


def test_prometheusrule_manifest_wraps_the_same_groups() -> None:
    manifest = yaml.safe_load((ROOT / b.PROMETHEUSRULE_FILE).read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["metadata"]["name"]
    assert manifest["spec"] == _rules_file()


def test_dashboards_configmap_holds_the_committed_json() -> None:
    cm = yaml.safe_load((ROOT / b.CONFIGMAP_FILE).read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for path in DASHBOARD_FILES:
        assert json.loads(cm["data"][f"inflight-{path.name}"]) == json.loads(path.read_text())


def test_built_with_a_grafana_11_sdk() -> None:
    """A plain install resolves to an old 10.1 build (epoch versions); pyproject pins 11."""
    from importlib.metadata import version

    sdk = version("grafana-foundation-sdk")
    assert sdk.split("!")[-1].startswith("11."), sdk
    for path in DASHBOARD_FILES:
        assert json.loads(path.read_text())["schemaVersion"] >= 39, path.name  # Grafana 11
