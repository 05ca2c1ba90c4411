"""The PromQL that fetches one trigger's window in one range query (pure: text only).

One query returns several series, told apart by a ``signal`` label that ``label_replace``
adds. One round trip per poll, whatever the policy:

* ``inflight``: L, summed over the routers (or vLLM's running + waiting);
* ``arrivals``: the received-requests counter, *one series per router* (resets are
  corrected per counter before summing, ``counters.py``);
* ``ready``: ready replicas;
* ``down``: one series per target that feeds L and whose last scrape failed
  (``inflight.names.PROMQL_ROUTERS_DOWN``): L would be partial without it;
* ``frozen``: how many of L's series had no sample within the allowed age
  (``MAX_SAMPLE_AGE_SCRAPES`` × ``scrapeIntervalSeconds``) at a step (no sample when none):
  Prometheus fills steps from a sample up to 5 minutes old, so a frozen series still has
  steps. (Until 2026-12-03 the newest sample's time, ``min(timestamp(L))``: the same steps
  dropped, but ``timestamp()`` took 61 of Prometheus' ~140 ms for the query on a full
  window, this ~3 ms: results/2026-12-03-parse-once);
* with ``capacity`` ``auto`` (docs/capacity.md), vLLM's KV series on ``capacitySelector``:
  ``kv_usage`` (Σ ``vllm:kv_cache_usage_perc``), ``kv_running`` (Σ running),
  ``kv_waiting`` (Σ waiting for capacity) and ``kv_config`` (``vllm:cache_config_info``,
  one series per replica, read for its labels); and, under the router source, the
  router's token demand on ``selector`` (its token admission): ``tok_inflight`` (Σ
  ``router_endpoint_inflight_tokens``), ``tok_queued`` (Σ ``router_queued_tokens``) and
  ``tok_capacity`` (the mean ``router_endpoint_kv_tokens`` over the endpoints with a known
  capacity, > 0; no sample without one).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from external_scaler.metadata import ScalerSpec
from inflight import names
from inflight.control.policy import SAMPLE_GAP_SCRAPES

SIGNAL_LABEL = "signal"
SIGNAL_INFLIGHT, SIGNAL_ARRIVALS, SIGNAL_READY = "inflight", "arrivals", "ready"
SIGNAL_DOWN, SIGNAL_FROZEN = "down", "frozen"
SIGNAL_KV_USAGE, SIGNAL_KV_RUNNING = "kv_usage", "kv_running"
SIGNAL_KV_WAITING, SIGNAL_KV_CONFIG = "kv_waiting", "kv_config"
SIGNAL_TOK_INFLIGHT, SIGNAL_TOK_QUEUED = "tok_inflight", "tok_queued"
SIGNAL_TOK_CAPACITY = "tok_capacity"

# The router's token demand (docs/capacity.md), on the router's selector.
PROMQL_TOK_INFLIGHT = "sum(" + names.ROUTER_ENDPOINT_INFLIGHT_TOKENS + "{{{sel}}})"
PROMQL_TOK_QUEUED = "sum(" + names.ROUTER_QUEUED_TOKENS + "{{{sel}}})"
PROMQL_TOK_CAPACITY = "avg(" + names.ROUTER_ENDPOINT_KV_TOKENS + "{{{sel}}} > 0)"

# L is trusted while its newest sample is at most this many scrape intervals old (the
# ``scrapeIntervalSeconds`` metadata key): one interval is normal, a second allows a slow
# or jittered scrape, a third the rule/query delay. Older, and Prometheus is filling steps
# from a series that stopped (up to its 5-minute lookback), so the answer is UNAVAILABLE.
MAX_SAMPLE_AGE_SCRAPES = SAMPLE_GAP_SCRAPES  # the policy's gap limit: one number

# Prometheus refuses range queries over 11,000 points per series.
MAX_POINTS = 10_000
# Requests one range query is split into, asked concurrently (RangeQuery.requests): the
# default trigger's 12 parts as 3 of 4 took 0.45-0.55x the time of one 12-part ``or`` on
# Prometheus with a full window (results/2026-12-03-parse-once).
QUERY_REQUESTS = 3
MIN_STEP_S, MAX_STEP_S = 0.05, 15.0


@dataclass(frozen=True)
class RangeQuery:
    """``expr`` evaluated every ``step_s`` over the last ``lookback_s`` seconds.

    ``partial_span_s``: the last seconds of it whose partial data (a target feeding L
    down) the decision rests on (``PolicySpec.decision_span_s``); a target down only
    before them leaves the window whole (the floor's longer memory does not extend it).
    """

    expr: str
    lookback_s: float
    step_s: float
    max_sample_age_s: float = math.inf
    partial_span_s: float = math.inf
    groups: tuple[str, ...] = ()  # ``expr`` in parts joined by ``or``: :attr:`requests`

    @property
    def requests(self) -> tuple[str, ...]:
        """The expressions the live source asks for concurrently, whose answers together
        are ``expr``'s (each part's series carries its own ``signal``, so ``a or b`` is
        their union): Prometheus evaluates a long ``or`` chain at every step in more than
        the sum of its parts' time (results/2026-12-03-parse-once)."""
        return self.groups or (self.expr,)

    def bounds(self, now_s: float) -> tuple[float, float]:
        """(start, end) in unix seconds, ``end`` aligned down to a multiple of the step.

        Aligning makes scaler replicas that KEDA round-robins between evaluate the very
        same instants, so they answer alike.
        """
        end = math.floor(now_s / self.step_s) * self.step_s
        start = end - math.ceil(self.lookback_s / self.step_s) * self.step_s - self.step_s
        return round(start, 3), round(end, 3)


