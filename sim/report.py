"""A simulated run's figures and files: the live bench's measures, on simulated outcomes.

The figures are ``bench.slo.run_measures``' (the function the live open-loop bench calls):
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

from bench.results import write_new
from bench.slo import Outcome, SloSpec, pareto_front, run_measures
from sim.core import SimResult

RUN_SCHEMA = "inflight.sim.run/1"
COMPARISON_SCHEMA = "inflight.sim.comparison/1"


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
    """Router L against λ·W over the whole run ([0, finished]): mean L, λ, mean W, ratio.

    Every request that arrived and ended counts in W (refusals with their short stay);
    with every request ended, ∫ L dt = Σ W exactly, so the ratio is 1 up to the
    engine's wake-up hint (a microsecond a request).
    """
    span = result.finished_s
    ended = [r for r in result.requests if r.end_s is not None]
    if span <= 0 or not ended:
        return {"L": None, "lambda_rps": None, "W_s": None, "ratio": None}
    mean_l = result.l_integral / span
    lam = len(ended) / span
    w = sum(r.end_s - r.sent_s for r in ended if r.end_s is not None) / len(ended)
    return {
        "L": mean_l,
        "lambda_rps": lam,
        "W_s": w,
        "ratio": mean_l / (lam * w) if lam * w > 0 else None,
    }


def measures(result: SimResult, slo: SloSpec) -> dict[str, Any]:
    """``bench.slo.run_measures`` on this run, plus Little's Law."""
    figures = run_measures(
        outcomes(result),
        result.points("live"),
        result.points("desired"),
        slo,
        0.0,
        result.end_s,
    )
    figures["littles_law"] = littles_law(result)
    return figures


def config_json(result: SimResult) -> dict[str, Any]:
    c = result.config
    out = asdict(c)
    out["profile"] = asdict(c.replica_profile)
    out["scaler_metadata"] = dict(c.metadata()) if c.policy in ("saturation", "qps") else None
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
    """run.json, timeline.jsonl, decisions.jsonl, requests.jsonl in ``out_dir``."""
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
    write_new(out_dir / "requests.jsonl", _jsonl(asdict(r) for r in result.requests), force)
    return body


def summarize(
    runs: Mapping[str, Mapping[int, Mapping[str, Any]]], static: str | None
) -> dict[str, Any]:
    """Per policy over its seeds: the worst and the mean attainment and cost ratio.

    ``replica_seconds_ratio`` is against the ``static`` policy's run *on the same seed*
    (None when there is none in the comparison).
    """
    out: dict[str, Any] = {}
    for policy, by_seed in runs.items():
        ratios: list[float] = []
        attain: list[float] = []
        for seed, m in by_seed.items():
            if m.get("slo_attainment") is not None:
                attain.append(float(m["slo_attainment"]))
            base = runs.get(static, {}).get(seed) if static else None
            if base and base.get("replica_seconds"):
                ratios.append(float(m["replica_seconds"]) / float(base["replica_seconds"]))
        out[policy] = {
            "seeds": sorted(by_seed),
            "slo_attainment_min": min(attain) if attain else None,
            "slo_attainment_mean": sum(attain) / len(attain) if attain else None,
            "replica_seconds_ratio_max": max(ratios) if ratios else None,
            "replica_seconds_ratio_mean": sum(ratios) / len(ratios) if ratios else None,
        }
    points = {
        p: (s["replica_seconds_ratio_mean"], s["slo_attainment_mean"])
        for p, s in out.items()
        if s["replica_seconds_ratio_mean"] is not None and s["slo_attainment_mean"] is not None
    }
    front = pareto_front(points)
    for p, s in out.items():
        s["pareto"] = p in front
    return out


def comparison_markdown(body: Mapping[str, Any]) -> str:
    lines = [
        f"# Simulated comparison: {body['workload'].get('source', '?')}",
        "",
        f"Seeds {', '.join(str(s) for s in body['seeds'])}; replica-seconds ratio against "
        f"`{body.get('static_policy')}` on the same seed; SLO {body['slo']}.",
        "",
        "| policy | SLO attainment (mean, worst) | replica-s ratio (mean, worst) | Pareto |",
        "|---|---|---|---|",
    ]

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f} %"

    def ratio(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f}×"

    for policy, s in body["summary"].items():
        lines.append(
            f"| {policy} | {pct(s['slo_attainment_mean'])}, {pct(s['slo_attainment_min'])} | "
            f"{ratio(s['replica_seconds_ratio_mean'])}, {ratio(s['replica_seconds_ratio_max'])}"
            f" | {'yes' if s['pareto'] else ''} |"
        )
    return "\n".join(lines) + "\n"
