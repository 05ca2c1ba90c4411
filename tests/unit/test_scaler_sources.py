"""The pure parts of the sources: the PromQL, the step, Prometheus' JSON, router text."""

from __future__ import annotations

import json
import re

import pytest

from external_scaler.errors import (
    SourceEmpty,
    SourceError,
    SourceRejected,
    SourceTimeout,
)
from external_scaler.metadata import parse_metadata
from external_scaler.sources.counters import counter_total, increase, is_reset
from external_scaler.sources.direct import parse_router_metrics
from external_scaler.sources.prometheus import _decode
from external_scaler.sources.prometheus import window_from_matrix as _window
from external_scaler.sources.promql import range_query, step_for
from inflight import names
from inflight.control.policy import PolicySpec, Sample, decide_qps, evaluate
from tests.unit.policy_pins import PRE_HEADROOM


def test_router_query_has_five_labelled_signals() -> None:
    # capacity "requests": the KV dimension's four signals are tests/unit/test_scaler_capacity.py's
    meta = {"selector": 'job="router"', "scrapeIntervalSeconds": "15", "capacity": "requests"}
    q = range_query(parse_metadata({**PRE_HEADROOM, **meta}))
    assert names.promql(names.PROMQL_L, 'job="router"') in q.expr
    # one arrivals series per router, not their sum: resets are corrected per counter
    assert f'label_replace({names.ROUTER_REQUESTS_RECEIVED}{{job="router"}},' in q.expr
    assert f'max({names.ROUTER_ENDPOINTS}{{state="ready",job="router"}})' in q.expr
    assert names.promql(names.PROMQL_ROUTERS_DOWN, 'job="router"') in q.expr
    # L's series without a sample in 3 scrape intervals (45 s): the frozen ones
    l_series = f'{names.ROUTER_INFLIGHT}{{job="router"}}'
    assert f"count({l_series} unless count_over_time({l_series}[45000ms]))" in q.expr
    assert "timestamp(" not in q.expr  # 61 ms of ~140 in Prometheus on a full window
    assert q.expr.count("label_replace(") == 5
    # two of the floor's 900 s windows (the bursts' recurrence) + the 10 s smoothing
    assert q.lookback_s == 1810.0
    assert q.partial_span_s == 70.0  # partial data judged over the decision's span
    assert q.max_sample_age_s == 45.0  # 3 scrape intervals


def test_vllm_query_uses_vllm_names() -> None:
    q = range_query(parse_metadata({**PRE_HEADROOM, "source": "vllm"}))
    assert "(" + names.promql(names.PROMQL_L_VLLM) + ")" in q.expr
    assert names.ROUTER_INFLIGHT not in q.expr


@pytest.mark.parametrize(
    ("metadata", "step"),
    [
        ({}, 1.0),  # 10 s / 60 s windows -> 1 s step, 72 points
        ({"timeScale": "0.1"}, 0.1),
        ({"scaleUpWindowSeconds": "0"}, 6.0),  # a tenth of the 60 s window
        (
            {
                "scaleUpWindowSeconds": "0",
                "scaleDownWindowSeconds": "0",
                "floorWindowSeconds": "0",
                "startupSeconds": "0",
            },
            0.05,
        ),
        ({"timeScale": "0.001"}, 0.05),  # floor
        ({"scaleUpWindowSeconds": "86400", "scaleDownWindowSeconds": "86400"}, 17.28),
    ],
)
def test_step(metadata: dict[str, str], step: float) -> None:
    spec = parse_metadata({**PRE_HEADROOM, **metadata})
    assert step_for(spec) == pytest.approx(step)
    assert spec.policy.lookback_s / step_for(spec) <= 10_000


def test_bounds_are_aligned_so_replicas_agree() -> None:
    # 70 s to look back: no floor, no late scale-up's excursions
    q = range_query(
        parse_metadata({**PRE_HEADROOM, "floorWindowSeconds": "0", "startupSeconds": "0"})
    )
    assert q.bounds(1000.2) == q.bounds(1000.9) == (929.0, 1000.0)
    assert q.bounds(1001.0)[1] == 1001.0


def _matrix(
    series: dict[str, list[tuple[float, str]]],
    per_target: dict[tuple[str, str], list[tuple[float, str]]] | None = None,
) -> dict:
    """Prometheus' matrix: one series per signal, and (signal, instance) series per target."""
    result = [
        {"metric": {"signal": name}, "values": [[t, v] for t, v in values]}
        for name, values in series.items()
    ]
    result += [
        {
            "metric": {"signal": signal, "job": "router", "instance": instance},
            "values": [[t, v] for t, v in values],
        }
        for (signal, instance), values in (per_target or {}).items()
    ]
    return {"resultType": "matrix", "result": result}


