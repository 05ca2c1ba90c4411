"""The router's token demand in the scaler's range query and its reading back
(docs/capacity.md): the ``tok_*`` signals on the router's ``selector`` (vLLM's series stay
on ``capacitySelector``), only under ``capacity`` ``auto`` and the router source, and the
decision on them through :func:`external_scaler.decision.costed_decision`."""

from __future__ import annotations

from typing import Any

import pytest

from external_scaler.decision import costed_decision
from external_scaler.metadata import parse_metadata
from external_scaler.sources import Observed
from external_scaler.sources.prometheus import kv_from_matrix, window_from_matrix
from external_scaler.sources.promql import (
    PROMQL_TOK_CAPACITY,
    SIGNAL_LABEL,
    SIGNAL_TOK_CAPACITY,
    SIGNAL_TOK_INFLIGHT,
    SIGNAL_TOK_QUEUED,
    range_query,
)
from inflight import names

META = {
    "selector": 'job="router"',
    "capacitySelector": 'job="vllm"',
    "slotsPerReplica": "4",
    "policy": "saturation",
    "queueHeadroom": "0",  # tests.unit.policy_pins: the settings these figures were written for
    "scaleDownWindowSeconds": "60",
}


def test_the_router_series_are_read_on_the_selector_with_the_model() -> None:
    expr = range_query(parse_metadata({**META, "model": "m"})).expr
    sel = 'job="router",model="m"'
    assert f"sum({names.ROUTER_ENDPOINT_INFLIGHT_TOKENS}{{{sel}}})" in expr
    assert f"sum({names.ROUTER_QUEUED_TOKENS}{{{sel}}})" in expr
    assert f"avg({names.ROUTER_ENDPOINT_KV_TOKENS}{{{sel}}} > 0)" in expr
    assert names.promql(PROMQL_TOK_CAPACITY, sel) in expr
    for signal in (SIGNAL_TOK_INFLIGHT, SIGNAL_TOK_QUEUED, SIGNAL_TOK_CAPACITY):
        assert f'"{SIGNAL_LABEL}", "{signal}"' in expr
    # vLLM's KV series stay on capacitySelector
    assert names.promql(names.PROMQL_KV_USAGE, 'job="vllm",model_name="m"') in expr


@pytest.mark.parametrize("extra", [{"capacity": "requests"}, {"source": "vllm"}])
def test_no_router_tokens_under_requests_or_the_vllm_source(extra: dict[str, str]) -> None:
    expr = range_query(parse_metadata({**META, **extra})).expr
    assert names.ROUTER_ENDPOINT_KV_TOKENS not in expr
    assert names.ROUTER_QUEUED_TOKENS not in expr


def _series(signal: str, value: str) -> dict[str, Any]:
    return {"metric": {SIGNAL_LABEL: signal}, "values": [(t, value) for t in range(930, 1001)]}


def test_decide_on_prometheus_answer_reads_the_routers_demand() -> None:
    """The KV-bound case as Prometheus answers it with token admission: L = 4, vLLM has
    nothing running at these steps (between admissions), the router has 4,000 tokens in
    flight and 4,000 held on 5,120-token replicas: the value 6.25, 2 replicas, and the
    reason names the router as the KV dimension's source."""
    spec = parse_metadata(META)
    query = range_query(spec)
    data: dict[str, Any] = {
        "resultType": "matrix",
        "result": [
            _series("inflight", "4"),
            _series("ready", "1"),
            _series("kv_usage", "0"),
            _series("kv_running", "0"),
            _series(SIGNAL_TOK_INFLIGHT, "4000"),
            _series(SIGNAL_TOK_QUEUED, "4000"),
            _series(SIGNAL_TOK_CAPACITY, "5120"),
        ],
    }
    kv = kv_from_matrix(data)
    assert kv.router_seen and kv.router_queued_tokens[-1].value == 4000
    window = window_from_matrix(data, query, 930.0, 1000.0)
    decided = costed_decision(spec, Observed(window, 1000.0, kv))
    assert decided.dimension == "kv_tokens"
    assert decided.capacity.kv_inflight == pytest.approx(6.25)
    assert decided.decision.value == pytest.approx(6.25)
    assert decided.decision.desired_replicas == 2
    assert "from router demand" in decided.decision.reason
    # the same answer without the router's capacity: vLLM runs nothing, no KV share
    data["result"] = [r for r in data["result"] if r["metric"][SIGNAL_LABEL] != "tok_capacity"]
    blind = costed_decision(spec, Observed(window, 1000.0, kv_from_matrix(data)))
    assert blind.dimension == "requests" and blind.decision.value == pytest.approx(4)
