"""The PromQL the dashboards and the rules show, built from ``inflight.names`` only.

Two flavours of every derived signal:

* **dashboard PromQL**: the ``PROMQL_*`` templates of ``inflight.names`` filled with the
  dashboard's label selector (Grafana variables), so a panel shows exactly what the
  scaler reads, whether or not the recording rules are deployed;
* **recording-rule PromQL**: the same arithmetic grouped ``by (namespace, job)`` so one
  Prometheus holding several deployments records one series per deployment.

Worked example of the fallacy the "what a QPS rule would do" panel shows (reference
workload, docs/workload.md): 8 requests always in flight on 1 replica of 4 slots, W ≈ 33 s.
L = 8, capacity = 4, saturation = 2.0, so the saturation rule asks for
ceil(8 / (4 × 1.0)) = 2 replicas; λ = 8 / 33 ≈ 0.24 req/s < 0.5, so the seed's QPS rule
never scales up, and in the gaps between batches reads 0 < 0.05 and scales down.
"""

from __future__ import annotations

from typing import Final

from inflight import names as n
from inflight.control.hpa_math import HPA_TOLERANCE

# Labels that separate one deployment from another in a shared Prometheus. Prometheus
# sets ``job`` itself; the Prometheus Operator's ServiceMonitor adds ``namespace``. A
# label that is absent is the empty string, so grouping by it costs nothing locally.
# ``model``: a router with several model pools (router/model_pools.py) labels each pool's
# series, so each model is recorded, and pages, on its own L and capacity.
GROUP_LABELS: Final = ("namespace", "job", n.ROUTER_MODEL_LABEL)
BY: Final = "by (" + ", ".join(GROUP_LABELS) + ")"
ON: Final = "on (" + ", ".join(GROUP_LABELS) + ")"

# The seed's flawed QPS rule (docs/workload.md): requests started in the last 10 s / 10,
# scale up above 0.5 req/s, down below 0.05 req/s, one replica at a time.
QPS_RULE_WINDOW_S: Final = 10
QPS_RULE_UP_ABOVE: Final = 0.5
QPS_RULE_DOWN_BELOW: Final = 0.05

# The scaler's defaults, as the ScaledObject ships them.
SLOTS_DEFAULT: Final = int(n.METADATA_DEFAULTS[n.META_SLOTS_PER_REPLICA])
TARGET_SATURATION_DEFAULT: Final = float(n.METADATA_DEFAULTS[n.META_TARGET_SATURATION])
SCALE_UP_WINDOW_S: Final = int(n.METADATA_DEFAULTS[n.META_SCALE_UP_WINDOW_S])
SCALE_DOWN_WINDOW_S: Final = int(n.METADATA_DEFAULTS[n.META_SCALE_DOWN_WINDOW_S])


def matchers(*pairs: str) -> str:
    """Join label matchers, skipping empty ones: ``matchers('a="1"', '')`` -> ``a="1"``."""
    return ",".join(p for p in pairs if p)


# --- Dashboard PromQL (selector = Grafana variables) ----------------------------------


def l_expr(sel: str) -> str:
    """L: requests in flight at the router (held included), summed over routers."""
    return n.promql(n.PROMQL_L, sel)


def lambda_expr(sel: str) -> str:
    """λ: arrivals per second over 1 m (requests/s)."""
    return n.promql(n.PROMQL_LAMBDA, sel)


def w_expr(sel: str) -> str:
    """W: mean seconds from arrival to last byte over 1 m."""
    return n.promql(n.PROMQL_W, sel)


def capacity_expr(sel: str) -> str:
    """Capacity in slots: slots per replica × ready replicas."""
    return n.promql(n.PROMQL_CAPACITY, sel)


def saturation_expr(sel: str) -> str:
    """L ÷ capacity; 1.0 means every slot busy and nothing queued."""
    return f"({l_expr(sel)}) / ({capacity_expr(sel)})"


def little_lw_expr(sel: str) -> str:
    """λ·W over the same 1 m window; equals the mean of L when instrumentation is right."""
    return f"({lambda_expr(sel)}) * ({w_expr(sel)})"


