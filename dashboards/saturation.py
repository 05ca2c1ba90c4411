"""The "Saturation and Little's Law" dashboard: L against λ, so the QPS fallacy shows.

Read top to bottom: how many routers are missing from the sums (above 0, L is partial);
L and λ together (a full system keeps L high while λ falls);
W; the Little's Law check (is L honest?); saturation against the 1.0 line; replicas
ready against what the scaler asks for; balance across endpoints; requests held at
the router; the two scaling rules side by side, computed live in PromQL; and the prefix
cache's hit rate as the router estimates it beside the engines' own, with the requests
refused at the router's door.
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.builders import dashboard as dash_b

from dashboards import panels as p
from dashboards import signals as s
from inflight import names as n

UID: Final = "inflight-saturation"
TITLE: Final = "inflight: Saturation and Little's Law"
# Label variables (label → description), on the router's L.
VARIABLES: Final = {
    "namespace": "Kubernetes namespace of the router",
    "job": "Prometheus job of the router",
    "model": "model pool of a router that serves several (All: every model, summed)",
}


def build() -> dash_b.Dashboard:
    sel = p.selector(*VARIABLES)
    scaler_sel = p.selector("namespace")
    q = p.Query
    board = p.dashboard(
        UID,
        TITLE,
        "L (requests in flight) against λ (arrivals/s): at saturation L stays pinned "
        "at capacity while λ falls, so QPS reads low exactly when the system is full.",
        ["inflight", "vllm", "autoscaling"],
        n.ROUTER_INFLIGHT,
        VARIABLES,
    ).with_variable(
        p.vllm_job_variable("Prometheus job of the vLLM replicas (their prefix-cache series)")
    )
    board = (
        board.with_row(dash_b.Row("Load: L against λ").id(100))
        .with_panel(
            p.stat(
                9,
                "Routers missing",
                "Router targets Prometheus scrapes whose last scrape failed, among those that "
                "exposed L in the last hour. Above 0, L on this dashboard is partial (that "
                "router's requests are not in the sum), and the scaler answers UNAVAILABLE so "
                "KEDA's fallback decides. A router removed from discovery is gone, not missing.",
                # ``up`` has no model label: the routers are counted whole.
                q(s.routers_missing_expr(p.selector("namespace", "job")), "routers missing"),
                width=24,
            )
        )
        .with_panel(
            p.timeseries(
                1,
                "L (in flight) and λ (arrivals/s)",
                "Left axis: L, requests accepted and not finished (router queue included). "
                "Right axis: λ over 1 m. When every slot is busy, L stays at capacity and "
                "λ = L ÷ W falls as requests slow down.",
                [q(s.l_expr(sel), "L in flight"), q(s.lambda_expr(sel), "λ arrivals/s")],
                right_axis={"B": "reqps"},
            )
        )
        .with_panel(
            p.timeseries(
                2,
                "W: request duration p50 / p95 / mean",
                "Arrival at the router to last byte sent, router queueing included (1 m).",
                [
                    q(s.duration_quantile_expr(0.5, sel), "p50"),
                    q(s.duration_quantile_expr(0.95, sel), "p95"),
                    q(s.w_expr(sel), "mean W"),
                ],
                unit="s",
            )
        )
        .with_panel(
            p.timeseries(
                3,
                "Little's Law check: mean L against λ·W",
                "The two lines agree (within ~10%) when the in-flight count is honest. A gap "
                "means leaked or lost counts, and the autoscaler is scaling on a wrong L.",
                [q(s.l_mean_expr(sel), "mean L (1 m)"), q(s.little_lw_expr(sel), "λ·W (1 m)")],
            )
        )
        .with_panel(
            p.timeseries(
                4,
                "Saturation: L ÷ capacity",
                "Capacity = slots per replica × ready replicas. Above the red 1.0 line "
                "requests queue; the scaler targets 1.0 by default.",
                [q(s.saturation_expr(sel), "saturation"), q(s.capacity_expr(sel), "capacity")],
                unit="percentunit",
                right_axis={"B": "short"},
                threshold=1.0,
            )
        )
    )
    board = (
        board.with_row(dash_b.Row("Replicas: what each rule would do").id(101))
        .with_panel(
            p.timeseries(
                5,
                "Ready replicas and what the scaler asks for",
                "Ready endpoints as the router sees them, and the replica count the scaler "
                "predicts the HPA derives: ceil(value ÷ target), or the ready count while "
                "value ÷ (target × ready) is within the HPA's tolerance (10 %), before the "
                "HPA's min/max.",
                [
                    q(s.ready_expr(sel), "ready"),
                    q(
                        f"max by (metric_name) ({n.SCALER_DESIRED_REPLICAS}{{{scaler_sel}}})",
                        "scaler asks ({{metric_name}})",
                    ),
                ],
            )
        )
        .with_panel(
            p.timeseries(
                6,
                "What a QPS rule would do beside what saturation does",
                "Desired replicas from the seed's QPS rule (requests received in 10 s ÷ 10; "
                f"+1 above {s.QPS_RULE_UP_ABOVE}/s, −1 below {s.QPS_RULE_DOWN_BELOW}/s, from "
                "the ready count, at least 1) and from saturation (ceil of L, averaged "
                f"{s.SCALE_UP_WINDOW_S} s and maxed over {s.SCALE_DOWN_WINDOW_S} s, ÷ slots; "
                "the ready count while that is within the HPA's 10 % tolerance). "
                "Under full load the QPS line flaps while the saturation line holds. The "
                "QPS rule needs a scrape interval of 5 s or less to have two samples in 10 s.",
                [
                    q(s.qps_desired_expr(sel), "QPS rule"),
                    q(s.saturation_desired_expr(sel), "saturation rule"),
                    q(s.ready_expr(sel), "ready"),
                    q(s.qps_seed_expr(sel), "seed QPS (req/s)"),
                ],
                right_axis={"D": "reqps"},
            )
        )
    )
    board = (
        board.with_row(dash_b.Row("Balance and the router queue").id(102))
        .with_panel(
            p.timeseries(
                7,
                "In flight per endpoint",
                "Dispatched and not finished, per replica (router replicas summed). "
                "Least-outstanding dispatch keeps the lines within one of each other.",
                [q(s.endpoint_inflight_expr(sel), "{{endpoint}}")],
            )
        )
        .with_panel(
            p.timeseries(
                8,
                "Requests held at the router",
                "Accepted but not dispatched: all slots busy with holding on, or no ready "
                "replica (scale from zero).",
                [q(s.queued_expr(sel), "held at router")],
            )
        )
    )
    board = (
        board.with_row(dash_b.Row("Prefix cache and the door").id(103))
        .with_panel(
            p.timeseries(
                10,
                "Prefix cache hit rate: the router's estimate beside the engines'",
                "With --dispatch prefix, the router's estimate per model pool: prompt blocks "
                "the endpoint it chose probably held ÷ blocks sent (router/prefix_index.py). "
                "Beside it vLLM's own: prompt tokens found cached ÷ prompt tokens, per served "
                "model (job: the vllm_job variable). vLLM counts every prompt token (a last "
                "partial block never hits), so it reads a little lower; far apart for long, "
                "the index is wrong (alert InflightPrefixIndexDiverges). No router line "
                "without --dispatch prefix.",
                [
                    q(s.router_prefix_hit_rate_expr(sel), "router estimate {{model}}"),
                    q(s.engine_prefix_hit_rate_expr(p.VLLM_SELECTOR), "engines {{model_name}}"),
                ],
                unit="percentunit",
            )
        )
        .with_panel(
            p.timeseries(
                11,
                "Clients refused at the door",
                "Requests the router answered itself, by reason: a limit at the door "
                "(url_too_long, header_too_large, too_many_headers, header_timeout, "
                "body_timeout, too_many_connections, held_bytes), a client that stopped "
                "reading (write_stall), a budget vLLM would refuse (bad_budget), a body it "
                "cannot read (bad_body). None reaches a replica or counts in L "
                '(docs/runbook.md, "Hostile and broken clients").',
                [q(s.client_errors_expr(sel), "{{reason}}")],
                unit="reqps",
            )
        )
    )
    return board