def test_window_from_matrix() -> None:
    q = range_query(parse_metadata({**PRE_HEADROOM}))
    data = _matrix(
        {"inflight": [(999.0, "3"), (1000.0, "4")], "ready": [(1000.0, "2")]},
        {("arrivals", "a:1"): [(999.0, "10"), (1000.0, "14")]},
    )
    w = _window(data, q, 928.0, 1000.0)
    assert [s.value for s in w.inflight] == [3.0, 4.0]
    assert [s.value for s in w.arrivals_total] == [0.0, 4.0]  # arrivals since the window began
    assert w.ready_replicas[0].value == 2.0


def test_a_router_restart_mid_window_counts_its_arrivals() -> None:
    """Router a restarts (100 → 30): 30 new requests, not -70; b adds 5 + 5."""
    q = range_query(parse_metadata({**PRE_HEADROOM}))
    data = _matrix(
        {"inflight": [(998.0, "1"), (999.0, "1"), (1000.0, "1")]},
        {
            ("arrivals", "a:1"): [(998.0, "100"), (999.0, "100"), (1000.0, "30")],
            ("arrivals", "b:1"): [(998.0, "10"), (999.0, "15"), (1000.0, "20")],
        },
    )
    w = _window(data, q, 928.0, 1000.0)
    assert [(s.t_s, s.value) for s in w.arrivals_total] == [(998.0, 0), (999.0, 5), (1000.0, 40)]


def test_counter_total_across_resets_gaps_and_routers_that_come_and_go() -> None:
    a = [Sample(1.0, 5.0), Sample(2.0, 9.0), Sample(3.0, 2.0), Sample(4.0, 3.0)]  # reset at 3
    b = [Sample(2.0, 50.0), Sample(4.0, 52.0)]  # appears at 2 (its 50 came before), gap at 3
    gone = [Sample(1.0, 7.0), Sample(2.0, 8.0)]  # removed after 2: keeps the 1 it counted
    total = counter_total([a, b, gone])
    assert [(s.t_s, s.value) for s in total] == [(1.0, 0), (2.0, 5), (3.0, 7), (4.0, 10)]
    assert increase(9.0, 2.0) == 2.0 and increase(2.0, 3.0) == 1.0
    assert is_reset(9.0, 2.0) and not is_reset(2.0, 2.0) and not is_reset(2.0, 3.0)


def test_qps_rule_sees_the_arrivals_of_a_router_that_restarted() -> None:
    """Two routers, 1 request/s each for 20 s; router a restarts at t=105. The seed's rule
    reads 20 arrivals in the last 10 s (2 req/s > 0.5: up), not a negative or zero count."""
    a = [Sample(t, 1000.0 + t - 90 if t < 105 else t - 104) for t in range(90, 111)]
    b = [Sample(t, 500.0 + t - 90) for t in range(90, 111)]
    total = counter_total([a, b])
    raw_sum = [Sample(x.t_s, x.value + y.value) for x, y in zip(a, b, strict=True)]
    spec = PolicySpec(queue_headroom=0.0, scale_down_window_s=60.0, policy="qps")
    fixed = decide_qps(total, [Sample(110.0, 2.0)], 2, spec, now_s=110.0)
    assert (fixed.desired_replicas, fixed.direction) == (3, "up")
    assert "qps 2 >" in fixed.reason
    # the raw sum of the counters reads the restart as a drop: the rule would scale down
    wrong = decide_qps(raw_sum, [Sample(110.0, 2.0)], 2, spec, now_s=110.0)
    assert (wrong.desired_replicas, wrong.direction) == (1, "down")


def test_down_target_at_the_end_is_partial_and_named() -> None:
    """A router down now: L is returned, marked partial, so the policy may scale up on it
    (a crash-looping router no longer freezes scale-up; before: SourcePartial, refused)."""
    q = range_query(parse_metadata({**PRE_HEADROOM}))
    inflight = {"inflight": [(999.0, "3"), (1000.0, "3")], "ready": [(1000.0, "2")]}
    down = {("down", "10.0.0.7:8000"): [(999.0, "0"), (1000.0, "0")]}
    w = _window(_matrix(inflight, down), q, 928.0, 1000.0)
    assert w.inflight[-1].value == 3.0
    [partial] = w.partial
    assert partial.kind == names.SCALER_ERROR_SOURCE_PARTIAL
    assert "router/10.0.0.7:8000 (now)" in partial.detail


