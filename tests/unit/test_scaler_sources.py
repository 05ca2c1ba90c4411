"""The pure parts of the sources: the PromQL, the step, Prometheus' JSON, router text."""

from __future__ import annotations

import json

import pytest

from external_scaler.errors import SourceEmpty, SourceError, SourceRejected, SourceTimeout
from external_scaler.metadata import parse_metadata
from external_scaler.sources.direct import parse_router_metrics
from external_scaler.sources.prometheus import _decode, _window
from external_scaler.sources.promql import range_query, step_for
from inflight import names


def test_router_query_has_three_labelled_signals() -> None:
    q = range_query(parse_metadata({"selector": 'job="router"'}))
    assert names.promql(names.PROMQL_L, 'job="router"') in q.expr
    assert f'sum({names.ROUTER_REQUESTS_RECEIVED}{{job="router"}})' in q.expr
    assert f'max({names.ROUTER_ENDPOINTS}{{state="ready",job="router"}})' in q.expr
    assert q.expr.count("label_replace(") == 3
    assert q.lookback_s == 70.0


def test_vllm_query_uses_vllm_names() -> None:
    q = range_query(parse_metadata({"source": "vllm"}))
    assert "(" + names.promql(names.PROMQL_L_VLLM) + ")" in q.expr
    assert names.ROUTER_INFLIGHT not in q.expr


@pytest.mark.parametrize(
    ("metadata", "step"),
    [
        ({}, 1.0),  # 10 s / 60 s windows -> 1 s step, 72 points
        ({"timeScale": "0.1"}, 0.1),
        ({"scaleUpWindowSeconds": "0"}, 6.0),  # a tenth of the 60 s window
        ({"scaleUpWindowSeconds": "0", "scaleDownWindowSeconds": "0"}, 0.05),
        ({"timeScale": "0.001"}, 0.05),  # floor
        ({"scaleUpWindowSeconds": "86400", "scaleDownWindowSeconds": "86400"}, 17.28),
    ],
)
def test_step(metadata: dict[str, str], step: float) -> None:
    spec = parse_metadata(metadata)
    assert step_for(spec) == pytest.approx(step)
    assert spec.policy.lookback_s / step_for(spec) <= 10_000


def test_bounds_are_aligned_so_replicas_agree() -> None:
    q = range_query(parse_metadata({}))
    assert q.bounds(1000.2) == q.bounds(1000.9) == (929.0, 1000.0)
    assert q.bounds(1001.0)[1] == 1001.0


def _matrix(series: dict[str, list[tuple[float, str]]]) -> dict:
    return {
        "resultType": "matrix",
        "result": [
            {"metric": {"signal": name}, "values": [[t, v] for t, v in values]}
            for name, values in series.items()
        ],
    }


def test_window_from_matrix() -> None:
    q = range_query(parse_metadata({}))
    data = _matrix(
        {
            "inflight": [(999.0, "3"), (1000.0, "4")],
            "arrivals": [(1000.0, "10")],
            "ready": [(1000.0, "2")],
        }
    )
    w = _window(data, q, 928.0, 1000.0)
    assert [s.value for s in w.inflight] == [3.0, 4.0]
    assert w.arrivals_total[0].value == 10.0
    assert w.ready_replicas[0].value == 2.0


def test_empty_or_stale_l_is_an_error_not_zero() -> None:
    q = range_query(parse_metadata({}))
    with pytest.raises(SourceEmpty, match="no sample of L"):
        _window(_matrix({}), q, 928.0, 1000.0)
    with pytest.raises(SourceEmpty, match="stale"):
        _window(_matrix({"inflight": [(950.0, "4")]}), q, 928.0, 1000.0)


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}, SourceRejected),
        (
            503,
            {"status": "error", "errorType": "timeout", "error": "query timed out"},
            SourceTimeout,
        ),
        (422, {"status": "error", "errorType": "execution", "error": "x"}, SourceError),
        (200, {"status": "success", "data": {"resultType": "vector", "result": []}}, SourceError),
        (502, "<html>bad gateway</html>", SourceError),
    ],
)
def test_prometheus_errors_are_mapped(status: int, body: object, error: type[Exception]) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(error):
        _decode(text, status, "http://prom")


ROUTER_TEXT = f"""# TYPE {names.ROUTER_INFLIGHT} gauge
{names.ROUTER_INFLIGHT} 9.0
# TYPE {names.ROUTER_REQUESTS_RECEIVED} counter
{names.ROUTER_REQUESTS_RECEIVED} 120.0
# TYPE {names.ROUTER_ENDPOINTS} gauge
{names.ROUTER_ENDPOINTS}{{state="ready"}} 2.0
{names.ROUTER_ENDPOINTS}{{state="draining"}} 1.0
"""


def test_parse_router_metrics() -> None:
    r = parse_router_metrics(ROUTER_TEXT)
    assert (r.inflight, r.arrivals_total, r.ready_replicas) == (9.0, 120.0, 2.0)


def test_router_text_without_l_is_an_error() -> None:
    with pytest.raises(SourceError, match=names.ROUTER_INFLIGHT):
        parse_router_metrics(f"# TYPE {names.ROUTER_RETRIES} counter\n{names.ROUTER_RETRIES} 1\n")
