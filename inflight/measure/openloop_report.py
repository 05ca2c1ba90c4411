"""The open-loop comparison's report: ``comparison.json``'s body and ``comparison.md``.

One builder for both sides: ``inflight bench compare --scenario`` (live) and ``inflight sim
compare`` (simulated) pass per-policy measures from :func:`inflight.measure.slo.run_measures` and
get
the same document, so a scenario's results read the same whichever produced them. Pure:
no I/O, no clock (``created_at`` and ``wall_s`` come in ``scenario_meta``).

Per policy (issue #13, item 2, under these names): ``ttft_s``/``tpot_s``/``e2e_s``
(``{p50, p95, p99}``), ``slo_attainment``, ``replica_seconds``, ``replica_seconds_ratio``
(against the static-maximum run ``fixed:MAX``; None when it is not in the comparison),
``requests_sent``, ``misses`` (by cause), ``changes``, ``reversals``, ``littles_law``
(router L against the client's λ·W; None where not measured, e.g. simulated), and
``pareto`` (on the front of replica-seconds ratio, lower better, against SLO attainment,
higher better; :func:`inflight.measure.slo.pareto_front`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inflight.measure.slo import pareto_front

SCHEMA = "inflight-bench-compare-openloop/1"

# scenario_meta keys copied to the top level (the same layout as the closed-loop compare)
_TOP = ("created_at", "command", "time_scale", "units", "wall_s", "source")
_REQUIRED = ("created_at", "command", "time_scale", "max_replicas")

# per-run keys copied when present
PASS_THROUGH = (
    "file",
    "valid",
    "invalid_reasons",
    "notes",
    "requests_ok",
    "mean_replicas",
    "replica_field",
    "send_lag_s",
    "router_sample_errors",
    "cpu",
    "stack",
    "seeds",
)

# per-run keys the builder needs from run_measures (plus what the shell adds)
_MEASURES = (
    "requests_sent",
    "slo_attainment",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "misses",
    "replica_seconds",
    "changes",
    "reversals",
)


def baseline_name(max_replicas: int) -> str:
    """The static maximum every ratio is taken against."""
    return f"fixed:{max_replicas}"


def build_comparison(
    scenario_meta: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``comparison.json``'s body from the scenario's description and each policy's run.

    ``scenario_meta``: ``created_at``, ``command``, ``time_scale``, ``max_replicas`` are
    required; ``units``, ``wall_s``, ``source`` ("live" | "sim") go to the top level too;
    everything else (name, description, arrivals, lengths, seed, slo, min_replicas,
    startup_s, drain_s, ...) is kept under ``scenario``.

    ``runs``: policy name → a dict holding at least the keys of ``run_measures``; the keys
    of ``PASS_THROUGH`` are copied when present (a run's raw requests and samples are not:
    they stay in its own file). Order is kept.
    """
    missing = [k for k in _REQUIRED if k not in scenario_meta]
    if missing:
        raise ValueError(f"scenario_meta lacks {', '.join(missing)}")
    for name, run in runs.items():
        lacking = [k for k in _MEASURES if k not in run]
        if lacking:
            raise ValueError(f"run {name!r} lacks {', '.join(lacking)}")
    baseline = baseline_name(int(scenario_meta["max_replicas"]))
    base_rs = runs[baseline]["replica_seconds"] if baseline in runs else None
    out_runs: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        rs = run["replica_seconds"]
        ratio = rs / base_rs if base_rs else None
        out_runs[name] = {
            **{k: run[k] for k in PASS_THROUGH if k in run},
            **{k: run[k] for k in _MEASURES},
            "replica_seconds_ratio": ratio,
            "littles_law": run.get("littles_law"),
        }
    # The front: on the ratio when there is a baseline, else on replica-seconds (the same
    # order); runs that are not valid are left off it (and still listed).
    x_key = "replica_seconds_ratio" if base_rs else "replica_seconds"
    points = {
        name: (float(r[x_key]), float(r["slo_attainment"]))
        for name, r in out_runs.items()
        if r.get("valid", True) and r[x_key] is not None and r["slo_attainment"] is not None
    }
    front = pareto_front(points) if points else set()
    for name, r in out_runs.items():
        r["pareto"] = name in front
    scenario = {k: v for k, v in scenario_meta.items() if k not in _TOP}
    return {
        "schema": SCHEMA,
        **{k: scenario_meta[k] for k in _TOP if k in scenario_meta},
        "policies": list(runs),
        "scenario": scenario,
        "baseline": baseline if base_rs else None,
        "pareto_x": x_key,
        "pareto_front": [n for n in runs if n in front],
        "runs": out_runs,
    }


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f} %"