def test_a_target_down_earlier_in_the_window_makes_it_partial() -> None:
    """Down at 990-995, gone from discovery now: the window's steps of 990-995 missed its
    share of L, perhaps the peak, so the window may not lower the count (before: only the
    newest step was checked, and this window scaled down on a maximum that missed it)."""
    q = range_query(parse_metadata({**PRE_HEADROOM}))
    inflight = {"inflight": [(t, "3") for t in (990.0, 995.0, 1000.0)], "ready": [(1000.0, "3")]}
    gone = {("down", "10.0.0.7:8000"): [(990.0, "0"), (995.0, "0")]}
    w = _window(_matrix(inflight, gone), q, 928.0, 1000.0)
    assert [p.kind for p in w.partial] == [names.SCALER_ERROR_SOURCE_PARTIAL]
    assert "until 5.0 s ago" in w.partial[0].detail
    spec = parse_metadata({**PRE_HEADROOM, "minReplicaCount": "1"}).policy
    d = evaluate(w, spec, 1000.0)
    assert (d.value, d.desired_replicas) == (12.0, 3)  # held, not 3 -> 1
    assert _window(_matrix(inflight), q, 928.0, 1000.0).partial == ()  # never down: whole


@pytest.mark.parametrize("frozen_at", [(), (999.0,), (999.0, 1000.0)])
def test_steps_where_a_series_of_l_was_frozen_are_dropped(frozen_at: tuple[float, ...]) -> None:
    """Every step has L (Prometheus fills steps from a sample up to 5 minutes old); the
    ``frozen`` signal counts, at a step, L's series with no sample in the allowed age (3 x
    the 30 s scrape interval: 90 s), and is absent where none is. Those steps are dropped;
    frozen at the latest step, the window is partial (raise or hold). Which samples are
    too old is Prometheus' ``count_over_time`` (tests/integration/test_scaler_prometheus.py
    freezes a real series)."""
    q = range_query(parse_metadata({**PRE_HEADROOM}))
    signals = {"inflight": [(905.0, "3"), (999.0, "3"), (1000.0, "3")]}
    if frozen_at:
        signals["frozen"] = [(t, "1") for t in frozen_at]
    w = _window(_matrix(signals), q, 900.0, 1000.0)
    assert [s.t_s for s in w.inflight] == [t for t in (905.0, 999.0, 1000.0) if t not in frozen_at]
    if 1000.0 in frozen_at:
        [partial] = w.partial
        assert partial.kind == names.SCALER_ERROR_SOURCE_STALE
        assert re.search(r"1 of L's series had no new sample in the 90 s allowed.*"
                         r"scrapeIntervalSeconds", partial.detail)  # fmt: skip
    else:
        assert w.partial == ()


def test_empty_l_is_an_error_not_zero_and_stale_l_is_partial() -> None:
    q = range_query(parse_metadata({**PRE_HEADROOM}))
    with pytest.raises(SourceEmpty, match="no sample of L"):
        _window(_matrix({}), q, 928.0, 1000.0)
    w = _window(_matrix({"inflight": [(950.0, "4")]}), q, 928.0, 1000.0)
    assert [p.kind for p in w.partial] == [names.SCALER_ERROR_SOURCE_STALE]
    assert "50.0 s old" in w.partial[0].detail and "stale" in w.partial[0].detail
    # every step filled from one old sample: nothing fresh to answer on at all
    frozen = {
        "inflight": [(999.0, "3"), (1000.0, "3")],
        "frozen": [(999.0, "1"), (1000.0, "1")],
    }
    with pytest.raises(SourceEmpty, match="no fresh sample of L"):
        _window(_matrix(frozen), q, 928.0, 1000.0)


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


def test_steps_prometheus_filled_from_an_old_sample_are_dropped() -> None:
    """Prometheus down from 960 to 990 (killed: no staleness marker): its restart fills
    those steps from the sample of 960. They are not observations of L; the policy then
    sees a 30 s gap (and will not scale down on it)."""
    q = range_query(
        parse_metadata({**PRE_HEADROOM, names.META_SCRAPE_INTERVAL_S: "1"})
    )  # 3 s allowed
    steps = range(950, 1001)
    # Prometheus' count of L's series without a sample in the last 3 s: from 964 to 989
    data = _matrix(
        {
            "inflight": [(float(t), "3") for t in steps],
            "frozen": [(float(t), "1") for t in steps if 963 < t < 990],
        }
    )
    kept = [s.t_s for s in _window(data, q, 928.0, 1000.0).inflight]
    assert kept == [float(t) for t in steps if t <= 963 or t >= 990]
