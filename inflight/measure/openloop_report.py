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

The static frontier (issue #24; :mod:`inflight.measure.frontier`): given the fixed fleets
``fixed:1 … fixed:max`` measured on the same requests (``frontier=``), the document has a
``frontier`` section (its source, ``sim`` or ``live``, and each fleet's figures) and every
run gets ``frontier_attainment`` (the frontier's at the run's replica-seconds),
``frontier_gap`` (its attainment minus that; a share, −0.05 = 5 points below),
``frontier_position`` (``"fixed:2–fixed:3"``, ``"at fixed:3"``, ``"below fixed:1"``,
``"above fixed:7"``) and ``dominated_by_fixed`` (the fleets with
≥ the attainment at ≤ the replica-seconds, one strictly); all None without a frontier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inflight.measure.frontier import (
    FleetPoint,
    fleet_names,
    fleet_points,
    fleet_size,
    judge,
    static_frontier,
)
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
    "trigger_metadata",
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


FRONTIER_DEFINITION = (
    "attainment minus the static frontier's at the same replica-seconds: the fixed fleets "
    "no other fixed fleet dominates, joined by straight lines; below fixed:1's cost the "
    "line runs to fixed:0 = (0 replica-s, 0 %), above fixed:max's it stays at fixed:max's "
    "attainment (inflight/measure/frontier.py)"
)
_GAP_KEYS = ("frontier_attainment", "frontier_gap", "frontier_position", "dominated_by_fixed")


def baseline_name(max_replicas: int) -> str:
    """The static maximum every ratio is taken against."""
    return f"fixed:{max_replicas}"


def _frontier_section(
    frontier: Mapping[str, Any], max_replicas: int, base_rs: float | None
) -> tuple[dict[str, Any], list[FleetPoint]]:
    """The document's ``frontier`` section and the fleets it is drawn through (valid runs
    with both figures)."""
    fleets_in: Mapping[str, Mapping[str, Any]] = frontier.get("fleets") or {}
    usable = {n: f for n, f in fleets_in.items() if f.get("valid", True)}
    points = fleet_points(usable)
    front = {p.name for p in static_frontier(points).fleets} if points else set()
    fleets: dict[str, dict[str, Any]] = {}
    for name in sorted(fleets_in, key=lambda n: fleet_size(n) or 0):
        f = fleets_in[name]
        rs = f.get("replica_seconds")
        fleets[name] = {
            "replicas": fleet_size(name),
            **{k: f[k] for k in ("slo_attainment", "slo_attainment_min") if k in f},
            "replica_seconds": rs,
            "replica_seconds_ratio": rs / base_rs if base_rs and rs is not None else None,
            "valid": f.get("valid", True),
            **{k: f[k] for k in ("file", "invalid_reasons") if k in f},
            "on_frontier": name in front,
        }
    section = {
        "source": frontier.get("source"),
        **{k: frontier[k] for k in ("note", "dir", "command") if k in frontier},
        "definition": FRONTIER_DEFINITION,
        "fleets": fleets,
        "missing": [n for n in fleet_names(max_replicas) if n not in {p.name for p in points}],
    }
    return section, points


def build_comparison(
    scenario_meta: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    frontier: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``comparison.json``'s body from the scenario's description and each policy's run.

    ``scenario_meta``: ``created_at``, ``command``, ``time_scale``, ``max_replicas`` are
    required; ``units``, ``wall_s``, ``source`` ("live" | "sim") go to the top level too;
    everything else (name, description, arrivals, lengths, seed, slo, min_replicas,
    startup_s, drain_s, ...) is kept under ``scenario``.

    ``runs``: policy name → a dict holding at least the keys of ``run_measures``; the keys
    of ``PASS_THROUGH`` are copied when present (a run's raw requests and samples are not:
    they stay in its own file). Order is kept.

    ``frontier``: ``{"source": "sim" | "live", "fleets": {"fixed:N": run}, "note"?,
    "dir"?, "command"?}``, each fleet's run holding ``slo_attainment`` and
    ``replica_seconds`` (and ``valid``: an invalid fleet is listed, not used). Without it
    the gap keys are None. When ``runs`` lacks the static maximum, the frontier's is the
    baseline of the ratios (``baseline_from``: ``"frontier"``).
    """
    missing = [k for k in _REQUIRED if k not in scenario_meta]
    if missing:
        raise ValueError(f"scenario_meta lacks {', '.join(missing)}")
    for name, run in runs.items():
        lacking = [k for k in _MEASURES if k not in run]
        if lacking:
            raise ValueError(f"run {name!r} lacks {', '.join(lacking)}")
    max_replicas = int(scenario_meta["max_replicas"])
    baseline = baseline_name(max_replicas)
    base_rs = runs[baseline]["replica_seconds"] if baseline in runs else None
    base_from = "runs" if base_rs else None
    fleets_in = (frontier or {}).get("fleets") or {}
    if not base_rs and fleets_in.get(baseline, {}).get("replica_seconds"):
        base_rs, base_from = fleets_in[baseline]["replica_seconds"], "frontier"
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
    section: dict[str, Any] | None = None
    fleet_pts: list[FleetPoint] = []
    if frontier is not None:
        section, fleet_pts = _frontier_section(frontier, max_replicas, base_rs)
    line = static_frontier(fleet_pts) if fleet_pts else None
    for r in out_runs.values():
        r.update(dict.fromkeys(_GAP_KEYS))
        att, rs = r["slo_attainment"], r["replica_seconds"]
        if line is None or att is None or rs is None:
            continue
        v = judge(fleet_pts, float(rs), float(att), line)
        r["frontier_attainment"] = v.frontier_attainment
        r["frontier_gap"] = v.gap
        r["frontier_position"] = v.position
        r["dominated_by_fixed"] = list(v.dominated_by)
    scenario = {k: v for k, v in scenario_meta.items() if k not in _TOP}
    return {
        "schema": SCHEMA,
        **{k: scenario_meta[k] for k in _TOP if k in scenario_meta},
        "policies": list(runs),
        "scenario": scenario,
        "baseline": baseline if base_rs else None,
        "baseline_from": base_from,
        "pareto_x": x_key,
        "pareto_front": [n for n in runs if n in front],
        "runs": out_runs,
        "frontier": section,
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
    lines += _frontier_markdown(doc)
    invalid = [(n, r) for n, r in doc.get("runs", {}).items() if not r.get("valid", True)]
    if invalid:
        lines += ["", "## Invalid runs", ""]
        lines += [f"- {n}: {'; '.join(r.get('invalid_reasons', []))}" for n, r in invalid]
    if notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def _points(gap: Any) -> str:
    """A share as signed percentage points: −0.045 → "−4.5"."""
    if gap is None:
        return "–"
    text = f"{100 * float(gap):+.1f}"
    return text.replace("-", "−")


def _frontier_markdown(doc: Mapping[str, Any]) -> list[str]:
    """The "against the static frontier" section (empty without a frontier)."""
    fr = doc.get("frontier")
    if not fr:
        return []
    src = {"sim": "simulated (inflight sim, the same requests)", "live": "live"}.get(
        str(fr.get("source")), str(fr.get("source"))
    )
    lines = [
        "",
        "## Against the static frontier",
        "",
        f"The fixed fleets, {src}; ✓ on the frontier. Frontier gap: {FRONTIER_DEFINITION}. "
        "Dominated by: the fixed fleets with ≥ the attainment at ≤ the replica-seconds, one "
        "strictly.",
        "",
        "| fleet | SLO attainment | replica-s | ratio | frontier |",
        "|---|---:|---:|---:|---|",
    ]
    for name, f in fr.get("fleets", {}).items():
        label = name if f.get("valid", True) else f"{name} (INVALID, not used)"
        lines.append(
            f"| {label} | {_pct(f.get('slo_attainment'))} | {_num(f.get('replica_seconds'), 0)} "
            f"| {_num(f.get('replica_seconds_ratio'))} | {'✓' if f.get('on_frontier') else ''} |"
        )
    if fr.get("missing"):
        lines += ["", f"Not measured (or not valid): {', '.join(fr['missing'])}."]
    lines += [
        "",
        "| policy | SLO attainment | ratio | frontier there | frontier gap (points) "
        "| where on it | dominated by |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for name, r in doc.get("runs", {}).items():
        by = ", ".join(r.get("dominated_by_fixed") or []) or (
            "–" if r.get("dominated_by_fixed") is None else "none"
        )
        lines.append(
            f"| {name} | {_pct(r.get('slo_attainment'))} | {_num(r.get('replica_seconds_ratio'))} "
            f"| {_pct(r.get('frontier_attainment'))} | {_points(r.get('frontier_gap'))} "
            f"| {r.get('frontier_position') or '–'} | {by} |"
        )
    return lines


def _replica_field(doc: Mapping[str, Any]) -> str:
    fields = {r.get("replica_field") for r in doc.get("runs", {}).values()} - {None}
    return "/".join(sorted(fields)) if fields else "live"