def _num(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{float(value):.{digits}f}"


def _q(dist: Mapping[str, Any] | None, key: str, digits: int = 2) -> str:
    return "–" if not dist else _num(dist.get(key), digits)


def _misses(misses: Mapping[str, int] | None) -> str:
    if not misses:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in sorted(misses.items(), key=lambda kv: -kv[1]))


def comparison_markdown(doc: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    """``comparison.md`` from :func:`build_comparison`'s document (pure)."""
    sc = doc.get("scenario", {})
    slo = sc.get("slo") or {}
    lines = [
        f"# Open-loop comparison: {sc.get('name', '?')} ({doc.get('created_at', '?')})",
        "",
        f"`{' '.join(doc.get('command', []))}`",
        "",
    ]
    if sc.get("description"):
        lines += [str(sc["description"]), ""]
    facts = [
        ("source", doc.get("source")),
        ("time-scale", doc.get("time_scale")),
        ("arrivals", sc.get("arrivals")),
        ("trace", sc.get("trace")),
        ("prompt tokens", sc.get("prompt_tokens")),
        ("max tokens", sc.get("max_tokens")),
        ("seed", sc.get("seed")),
        ("requests planned", sc.get("requests_planned")),
        ("replicas", f"{sc.get('min_replicas', '?')}..{sc.get('max_replicas', '?')}"),
        ("replica start-up (seed s)", sc.get("startup_s")),
        ("drain limit (seed s)", sc.get("drain_s")),
        ("SLO", f"TTFT ≤ {slo.get('ttft_s')} s, TPOT ≤ {slo.get('tpot_s')} s" if slo else None),
        ("wall time (min)", None if doc.get("wall_s") is None else f"{doc['wall_s'] / 60:.1f}"),
    ]
    lines += [f"- {k}: {v}" for k, v in facts if v is not None]
    lines += [
        "",
        "Every figure in seed seconds. Attainment: share of requests *sent* that finished "
        "within both SLOs. Replica-seconds: replicas from being asked for until gone "
        f"(field `{_replica_field(doc)}` of timeline.jsonl). Ratio against "
        f"{doc.get('baseline') or 'no static-maximum run (ratio not available)'}. "
        "★: on the Pareto front (lower ratio, higher attainment).",
        "",
        "| policy | SLO attainment | replica-s | ratio | TTFT p50/p95/p99 | TPOT p50/p95 "
        "| e2e p50/p95/p99 | sent | misses | changes | reversals | L vs λ·W | front |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for name, r in doc.get("runs", {}).items():
        ttft, tpot, e2e = r.get("ttft_s"), r.get("tpot_s"), r.get("e2e_s")
        ll = r.get("littles_law") or {}
        label = name if r.get("valid", True) else f"{name} (INVALID)"
        lines.append(
            f"| {label} | {_pct(r.get('slo_attainment'))} | {_num(r.get('replica_seconds'), 0)} "
            f"| {_num(r.get('replica_seconds_ratio'))} "
            f"| {_q(ttft, 'p50')}/{_q(ttft, 'p95')}/{_q(ttft, 'p99')} "
            f"| {_q(tpot, 'p50', 3)}/{_q(tpot, 'p95', 3)} "
            f"| {_q(e2e, 'p50', 1)}/{_q(e2e, 'p95', 1)}/{_q(e2e, 'p99', 1)} "
            f"| {r.get('requests_sent')} | {_misses(r.get('misses'))} | {r.get('changes')} "
            f"| {r.get('reversals')} | {_pct(ll.get('error')) if ll else '–'} "
            f"| {'★' if r.get('pareto') else ''} |"
        )
    invalid = [(n, r) for n, r in doc.get("runs", {}).items() if not r.get("valid", True)]
    if invalid:
        lines += ["", "## Invalid runs", ""]
        lines += [f"- {n}: {'; '.join(r.get('invalid_reasons', []))}" for n, r in invalid]
    if notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def _replica_field(doc: Mapping[str, Any]) -> str:
    fields = {r.get("replica_field") for r in doc.get("runs", {}).values()} - {None}
    return "/".join(sorted(fields)) if fields else "live"