def l_mean_expr(sel: str) -> str:
    """L averaged over 1 m, the side of Little's Law that λ·W is compared with."""
    return f"sum(avg_over_time({n.ROUTER_INFLIGHT}{{{sel}}}[1m]))"


def ready_expr(sel: str) -> str:
    """Ready replicas as the router sees them (max over router replicas), summed over
    model pools."""
    ready = matchers('state="ready"', sel)
    return f"sum(max by ({n.ROUTER_MODEL_LABEL}) ({n.ROUTER_ENDPOINTS}{{{ready}}}))"


def queued_expr(sel: str) -> str:
    """Requests held at the router, not yet dispatched."""
    return f"sum({n.ROUTER_QUEUED}{{{sel}}})"


def endpoint_inflight_expr(sel: str) -> str:
    """In flight per endpoint, summed over router replicas (the balance picture)."""
    return f"sum by (endpoint) ({n.ROUTER_ENDPOINT_INFLIGHT}{{{sel}}})"


def duration_quantile_expr(q: float, sel: str) -> str:
    """W's q-quantile over 1 m, from the router's histogram (seconds)."""
    bucket = f"{n.ROUTER_REQUEST_DURATION}_bucket{{{sel}}}"
    return f"histogram_quantile({q}, sum by (le) (rate({bucket}[1m])))"


def qps_seed_expr(sel: str) -> str:
    """The seed's QPS signal: requests received in the last 10 s ÷ 10 (requests/s)."""
    w = QPS_RULE_WINDOW_S
    return f"sum(increase({n.ROUTER_REQUESTS_RECEIVED}{{{sel}}}[{w}s])) / {w}"


def qps_desired_expr(sel: str) -> str:
    """Replicas the seed's QPS rule would ask for next: ready ± 1 on its thresholds, ≥ 1.

    Example: 1 ready, qps 0.24 → 1 (no scale-up at 100% saturation); qps 0.00 in a gap
    between batches → max(1 - 1, 1) = 1 at the floor, and from 2 ready it drops to 1.
    """
    ready = ready_expr(sel)
    qps = qps_seed_expr(sel)
    return (
        f"clamp_min(({ready}) + (({qps}) > bool {QPS_RULE_UP_ABOVE})"
        f" - (({qps}) < bool {QPS_RULE_DOWN_BELOW}), 1)"
    )


def capacity_binding_expr(sel: str) -> str:
    """1 for the capacity dimension (requests, kv_tokens) that binds the scaler's saturation
    over its latest decision's scale-up window, 0 for the others, per trigger
    (``metric_name``)."""
    return f"max by (metric_name, dimension) ({n.SCALER_CAPACITY_BINDING}{{{sel}}})"


def dimension_inflight_expr(sel: str) -> str:
    """Mean L in each capacity dimension over the scale-up window of the scaler's latest
    decision, per trigger
    (``metric_name``): requests, L; kv_tokens, the L that would fill the KV caches. A
    dimension the scaler did not measure has no series (``capacity: requests``, no KV
    series)."""
    return f"max by (metric_name, dimension) ({n.SCALER_DIMENSION_INFLIGHT}{{{sel}}})"


def kv_usage_mean_expr(sel: str) -> str:
    """vLLM's KV cache in use, averaged over the replicas (0-1)."""
    return f"avg({n.VLLM_KV_CACHE_USAGE}{{{sel}}})"


def kv_share_expr(sel: str) -> str:
    """The share of a replica's KV cache one running request holds: Σ KV use ÷ Σ running
    (``U ÷ R`` of docs/capacity.md, the scaler's own PromQL). The KV dimension binds when it
    exceeds 1 ÷ slots. Example: 2 running on 30 of 39 blocks → 0.38 > 1 ÷ 4."""
    return f"({n.promql(n.PROMQL_KV_USAGE, sel)}) / ({n.promql(n.PROMQL_KV_RUNNING, sel)})"


def kv_waiting_expr(sel: str) -> str:
    """Requests vLLM holds for capacity (no slot or no KV blocks), summed over replicas."""
    return n.promql(n.PROMQL_KV_WAITING, sel)


