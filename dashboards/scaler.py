"""The "Scaler" dashboard: is the external scaler doing its job for KEDA?

What it returned (value and target, so the HPA's ceil(value ÷ target) can be read off),
the replica count that implies, whether it reports the workload active, when it held a
scale-up that could not arrive in time, which capacity
dimension binds (request slots or the replicas' KV cache, docs/capacity.md) and L in
each, beside vLLM's KV series, how long its Prometheus queries take, and its errors by
kind (most make KEDA fall back; ``source_partial`` and ``source_stale`` are answered
with a raise or a hold, never a drop).
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.builders import dashboard as dash_b

from dashboards import panels as p
from dashboards import signals as s
from inflight import names as n

UID: Final = "inflight-scaler"
TITLE: Final = "inflight: Scaler"
# Label variables (label → description), on the value the scaler returned.
VARIABLES: Final = {
    "namespace": "Kubernetes namespace",
    "job": "Prometheus job of the scaler",
    "metric_name": "ScaledObject trigger metricName",
}
#: The binding panel's states.
BINDING_STATES: Final = {0: ("not binding", "transparent"), 1: ("binds", "orange")}
#: The late scale-up panel's states.
HELD_STATES: Final = {0: ("not held", "transparent"), 1: ("held", "purple")}


def build() -> dash_b.Dashboard:
    sel = p.selector(*VARIABLES)
    sel_no_metric = p.selector("namespace", "job")
    q = p.Query
    dur = n.SCALER_QUERY_DURATION
    board = p.dashboard(
        UID,
        TITLE,
        "The KEDA external scaler: the value and target it returns, the replicas "
        "they imply, activity, Prometheus query latency and errors.",
        ["inflight", "keda", "autoscaling"],
        n.SCALER_METRIC_VALUE,
        VARIABLES,
    ).with_variable(
        p.vllm_job_variable("Prometheus job of the vLLM replicas (the trigger's capacitySelector)")
    )
    vllm_sel = p.VLLM_SELECTOR
    board = (
        board.with_row(dash_b.Row("What KEDA is told").id(100))
        .with_panel(
            p.timeseries(
                1,
                "Value and target returned to KEDA",
                "GetMetrics value (stabilized L) and GetMetricSpec target (slots × target "
                "saturation). The HPA asks for ceil(value ÷ target) replicas.",
                [
                    q(f"{n.SCALER_METRIC_VALUE}{{{sel}}}", "value {{metric_name}}"),
                    q(f"{n.SCALER_METRIC_TARGET}{{{sel}}}", "target {{metric_name}}"),
                ],
            )
        )
        .with_panel(
            p.timeseries(
                2,
                "Derived replica count and saturation",
                "Replicas the HPA derives from the value (ceil(value ÷ target), held at the "
                "ready count within the HPA's tolerance; before its min/max), and L ÷ "
                "capacity as the scaler computed it (right axis, 1.0 = full).",
                [
                    q(f"{n.SCALER_DESIRED_REPLICAS}{{{sel}}}", "desired {{metric_name}}"),
                    q(f"{n.SCALER_SATURATION}{{{sel}}}", "saturation {{metric_name}}"),
                ],
                right_axis={"B": "percentunit"},
            )
        )
        .with_panel(
            p.state_timeline(
                3,
                "Active (IsActive)",
                "1 while in-flight or recent arrivals exceed activationInflight; KEDA "
                "scales to zero only when inactive.",
                [q(f"{n.SCALER_ACTIVE}{{{sel}}}", "{{metric_name}}")],
            )
        )
        .with_panel(
            p.timeseries(
                4,
                "Scaling decisions by direction",
                "Decisions per minute, by direction (up, down, hold).",
                [
                    q(
                        f"sum by (direction) (rate({n.SCALER_DECISIONS}{{{sel}}}[5m])) * 60",
                        "{{direction}}",
                    )
                ],
                unit="short",
            )
        )
        .with_panel(
            p.state_timeline(
                11,
                "Scale-up held: it could not arrive in time",
                "1 while the scaler's latest decision held a scale-up back: L is above the "
                "ready replicas' capacity, but every excursion like it in the last "
                "excursionWindowSeconds ended sooner than a replica starts (startupSeconds), "
                "so a new replica would serve after it; the value keeps the ready count "
                "(docs/ARCHITECTURE.md). Requests wait at the router meanwhile. Held while "
                "the excursions grow longer: raise startupSeconds to the replicas' own "
                "start-up, or set it to 0 to turn the hold off.",
                [q(f"max by (metric_name) ({n.SCALER_SCALE_UP_HELD}{{{sel}}})", "{{metric_name}}")],
                states=HELD_STATES,
            )
        )
        .with_panel(
            p.timeseries(
                12,
                "Share of KEDA's polls held",
                "Of the scaler's GetMetrics answers over 5 minutes, the share that held a "
                "scale-up back (inflight_scaler_held_decisions_total ÷ decisions). Holds are "
                "normal on bursty traffic whose bursts end before a replica can start; a "
                "share that stays high while requests wait at the router says the bursts "
                "outlast startupSeconds: set it to the replicas' own start-up.",
                [
                    q(
                        f"sum by (metric_name) (rate({n.SCALER_HELD_DECISIONS}{{{sel}}}[5m])) / "
                        f"sum by (metric_name) (rate({n.SCALER_DECISIONS}{{{sel}}}[5m]))",
                        "{{metric_name}}",
                    )
                ],
                unit="percentunit",
            )
        )
    )
    board = (
        board.with_row(dash_b.Row("Capacity: which dimension binds").id(102))
        .with_panel(
            p.state_timeline(
                8,
                "Binding capacity dimension",
                "Which capacity dimension binds over the scale-up window of the scaler's "
                "latest decision (the span whose mean a scale-up decides on): requests (L on "
                "slotsPerReplica × replicas) or kv_tokens (the L that would "
                "fill the replicas' KV caches: L × a running request's share of a cache × "
                "slots, docs/capacity.md). kv_tokens binds when long requests fill the cache "
                "before the slots; with trigger metadata capacity: requests it never does.",
                [q(s.capacity_binding_expr(sel), "{{metric_name}} {{dimension}}")],
                states=BINDING_STATES,
            )
        )
        .with_panel(
            p.timeseries(
                9,
                "KV cache: use, a request's share, requests waiting for KV",
                "vLLM's series on the replicas (job: the vllm_job variable, the trigger's "
                "capacitySelector). Mean KV cache use of a replica; the share of a replica's "
                "cache one running request holds (Σ use ÷ Σ running): the KV dimension binds "
                "above 1 ÷ slotsPerReplica (0.25 at 4 slots); right axis: requests vLLM "
                "holds for capacity (no KV blocks or no slot), which the router's L counts "
                "as in flight.",
                [
                    q(s.kv_usage_mean_expr(vllm_sel), "mean KV use"),
                    q(s.kv_share_expr(vllm_sel), "a running request's share"),
                    q(s.kv_waiting_expr(vllm_sel), "waiting for capacity in vLLM"),
                ],
                unit="percentunit",
                right_axis={"C": "short"},
            )
        )
        .with_panel(
            p.timeseries(
                10,
                "L in each capacity dimension",
                "The scaler's mean L in each dimension over the scale-up window of its "
                "latest decision: requests (L, "
                "requests in flight) and kv_tokens (the KV-equivalent L: the router's token "
                "demand ÷ a replica's KV tokens × slotsPerReplica where the router admits on "
                "tokens, else L × a running request's share of a cache × slots, "
                "docs/capacity.md). The higher line binds; the gap is how far the other "
                "dimension is from binding. No kv_tokens line with capacity: requests or "
                "without vLLM's KV series.",
                [q(s.dimension_inflight_expr(sel), "{{metric_name}} {{dimension}}")],
                width=24,
            )
        )
    )
    board = (
        board.with_row(dash_b.Row("Health").id(101))
        .with_panel(
            p.timeseries(
                5,
                "Prometheus query latency p50 / p95",
                "Time for the scaler's PromQL range query; KEDA gives each call 3 s.",
                [
                    q(
                        f"histogram_quantile(0.5, sum by (le) (rate({dur}_bucket"
                        f"{{{sel_no_metric}}}[5m])))",
                        "p50",
                    ),
                    q(
                        f"histogram_quantile(0.95, sum by (le) (rate({dur}_bucket"
                        f"{{{sel_no_metric}}}[5m])))",
                        "p95",
                    ),
                ],
                unit="s",
                threshold=3.0,
            )
        )
        .with_panel(
            p.timeseries(
                6,
                "Errors by kind",
                "Errors per second; while any but source_partial and source_stale persist KEDA "
                "uses its fallback replica count (those two are answered: up or hold, never "
                "down).",
                [
                    q(
                        f"sum by (kind) (rate({n.SCALER_ERRORS}{{{sel_no_metric}}}[5m]))",
                        "{{kind}}",
                    )
                ],
                unit="reqps",
            )
        )
        .with_panel(
            p.timeseries(
                7,
                "gRPC calls by method and code",
                "Calls from KEDA per second: GetMetricSpec, GetMetrics, IsActive, "
                "StreamIsActive; any code other than OK is an error KEDA saw.",
                [
                    q(
                        f"sum by (method, code) (rate({n.SCALER_GRPC_REQUESTS}"
                        f"{{{sel_no_metric}}}[5m]))",
                        "{{method}} {{code}}",
                    )
                ],
                unit="reqps",
                width=24,
            )
        )
    )
    return board
