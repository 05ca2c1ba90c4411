"""Every dashboard panel and every rule, run against a real Prometheus scraping a real
router (in front of two real emulators, under load) and a real scaler called as KEDA does.

Grafana cannot run here, so each panel's queries are sent to Prometheus with the
dashboard variables set to "All". Every query must execute without error and return
data; alert expressions are also run with their comparisons turned into ``bool`` ones,
so the signal they compare returns data even while the alert is (rightly) quiet. The
recorded saturation must equal L ÷ capacity computed with ``inflight.names``' PromQL at
the same instants.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from dashboards import build as b
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from inflight import names as n
from tests.support import ProcessTracker, wait_for

ROOT = b.REPO_ROOT
TIME_SCALE = "0.05"  # a reference request takes 4.5 s × 0.05 ≈ 0.23 s
MODEL = "m"
WORKERS = 12  # closed loop on 2 replicas × 4 slots: L ≈ 12, saturation ≈ 1.5
READY_TIMEOUT_S = 60.0  # generous: a 2-core machine shared with other test runs
VARIABLES = {
    "$namespace": ".*", "$job": ".*", "$metric_name": ".*", "$model": ".*", "$vllm_job": ".*",
}  # fmt: skip


def _dashboard_queries() -> list[tuple[str, str, bool]]:
    out = []
    for path in sorted((ROOT / b.DASHBOARD_DIR).glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                assert "$" not in expr, f"unsubstituted variable in {expr}"
                out.append((f"{path.stem}: {panel['title']} [{target['refId']}]", expr, True))
    return out


def _rule_queries() -> list[tuple[str, str, bool]]:
    """(label, expr, must return data): an alert's own expression is empty while quiet.

    The Little's Law ratio records nothing until L has existed for its whole 5 m window
    (a deployment's first minutes would read λ low), so in this short run it and its
    alert must execute but have no data (checked separately).
    """
    groups = b.prom_rules.rule_groups()["groups"]
    out = []
    for group in groups:
        for rule in group["rules"]:
            young = n.REC_LITTLE in (rule.get("record"), *re.findall(r"[\w:]+", rule["expr"]))
            if "record" in rule:
                out.append((f"record {rule['record']}", rule["expr"], not young))
            else:
                out.append((f"alert {rule['alert']}", rule["expr"], False))
                signal = _as_bool(rule["expr"])
                out.append((f"alert {rule['alert']} (signal)", signal, not young))
    return out


def _as_bool(expr: str) -> str:
    """``a > 1`` -> ``a > bool 1``: the compared signal, 0 or 1, whether or not it fires."""
    return re.sub(r"(==|!=|>=|<=|>|<)(\s)", r"\1 bool\2", expr)


class Prom:
    """The few Prometheus HTTP API calls the test needs."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=10.0)

    def query(self, expr: str, at: float | None = None) -> tuple[str | None, list[Any]]:
        """(error or None, result list)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        resp = self.client.get("/api/v1/query", params=params)
        body = resp.json()
        if body.get("status") != "success":
            return f"{body.get('errorType')}: {body.get('error')}", []
        return None, body["data"]["result"]


# A shared prefix of several blocks (64 characters each: 16 tokens × 4), so the prefix
# panels have data: the router (--dispatch prefix) and the emulators (prefix caching) count
# it.
PROMPT = "summarize the meeting: " + "the team reviewed the quarterly plan in detail. " * 8


class Load:
    """Closed-loop workers: each sends its next completion when the previous one ends."""

    def __init__(self, url: str, workers: int) -> None:
        self.url = url
        self.stop = threading.Event()
        self.ok = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(workers)]

    def _run(self) -> None:
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 300}
        with httpx.Client(base_url=self.url, timeout=30.0) as client:
            while not self.stop.is_set():
                try:
                    resp = client.post("/v1/completions", json=body)
                    if resp.status_code == 200:
                        self.ok += 1
                    else:
                        self.errors.append(f"{resp.status_code} {resp.text[:200]}")
                except httpx.HTTPError as exc:
                    if not self.stop.is_set():
                        self.errors.append(repr(exc))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def _keda_calls(address: str) -> str | None:
    """What KEDA does each polling interval, plus two calls that fail on purpose.

    Returns why the normal calls failed (None when they worked): right after start the
    scaler may not see a window yet, and the caller polls again.
    """
    metadata = {n.META_TIME_SCALE: TIME_SCALE}
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name="llm", namespace="test", scalerMetadata=metadata)
        failure = None
        try:
            stub.GetMetricSpec(ref, timeout=3)
            request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
            stub.GetMetrics(request, timeout=3)
            stub.IsActive(ref, timeout=3)
        except grpc.RpcError as exc:
            failure = f"scaler call failed: {exc.code()}: {exc.details()}"
        for bad in ({n.META_SELECTOR: 'job="no-such-router"'}, {n.META_SLOTS_PER_REPLICA: "x"}):
            bad_ref = pb.ScaledObjectRef(
                name="llm", namespace="test", scalerMetadata={**metadata, **bad}
            )
            with pytest.raises(grpc.RpcError):
                stub.GetMetrics(
                    pb.GetMetricsRequest(scaledObjectRef=bad_ref, metricName="inflight"),
                    timeout=3,
                )
        return failure


def test_every_panel_and_rule_returns_data_and_saturation_is_l_over_capacity(
    procs: ProcessTracker, prometheus_factory, tmp_path: Path
) -> None:
    urls = []
    for i in range(2):
        emu = procs.start_inflight(
            [
                "emulator", "--port", "{port}", "--served-model-name", MODEL,
                "--max-num-seqs", "4", "--time-scale", TIME_SCALE, "--startup-s", "0",
                "--enable-prefix-caching",
            ],
            name=f"emulator{i}",
            ready_timeout_s=READY_TIMEOUT_S,
        )  # fmt: skip
        urls.append(emu.url)
    router = procs.start_inflight(
        [
            "router", "--port", "{port}", "--slots-per-endpoint", "4",
            "--endpoints", ",".join(urls), "--hold-when-full", "--dispatch", "prefix",
        ],
        name="router",
        ready_timeout_s=READY_TIMEOUT_S,
    )  # fmt: skip
    prom_server = prometheus_factory(
        # The emulators as vLLM's job: the KV panels read vLLM's series.
        jobs={
            "router": [f"127.0.0.1:{router.port}"],
            "scaler": [],
            "vllm": [u.removeprefix("http://") for u in urls],
        },
        rule_files=[ROOT / b.RULES_FILE],
    )
    scaler = procs.start_inflight(
        [
            "scaler", "--grpc-port", "0", "--metrics-port", "{port}",
            "--prometheus-url", prom_server.url,
        ],
        name="scaler",
        ready_timeout_s=READY_TIMEOUT_S,
    )  # fmt: skip
    prom_server.set_targets("scaler", [f"127.0.0.1:{scaler.port}"])
    prom = Prom(prom_server.url)
    queries = _dashboard_queries() + _rule_queries()

    with Load(router.url, WORKERS) as load:
        # L must be in Prometheus before the scaler can answer GetMetrics.
        wait_for(
            lambda: prom.query(f"{n.REC_L} > 0")[1],
            timeout_s=60,
            interval_s=0.5,
            what="recorded L > 0 under load",
        )

        def missing() -> list[str]:
            failure = _keda_calls(f"127.0.0.1:{scaler.ports['grpc']}")
            bad = [failure] if failure else []
            for label, expr, needs_data in queries:
                error, result = prom.query(expr)
                if error is not None:
                    pytest.fail(f"{label}: {expr}\n-> {error}")
                if needs_data and not result:
                    bad.append(label)
            return bad

        last: list[str] = []

        def all_have_data() -> bool:
            nonlocal last
            last = missing()
            return not last

        try:
            wait_for(all_have_data, timeout_s=90, interval_s=1.0, what="every query to have data")
        except AssertionError:
            pytest.fail(f"queries without data: {last}")
        # Every rate() has data now, but L is minutes old: no Little's Law ratio yet
        # (the old rule already recorded a ratio here, from rate()'s underestimate of λ).
        assert prom.query(n.REC_LITTLE) == (None, [])
        # Eight rule evaluations under load to compare with L ÷ capacity.
        samples = wait_for(
            lambda: [
                series
                for series in prom.query(f"{n.REC_SATURATION}[8s]")[1]
                if len(series["values"]) >= 8
            ],
            timeout_s=60,
            interval_s=0.5,
            what="8 recorded saturation samples",
        )

    assert load.ok > 50, load.errors[:5]
    assert not load.errors, load.errors[:5]

    # Recorded saturation == L ÷ capacity (names.py's PromQL) at the rule's own instants.
    assert len(samples) == 1, samples
    points = [(float(t), float(v)) for t, v in samples[0]["values"]]
    assert len(points) >= 5, points
    direct = f"({n.promql(n.PROMQL_L)}) / ({n.promql(n.PROMQL_CAPACITY)})"
    matched = 0
    for t, recorded in points:
        _, result = prom.query(direct, at=t)
        assert result, f"no L ÷ capacity at {t}"
        if abs(float(result[0]["value"][1]) - recorded) < 1e-9:
            matched += 1
    # A scrape that lands just after a rule evaluation can change one instant's inputs.
    assert matched >= 0.8 * len(points), (matched, points)
    # 12 closed-loop workers on 8 slots: saturated, held requests at the router.
    assert max(v for _, v in points) > 1.0, points