def _ratio_of_rates(num: str, den: str, sel: str, by: str, window: str) -> str:
    """``sum by (by)`` of ``num``'s rate over ``window`` ÷ the same of ``den``'s (``sel``:
    label matchers, none when empty). 0 ÷ 0 is NaN: the callers say what becomes of it."""
    m = f"{{{sel}}}" if sel else ""
    return f"sum by ({by}) (rate({num}{m}[{window}]))\n/ sum by ({by}) (rate({den}{m}[{window}]))"


def router_prefix_hit_rate_expr(sel: str, by: str = "model") -> str:
    """The router's estimated prefix-cache hit rate (``--dispatch prefix``): prompt blocks
    the chosen endpoint probably held ÷ blocks sent, over 5 m, per ``by``. No series while
    the router does not route on prefixes (no block sent: 0 ÷ 0, dropped by ``> -1``)."""
    rate = _ratio_of_rates(n.ROUTER_PREFIX_HITS, n.ROUTER_PREFIX_QUERIES, sel, by, "5m")
    return f"{rate} > -1"


def engine_prefix_hit_rate_expr(sel: str, by: str = "model_name") -> str:
    """The engines' own prefix-cache hit rate: vLLM's hit tokens ÷ queried prompt tokens
    over 5 m, per ``by``. The router counts whole blocks, vLLM every prompt token (a
    prompt's last partial block never hits), so vLLM's rate reads a little lower. No series
    without prompts (0 ÷ 0, dropped by ``> -1``)."""
    rate = _ratio_of_rates(n.VLLM_PREFIX_CACHE_HITS, n.VLLM_PREFIX_CACHE_QUERIES, sel, by, "5m")
    return f"{rate} > -1"


def client_errors_expr(sel: str) -> str:
    """Requests refused at the router's door per second, by reason (issue 39's limits:
    docs/runbook.md, "Hostile and broken clients")."""
    return f"sum by (reason) (rate({n.ROUTER_CLIENT_ERRORS}{{{sel}}}[5m]))"


def prefix_divergence_expr(window: str) -> str:
    """How far a namespace's routers' estimated prefix-cache hit rate is from its engines'
    own, over ``window`` (absolute difference of the two rates; both sum every pool: the
    routers route every request the engines serve). No series where the routers send no
    prompt blocks (``--dispatch prefix`` off) or the engines report no queries."""
    ns = "namespace"
    router = _ratio_of_rates(n.ROUTER_PREFIX_HITS, n.ROUTER_PREFIX_QUERIES, "", ns, window)
    engines = _ratio_of_rates(n.VLLM_PREFIX_CACHE_HITS, n.VLLM_PREFIX_CACHE_QUERIES, "", ns, window)
    return f"abs(\n  ({router})\n- on (namespace)\n  ({engines})\n)"


def routers_missing_expr(sel: str) -> str:
    """Router targets down now (last scrape failed) among those that exposed L in the last
    hour: while above 0, every sum of L is partial and the scaler answers UNAVAILABLE."""
    return f"count({n.promql(n.PROMQL_ROUTERS_DOWN, sel)}) or vector(0)"


def stabilized_l_expr(sel: str) -> str:
    """The scaler's value: max over the scale-down window of L averaged over scale-up.

    Defaults 10 s and 60 s (``inflight.names.METADATA_DEFAULTS``): scale up at once,
    scale down only when the lower count would have carried the whole last minute.
    """
    up, down = SCALE_UP_WINDOW_S, SCALE_DOWN_WINDOW_S
    inner = f"sum(avg_over_time({n.ROUTER_INFLIGHT}{{{sel}}}[{up}s]))"
    return f"max_over_time(({inner})[{down}s:5s])"


