"""Markdown tables for a run and for a policy comparison (pure: data in, text out).

Every figure is in seed time; the header says the time-scale so a reader can convert.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def run_table(run: Mapping[str, Any]) -> str:
    """The per-level table of one run (the ``to_json()`` dict of a RunResult)."""
    lines = [
        f"Policy: {run.get('policy') or 'as found'} · time-scale {run['time_scale']} "
        f"(all figures in seed time) · {'VALID' if run['valid'] else 'INVALID'}",
        "",
        "| concurrency | requests | errors | req/s | out tok/s | p50 s | p95 s | p99 s "
        "| TTFT p50 s | TTFT p95 s | TTFT p99 s | λ req/s | W s | L router | LL error "
        "| replicas | loadgen CPU |",
        "|" + "---:|" * 17,
    ]
    for lv in run["levels"]:
        lines.append(
            f"| {lv['concurrency']} | {lv['requests']} | {lv['errors']} "
            f"| {_f(lv['throughput_rps'], 3)} | {_f(lv['output_tokens_per_s'], 1)} "
            f"| {_f(lv['e2e_p50_s'])} | {_f(lv['e2e_p95_s'])} | {_f(lv['e2e_p99_s'])} "
            f"| {_f(lv['ttft_p50_s'])} | {_f(lv['ttft_p95_s'])} | {_f(lv['ttft_p99_s'])} "
            f"| {_f(lv['lambda_rps'], 3)} | {_f(lv['w_s'])} | {_f(lv['l_router'])} "
            f"| {_pct(lv['littles_law_error'])} | {lv['replicas']} "
            f"| {_pct(lv['cpu_loadgen'])} |"
        )
    if run["invalid_reasons"]:
        lines += ["", "Invalid because:", *[f"- {r}" for r in run["invalid_reasons"]]]
    return "\n".join(lines) + "\n"


def comparison_table(runs: Mapping[str, Mapping[str, Any]], baseline: str = "fixed:1") -> str:
    """Throughput and p50 per concurrency, one column pair per policy, ratios to ``baseline``."""
    policies = list(runs)
    concs = sorted({lv["concurrency"] for r in runs.values() for lv in r["levels"]})
    by = {
        p: {lv["concurrency"]: lv for lv in runs[p]["levels"]} for p in policies
    }  # policy -> c -> level
    head = "| concurrency | " + " | ".join(f"{p} req/s | {p} p50 s" for p in policies) + " |"
    lines = [head, "|" + "---:|" * (1 + 2 * len(policies))]
    for c in concs:
        cells = []
        base = by.get(baseline, {}).get(c)
        for p in policies:
            lv = by[p].get(c)
            if lv is None:
                cells += ["–", "–"]
                continue
            thr = _f(lv["throughput_rps"], 3)
            p50 = _f(lv["e2e_p50_s"], 1)
            if base is not None and p != baseline and base["throughput_rps"]:
                thr += f" ({lv['throughput_rps'] / base['throughput_rps']:.2f}×)"
            if base is not None and p != baseline and base["e2e_p50_s"] and lv["e2e_p50_s"]:
                p50 += f" ({lv['e2e_p50_s'] / base['e2e_p50_s']:.2f}×)"
            cells += [thr, p50]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def checks_list(checks: Sequence[Mapping[str, Any]]) -> str:
    """The reproduction checks as a Markdown list: PASS/FAIL/INFO, what, the numbers."""
    return "\n".join(f"- **{c['status']}** {c['name']}: {c['detail']}" for c in checks) + "\n"
