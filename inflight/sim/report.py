"""A simulated run's figures and files: the live bench's measures, on simulated outcomes.

The figures are ``inflight.measure.slo.run_measures``' (the function the live open-loop bench
calls):
SLO attainment, TTFT/TPOT/e2e percentiles, misses by cause, replica-seconds of the *live*
replicas (starting, ready, draining) over the workload's span, changes and reversals of
the desired count; plus Little's Law on the router's L.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inflight.control.trigger import resolved
from inflight.measure.classes import class_measures
from inflight.measure.results import write_new
from inflight.measure.slo import Outcome, SloSpec, run_measures
from inflight.sim.core import SCALER_POLICIES, SimConfig, SimResult

RUN_SCHEMA = "inflight.sim.run/1"


def outcomes(result: SimResult) -> list[Outcome]:
    """Every planned request as the live bench would record it (seed s from the start)."""
    return [
        Outcome(
            sent_s=r.sent_s,
            first_s=r.first_s,
            end_s=r.end_s if r.ok else None,
            output_tokens=r.output_tokens,
            ok=r.ok,
            cause=r.cause,
        )
        for r in result.requests
    ]


def littles_law(result: SimResult) -> dict[str, float | None]:
    """Router L against λ·W over the whole run ([0, finished]): mean L, λ, mean W, their
    ratio and relative error.

    Every request that arrived and ended counts in W (refusals with their short stay);
    with every request ended, ∫ L dt = Σ W exactly, so the ratio is 1 up to the
    engine's wake-up hint (a microsecond a request).
    """
    span = result.finished_s
    ended = [r for r in result.requests if r.end_s is not None]
    if span <= 0 or not ended:
        return {"L": None, "lambda_rps": None, "W_s": None, "ratio": None, "error": None}
    mean_l = result.l_integral / span
    lam = len(ended) / span
    w = sum(r.end_s - r.sent_s for r in ended if r.end_s is not None) / len(ended)
    return {
        "L": mean_l,
        "lambda_rps": lam,
        "W_s": w,
        "ratio": mean_l / (lam * w) if lam * w > 0 else None,
        # |L − λ·W| ÷ λ·W, as the live comparison reports it
        "error": abs(mean_l - lam * w) / (lam * w) if lam * w > 0 else None,
    }


def capacity_bindings(result: SimResult) -> dict[str, Any] | None:
    """How often each capacity dimension bound the scaler's decisions (docs/capacity.md):
    ``decisions`` (fresh ones: a range query evaluated) and the share where the KV cache
    (``kv_tokens``) bound; None for a policy without the scaler (fixed fleets, peers)."""
    bindings = result.capacity_bindings
    if not bindings:
        return None
    kv = sum(1 for b in bindings if b == "kv_tokens")
    return {"decisions": len(bindings), "kv_tokens": kv, "kv_share": round(kv / len(bindings), 4)}


def measures(result: SimResult, slo: SloSpec) -> dict[str, Any]:
    """``inflight.measure.slo.run_measures`` on this run, plus Little's Law."""
    figures = run_measures(
        outcomes(result),
        result.points("live"),
        result.points("desired"),
        slo,
        0.0,
        result.end_s,
    )
    figures["littles_law"] = littles_law(result)
    figures["capacity"] = capacity_bindings(result)
    if result.prefix_cache is not None:  # the replicas' prefix caches (tokens)
        queries, hits = result.prefix_cache
        figures["prefix_cache"] = {
            "queries_tokens": queries,
            "hits_tokens": hits,
            "hit_rate": hits / queries if queries else None,
        }
    plan = result.config.hold_plan
    if plan is not None:  # --priority-class: attainment a class
        names = [c.name for c in plan.classes]
        classes = [names[plan.class_of(r.priority)] for r in result.requests]
        figures["by_class"] = class_measures(outcomes(result), classes, names, slo)
    return figures


def trigger_settings(config: SimConfig) -> dict[str, str] | None:
    """What the run's scaler ran with, every key resolved
    (:func:`inflight.control.trigger.resolved`); None for a fixed fleet or a peer, which run
    no trigger of ours."""
    return resolved(config.metadata()) if config.policy in SCALER_POLICIES else None


def config_json(result: SimResult) -> dict[str, Any]:
    c = result.config
    out = asdict(c)
    out["profile"] = asdict(c.replica_profile)
    out["scaler_metadata"] = dict(c.metadata()) if c.policy in SCALER_POLICIES else None
    out["trigger_metadata"] = trigger_settings(c)
    return out


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(dict(row), sort_keys=True) + "\n" for row in rows)


def write_run(
    out_dir: Path,
    result: SimResult,
    slo: SloSpec,
    workload: Mapping[str, Any],
    command: Sequence[str],
    force: bool,
) -> dict[str, Any]:
    """run.json, timeline.jsonl, decisions.jsonl, scaler.jsonl (the scaler's answers and
    reasons; empty for fixed fleets and peers), requests.jsonl in ``out_dir``."""
    figures = measures(result, slo)
    body = {
        "schema": RUN_SCHEMA,
        "command": list(command),
        "simulated": True,
        "workload": dict(workload),
        "config": config_json(result),
        "end_s": result.end_s,
        "finished_s": result.finished_s,
        "measures": figures,
    }
    write_new(out_dir / "run.json", json.dumps(body, indent=2, sort_keys=True) + "\n", force)
    write_new(out_dir / "timeline.jsonl", _jsonl(result.timeline), force)
    write_new(out_dir / "decisions.jsonl", _jsonl(asdict(d) for d in result.decisions), force)
    write_new(out_dir / "scaler.jsonl", _jsonl(asdict(a) for a in result.scaler_answers), force)
    write_new(out_dir / "requests.jsonl", _jsonl(asdict(r) for r in result.requests), force)
    return body