def saturation_desired_expr(sel: str) -> str:
    """Replicas the HPA derives from the saturation rule's value, tolerance included.

    ``ceil(stabilized L ÷ (slots × target))``, except that the HPA keeps the current
    (here: ready) count while ``value ÷ (target × ready)`` lies within
    ``[1 − tolerance, 1 + tolerance]`` (Kubernetes' default 10 %): the PromQL twin of
    ``inflight.control.hpa_math.replicas_for_average_value``, checked against it by
    ``tests/component/test_dashboards_tolerance.py``. Examples, 4 slots, target 1.0:
    L = 8 on 1 ready → 2; L = 44 on 10 ready → ratio 1.1 → 10, not ceil = 11. With no
    ready replica the ratio is +Inf (or NaN), so the plain ceiling applies.
    """
    target = f"(max({n.ROUTER_SLOTS_PER_ENDPOINT}{{{sel}}}) * {TARGET_SATURATION_DEFAULT})"
    value = stabilized_l_expr(sel)
    ready = ready_expr(sel)
    up, down = 1 + HPA_TOLERANCE, 1 - HPA_TOLERANCE
    ratio = f"({value}) / ({target} * ({ready}))"
    held = f"({ready}) and on () (({ratio}) <= {up:g} >= {down:g})"
    return f"({held})\nor on ()\nceil(({value}) / {target})"


# --- Recording-rule PromQL (grouped by deployment) ------------------------------------


def rec_l() -> str:
    return f"sum {BY} ({n.ROUTER_INFLIGHT})"


def rec_queued() -> str:
    return f"sum {BY} ({n.ROUTER_QUEUED})"


def rec_lambda() -> str:
    return f"sum {BY} (rate({n.ROUTER_REQUESTS_RECEIVED}[1m]))"


def rec_w() -> str:
    d = n.ROUTER_REQUEST_DURATION
    return f"sum {BY} (rate({d}_sum[1m]))\n/\nsum {BY} (rate({d}_count[1m]))"


def rec_ready() -> str:
    return f'max {BY} ({n.ROUTER_ENDPOINTS}{{state="ready"}})'


def rec_capacity() -> str:
    return f"max {BY} ({n.ROUTER_SLOTS_PER_ENDPOINT})\n* {ON}\n{n.REC_READY}"


def rec_saturation() -> str:
    """L ÷ capacity; no series when capacity is 0 (the no-ready-endpoints alert covers it)."""
    return f"{n.REC_L}\n/ {ON}\n({n.REC_CAPACITY} > 0)"


def rec_spread() -> str:
    """Most minus least in flight over endpoints (router replicas summed per endpoint)."""
    per_endpoint = f"sum by (namespace, job, endpoint) ({n.ROUTER_ENDPOINT_INFLIGHT})"
    return f"max {BY} ({per_endpoint})\n-\nmin {BY} ({per_endpoint})"


def rec_little() -> str:
    """Mean L over 5 m ÷ (λ·W over 5 m); 1.0 when the in-flight count is honest.

    5 m, not 1 m: Little's Law holds over windows much longer than W, and a
    reference request takes ~30 s. L stuck above 0 with no traffic (a leaked slot, as in
    the seed's warm-up bug) gives +Inf; an idle system gives no sample (0 ÷ 0).

    Robust in a router's first minutes. ``rate(x[5m])`` counts a series from its first
    sample and divides by the whole 5 m, i.e. it reads "0 before the series existed";
    mean L is therefore the 5 m average of the *summed* L (the recorded
    :data:`~inflight.names.REC_L`), which also reads a router that was not there yet as
    no load, so a router joining or replaced keeps the ratio at 1 (summing each series'
    own ``avg_over_time`` would count a replaced router twice: ratio 2 for 5 minutes).
    What is left is a deployment younger than the window, where the average covers less
    than 5 m but ``rate`` still divides by 5 m (a minute-old router reads λ five times
    too low, ratio 5): no ratio is recorded until L has existed for the whole window
    (``REC_L offset 5m`` present).
    """
    d = n.ROUTER_REQUEST_DURATION
    lam = f"sum {BY} (rate({n.ROUTER_REQUESTS_RECEIVED}[5m]))"
    w = f"(sum {BY} (rate({d}_sum[5m])) / sum {BY} (rate({d}_count[5m])))"
    mean_l = f"avg_over_time({n.REC_L}[5m])"
    # W is NaN (0 ÷ 0) when nothing finished; read it as 0 so a stuck L still shows.
    ratio = f"{mean_l}\n/ {ON}\n({lam} * {ON} ({w} > 0 or {lam} * 0))"
    return f"(\n{ratio}\n)\nand {ON}\n({n.REC_L} offset 5m)"