def step_for(spec: ScalerSpec) -> float:
    """A tenth of the shortest window, in [50 ms, 15 s], and ≤ MAX_POINTS per series.

    Worked example: scale-up 10 s, scale-down 60 s → step 1 s, 72 points. At time-scale
    0.1 (1 s and 6 s) → step 0.1 s, still 72 points.
    """
    p = spec.policy
    windows = [w for w in (p.scale_up_window_s, p.scale_down_window_s) if w > 0]
    if p.policy == "qps":
        windows.append(p.qps_window_s)
    shortest = min(windows) if windows else MIN_STEP_S * 10
    step = min(MAX_STEP_S, max(MIN_STEP_S, shortest / 10))
    step = max(step, p.lookback_s / MAX_POINTS)
    return round(step, 3)


def model_selector(spec: ScalerSpec) -> str:
    """``spec``'s selector with its model's matcher (``model`` on the router's series,
    ``model_name`` on vLLM's), or the selector alone without a ``model`` key.

    >>> from external_scaler.metadata import parse_metadata
    >>> model_selector(parse_metadata({"selector": 'job="r"', "model": "a"}))
    'job="r",model="a"'
    """
    label = names.VLLM_MODEL_LABEL if spec.source == "vllm" else names.ROUTER_MODEL_LABEL
    return _with_model(spec.selector, label, spec.model)


def kv_selector(spec: ScalerSpec) -> str:
    """The matchers for vLLM's KV series: ``capacitySelector`` (else ``selector``), with
    the model's ``model_name`` matcher.

    >>> from external_scaler.metadata import parse_metadata
    >>> kv_selector(parse_metadata({"selector": 'job="r"', "capacitySelector": 'job="v"',
    ...                             "model": "a"}))
    'job="v",model_name="a"'
    """
    base = spec.capacity_selector or spec.selector
    return _with_model(base, names.VLLM_MODEL_LABEL, spec.model)


def _with_model(selector: str, label: str, model: str) -> str:
    if not model:
        return selector
    matcher = f"{label}={json.dumps(model, ensure_ascii=False)}"
    return f"{selector},{matcher}" if selector else matcher


def range_query(spec: ScalerSpec) -> RangeQuery:
    """The one range query that gives ``spec``'s policy everything it needs."""
    up_sel = spec.selector  # Prometheus' ``up`` has no model label: the routers whole
    sel = model_selector(spec)
    if spec.source == "vllm":
        inflight = "(" + names.promql(names.PROMQL_L_VLLM, sel) + ")"
        ready = f"count({names.VLLM_RUNNING}{{{sel}}})"
        down = names.promql(names.PROMQL_VLLM_DOWN, up_sel)
        observed = f"{names.VLLM_RUNNING}{{{sel}}}"
        parts = [(inflight, SIGNAL_INFLIGHT), (ready, SIGNAL_READY)]
    else:
        inflight = names.promql(names.PROMQL_L, sel)
        arrivals = f"{names.ROUTER_REQUESTS_RECEIVED}{{{sel}}}"
        comma_sel = "," + sel if sel else ""
        ready = f'max({names.ROUTER_ENDPOINTS}{{state="ready"{comma_sel}}})'
        down = names.promql(names.PROMQL_ROUTERS_DOWN, up_sel)
        observed = f"{names.ROUTER_INFLIGHT}{{{sel}}}"
        parts = [(inflight, SIGNAL_INFLIGHT), (arrivals, SIGNAL_ARRIVALS), (ready, SIGNAL_READY)]
    parts += [(f"({down})", SIGNAL_DOWN), (frozen_expr(observed, spec), SIGNAL_FROZEN)]
    if spec.capacity == "auto":
        kv_sel = kv_selector(spec)
        parts += [
            (names.promql(names.PROMQL_KV_USAGE, kv_sel), SIGNAL_KV_USAGE),
            (names.promql(names.PROMQL_KV_RUNNING, kv_sel), SIGNAL_KV_RUNNING),
            (names.promql(names.PROMQL_KV_WAITING, kv_sel), SIGNAL_KV_WAITING),
            (names.promql(names.PROMQL_KV_CONFIG, kv_sel), SIGNAL_KV_CONFIG),
        ]
        if spec.source != "vllm":
            parts += [
                (names.promql(PROMQL_TOK_INFLIGHT, sel), SIGNAL_TOK_INFLIGHT),
                (names.promql(PROMQL_TOK_QUEUED, sel), SIGNAL_TOK_QUEUED),
                (names.promql(PROMQL_TOK_CAPACITY, sel), SIGNAL_TOK_CAPACITY),
            ]
    labelled = [f'label_replace({e}, {_tag(signal)}, "", "")' for e, signal in parts]
    size = math.ceil(len(labelled) / QUERY_REQUESTS)
    return RangeQuery(
        expr=" or ".join(labelled),
        groups=tuple(" or ".join(labelled[i : i + size]) for i in range(0, len(labelled), size)),
        lookback_s=spec.policy.lookback_s,
        step_s=step_for(spec),
        max_sample_age_s=MAX_SAMPLE_AGE_SCRAPES * spec.scrape_interval_s,
        partial_span_s=spec.policy.decision_span_s,
    )


def frozen_expr(series: str, spec: ScalerSpec) -> str:
    """How many of ``series`` are present at a step without a sample in the allowed age
    (``unless`` matches on the labels without the metric name, which ``count_over_time``
    drops); no sample at a step where none is.

    >>> from external_scaler.metadata import parse_metadata
    >>> frozen_expr("router_inflight_requests{}", parse_metadata({}))
    'count(router_inflight_requests{} unless count_over_time(router_inflight_requests{}[90000ms]))'
    """
    age_ms = max(1, round(MAX_SAMPLE_AGE_SCRAPES * spec.scrape_interval_s * 1000))
    return f"count({series} unless count_over_time({series}[{age_ms}ms]))"


def _tag(signal: str) -> str:
    """The ``label_replace`` arguments that put ``signal`` on a part's series."""
    return f'"{SIGNAL_LABEL}", "{signal}"'


def asks(query: RangeQuery, signal: str) -> bool:
    """Whether the range query has the series labelled ``signal`` (read from the text
    :func:`range_query` writes; the simulator answers only the series a query asks)."""
    return _tag(signal) in query.expr
