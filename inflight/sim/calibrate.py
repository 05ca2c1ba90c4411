"""``inflight sim calibrate``: the simulator against committed live comparisons.

Issue #14, item 2. Give one or more live comparison directories of one kind (``--live
DIR``, repeatable) and a new ``--out-dir``; the live runs' own workload is simulated again
and ``calibration.json`` / ``calibration.md`` hold, per policy, live against simulated:

* a closed-loop sweep (``inflight bench compare``, schema ``inflight-bench-compare/1``):
  per level the throughput (req/s, seed) and p50 latency, their relative differences
  (bar: :data:`SWEEP_THROUGHPUT_BAR`, 3 %), and the replica changes over the sweep
  (bar: the same number, each within one KEDA polling interval, 30 s seed). The sweep's
  flags come from the live run files (levels, lengths, warm-up, gap), its time-scale
  from the comparison;
* an open-loop comparison (``inflight bench compare --scenario|--arrivals``, schema
  ``inflight-bench-compare-openloop/1``): SLO attainment (bar: 3 points), replica-seconds
  (bar: 5 %) and replica changes, on the same requests (scenario or arrivals, lengths and
  seed from the comparison's ``scenario``; the number of planned requests must match).

The judging is pure (:func:`sweep_rows`, :func:`openloop_rows`); ``main`` reads, simulates
and writes. A bar missed is reported, not hidden: ``within`` is False and the Markdown
says so; the exit code is 0 when every figure is within its bar, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from inflight.control.hpa import KEDA_POLLING_INTERVAL_S
from inflight.measure.results import read_json
from inflight.measure.run_rows import RouterSampleRow, TimelineRow, named

SWEEP_SCHEMA = "inflight-bench-compare/1"
OPENLOOP_SCHEMA = "inflight-bench-compare-openloop/1"
SCHEMA = "inflight.sim.calibration/1"

# Issue #14, item 2: the bars.
SWEEP_THROUGHPUT_BAR = 0.03  # relative, per level
CHANGE_TIME_BAR_S = KEDA_POLLING_INTERVAL_S  # seed s, per replica change
ATTAINMENT_BAR = 0.03  # absolute (3 points)
REPLICA_SECONDS_BAR = 0.05  # relative

Doc = Mapping[str, Any]


class CalibrationError(ValueError):
    """A live directory the calibration cannot use; the message names it."""


# --- judging (pure) --------------------------------------------------------------------
def rel(sim: float | None, live: float | None) -> float | None:
    """(sim − live) ÷ live; None when either is missing or live is 0."""
    if sim is None or live is None or live == 0:
        return None
    return (sim - live) / live


def changes_match(
    sim: Sequence[Sequence[float]], live: Sequence[Sequence[float]], bar_s: float
) -> bool:
    """The same number of changes, in the same directions, each within ``bar_s``."""
    if len(sim) != len(live):
        return False
    return all(
        abs(s[0] - v[0]) <= bar_s and (s[1], s[2]) == (v[1], v[2])
        for s, v in zip(sim, live, strict=True)
    )


def sweep_rows(
    sim_runs: Mapping[str, Doc],
    live_runs: Mapping[str, Mapping[str, Doc]],
    sim_changes: Mapping[str, Sequence[Sequence[float]]],
    live_changes: Mapping[str, Mapping[str, Sequence[Sequence[float]]]],
) -> dict[str, Any]:
    """Per policy: per level, sim and each live run's throughput and p50, the relative
    differences and whether each is within :data:`SWEEP_THROUGHPUT_BAR`; the changes.

    ``live_runs``: live label → policy → run document (``levels``); ``live_changes``:
    live label → policy → [(t, from, to)].
    """
    out: dict[str, Any] = {}
    for policy, sim_doc in sim_runs.items():
        levels = []
        for lv in sim_doc["levels"]:
            c = lv["concurrency"]
            live = {}
            for label, runs in live_runs.items():
                if policy not in runs:
                    continue
                match = [x for x in runs[policy]["levels"] if x["concurrency"] == c]
                if not match:
                    continue
                lt, lp = match[0]["throughput_rps"], match[0]["e2e_p50_s"]
                d = rel(lv["throughput_rps"], lt)
                live[label] = {
                    "throughput_rps": lt,
                    "e2e_p50_s": lp,
                    "throughput_diff": d,
                    "p50_diff": rel(lv["e2e_p50_s"], lp),
                    "within": d is not None and abs(d) <= SWEEP_THROUGHPUT_BAR,
                }
            levels.append(
                {
                    "concurrency": c,
                    "sim_throughput_rps": lv["throughput_rps"],
                    "sim_e2e_p50_s": lv["e2e_p50_s"],
                    "live": live,
                    "within": bool(live) and all(x["within"] for x in live.values()),
                }
            )
        lc = {label: list(ch[policy]) for label, ch in live_changes.items() if policy in ch}
        sc = list(sim_changes.get(policy, []))
        out[policy] = {
            "levels": levels,
            "sim_changes": sc,
            "live_changes": lc,
            "changes_within": {
                label: changes_match(sc, ch, CHANGE_TIME_BAR_S) for label, ch in lc.items()
            },
        }
    return out


def openloop_rows(sim_runs: Mapping[str, Doc], live_runs: Mapping[str, Doc]) -> dict[str, Any]:
    """Per policy in both: attainment (points), replica-seconds (relative) and changes,
    live against sim, and whether each is within its bar."""
    out: dict[str, Any] = {}
    for policy, live in live_runs.items():
        if policy not in sim_runs:
            continue
        sim = sim_runs[policy]
        la, sa = live.get("slo_attainment"), sim.get("slo_attainment")
        lr, sr = live.get("replica_seconds"), sim.get("replica_seconds")
        att = None if la is None or sa is None else sa - la
        rs = rel(sr, lr)
        out[policy] = {
            "live_slo_attainment": la,
            "sim_slo_attainment": sa,
            "attainment_diff_points": None if att is None else 100 * att,
            "attainment_within": att is not None and abs(att) <= ATTAINMENT_BAR,
            "live_replica_seconds": lr,
            "sim_replica_seconds": sr,
            "replica_seconds_diff": rs,
            "replica_seconds_within": rs is not None and abs(rs) <= REPLICA_SECONDS_BAR,
            "live_changes": live.get("changes"),
            "sim_changes": sim.get("changes"),
            "live_reversals": live.get("reversals"),
            "sim_reversals": sim.get("reversals"),
            "live_valid": live.get("valid", True),
        }
    return out


def serving_delays(
    timeline: Sequence[Sequence[Any]], samples: Sequence[Sequence[Any]]
) -> list[float]:
    """Seed s from each replica asked for to the router serving it: for every rise of the
    desired count past ``k`` (``timeline``'s rows, as ``TimelineRow``), the time until the
    router's ready count (``samples``' rows, as ``RouterSampleRow``) first reaches ``k``; a
    request withdrawn first (desired below ``k`` again) is left out. This is the start-up
    as the traffic feels it (process start, health probe and the router's endpoint-file
    poll on top of the replica's own ``startup_s``).

    >>> serving_delays([[0, 3], [10, 5]], [[0, 0, 0, 3], [105, 0, 0, 4], [112, 0, 0, 5]])
    [95.0, 102.0]
    """
    out: list[float] = []
    pending: dict[int, float] = {}  # k -> asked at
    changes = named(TimelineRow, timeline)
    polls = named(RouterSampleRow, samples)
    prev = int(changes[0].desired) if changes else 0
    events = sorted(
        [(float(c.t_s), 0, int(c.desired)) for c in changes[1:]]
        + [(float(p.t_s), 1, int(p.ready)) for p in polls]
    )
    for t, kind, value in events:
        if kind == 0:
            for k in range(prev + 1, value + 1):
                pending.setdefault(k, t)
            for k in [k for k in pending if k > value]:
                del pending[k]  # withdrawn before it served
            prev = value
        else:
            for k in sorted(k for k in pending if k <= value):
                out.append(round(t - pending.pop(k), 3))
    return out


def _figures(m: Doc) -> dict[str, Any]:
    return {k: m.get(k) for k in ("slo_attainment", "replica_seconds", "changes")}


def phase_spread(runs: Sequence[Doc], live: Doc) -> dict[str, Any]:
    """The simulated figures over scrape phases (min, max) and whether the live ones lie
    within them widened by the bars (3 points; 5 %)."""
    att = [r["slo_attainment"] for r in runs if r["slo_attainment"] is not None]
    rs = [r["replica_seconds"] for r in runs if r["replica_seconds"] is not None]
    la, lr = live.get("slo_attainment"), live.get("replica_seconds")
    inside = (
        bool(att and rs)
        and la is not None
        and lr is not None
        and min(att) - ATTAINMENT_BAR <= la <= max(att) + ATTAINMENT_BAR
        and min(rs) * (1 - REPLICA_SECONDS_BAR) <= lr <= max(rs) * (1 + REPLICA_SECONDS_BAR)
    )
    return {
        "runs": list(runs),
        "slo_attainment": [min(att), max(att)] if att else None,
        "replica_seconds": [min(rs), max(rs)] if rs else None,
        "live_inside": inside,
    }


def _summary(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "max": None}
    ordered = sorted(values)
    return {"n": len(values), "median": ordered[len(ordered) // 2], "max": ordered[-1]}


# --- reading the live side ---------------------------------------------------------------
def read_comparison(path: Path) -> dict[str, Any]:
    file = path / "comparison.json"
    try:
        body = read_json(file)
    except (OSError, EOFError, ValueError) as exc:
        raise CalibrationError(f"--live {path}: cannot read {file}: {exc}") from None
    if body.get("schema") not in (SWEEP_SCHEMA, OPENLOOP_SCHEMA):
        raise CalibrationError(
            f"--live {path}: {file} is not a comparison (schema {body.get('schema')!r})"
        )
    return dict(body)


def read_run(path: Path, name: str) -> dict[str, Any]:
    file = path / name
    try:
        return dict(read_json(file))
    except (OSError, EOFError, ValueError) as exc:
        raise CalibrationError(f"--live {path}: cannot read {file}: {exc}") from None


# --- the sweep -----------------------------------------------------------------------
def calibrate_sweep(
    lives: Mapping[str, tuple[Path, Doc]],
    policies: Sequence[str] | None = None,
    scrape_offset_s: float = 0.0,
) -> dict[str, Any]:
    """Simulate the live sweep once per policy and judge it against every live run."""
    from inflight.measure import repro
    from inflight.planes.policy_catalogue import as_run, parse_policies
    from inflight.sim.closed_loop import SweepPlan
    from inflight.sim.sweep_compare import bench_compare_args, run_policy

    docs: dict[str, dict[str, Doc]] = {}
    for label, (path, body) in lives.items():
        docs[label] = {
            name: read_run(path, run["file"])
            for name, run in body["runs"].items()
            if policies is None or name in policies
        }
    first_label = next(iter(lives))
    first_body = lives[first_label][1]
    names = [n for n in first_body["runs"] if policies is None or n in policies]
    if not names:
        raise CalibrationError(f"--live {lives[first_label][0]}: no policy to calibrate")
    sample = docs[first_label][names[0]]
    work = sample.get("workload", {})
    args = bench_compare_args(
        concurrency=[lv["concurrency"] for lv in sample["levels"]],
        requests=sample["levels"][0]["requests"],
        prompt_tokens=str(work.get("prompt_tokens", 3000)),
        max_tokens=str(work.get("max_tokens", 300)),
        warmup=work.get("warmup"),
        gap_s=work.get("gap_s"),
    )
    time_scale = float(first_body["time_scale"])
    plan = SweepPlan.from_bench(args, time_scale)
    sim_runs: dict[str, Doc] = {}
    for policy in parse_policies(",".join(names)):
        # as the first live run ran it: its recorded settings, else the old defaults' table
        stack_info = docs[first_label][policy.name].get("stack", {}).get("stack_info") or {}
        recorded = stack_info.get("trigger_metadata")
        sim_runs[policy.name] = run_policy(
            as_run(policy, recorded, first_body.get("created_at")),
            plan,
            max_replicas=2,
            startup_s=30.0,
            seed=1,
            command=(),
            scrape_offset_s=scrape_offset_s,
            # The live sweeps were made before the router's --hold-deadline-s (FIFO).
            hold_deadline_s=float(first_body.get("hold_deadline_s", 0.0)),
        )
    sim_changes = {n: repro.replica_changes(d, *repro.sweep_span(d)) for n, d in sim_runs.items()}
    live_changes = {
        label: {n: repro.replica_changes(d, *repro.sweep_span(d)) for n, d in runs.items()}
        for label, runs in docs.items()
    }
    rows = sweep_rows(sim_runs, docs, sim_changes, live_changes)
    return {
        "kind": "sweep",
        "mirrors_time_scale": time_scale,
        "scrape_offset_s": scrape_offset_s,
        "bars": {
            "throughput_rel": SWEEP_THROUGHPUT_BAR,
            "change_time_s": CHANGE_TIME_BAR_S,
        },
        "policies": rows,
    }


# --- the open loop ---------------------------------------------------------------------
def openloop_args(scenario: Mapping[str, Any], live_dir: Path | None = None) -> argparse.Namespace:
    """The sim's flags for a live comparison's ``scenario`` block (same requests): its
    scenario or arrivals, or its trace with the same window and warm-up. A trace's path is
    read as recorded, else beside the comparison (``live_dir``, where a results folder
    keeps it); CalibrationError naming it when neither exists."""
    from inflight.workload.scenarios import SCENARIOS

    name = scenario.get("name")
    common = {
        "slo_ttft_s": scenario.get("slo", {}).get("ttft_s"),
        "slo_tpot_s": scenario.get("slo", {}).get("tpot_s"),
        "drain_s": scenario.get("drain_s"),
        "min_replicas": scenario.get("min_replicas"),
        "max_replicas": scenario.get("max_replicas"),
        "startup_s": scenario.get("startup_s"),
        # Live comparisons made before the router's --hold-deadline-s held FIFO.
        "hold_deadline_s": scenario.get("hold_deadline_s", 0.0),
    }
    if "trace" in scenario:
        window = scenario.get("trace_window") or {}
        warm = scenario.get("trace_warmup")
        return argparse.Namespace(
            scenario=None, arrivals=None, trace=str(_trace_file(scenario["trace"], live_dir)),
            prompt_tokens=None, max_tokens=None, seed=None,
            trace_start_s=window.get("start_s"), trace_duration_s=window.get("duration_s"),
            trace_rate_scale=window.get("rate_scale"),
            trace_warmup_s=warm["duration_s"] if warm else 0.0,
            **common,
        )  # fmt: skip
    return argparse.Namespace(
        scenario=name if name in SCENARIOS else None,
        arrivals=None if name in SCENARIOS else scenario.get("arrivals"),
        trace=None,
        prompt_tokens=scenario.get("prompt_tokens"),
        max_tokens=scenario.get("max_tokens"),
        seed=scenario.get("seed"),
        arrivals_warmup_s=scenario.get("arrivals_warmup_s"),  # --arrivals-warmup-s, if any
        **common,
    )


def _trace_file(recorded: str, live_dir: Path | None) -> Path:
    """A live trace comparison's trace: as recorded, else by its name in ``live_dir``."""
    path = Path(recorded)
    if path.exists():
        return path
    if live_dir is not None and (live_dir / path.name).exists():
        return live_dir / path.name
    where = f" nor in {live_dir}" if live_dir is not None else ""
    raise CalibrationError(f"the live comparison's trace {recorded} is not there{where}")


def calibrate_openloop(
    path: Path,
    body: Doc,
    policies: Sequence[str] | None,
    scrape_offset_s: float = 0.0,
    startup_s: float | None = None,
    phases: int = 1,
) -> dict[str, Any]:
    """Simulate the live comparison's requests for each of its policies; judge.

    ``phases`` > 1: each policy is also simulated with its scrapes at ``phases`` offsets
    spread over one scrape interval, and the row gets the spread (``phase_spread``) and
    whether the live figures lie within it, widened by the bars (``live_inside``)."""
    from inflight.planes.policy_catalogue import as_run, resolve_policies
    from inflight.sim import report
    from inflight.sim.cli import sim_config, simulate_plan
    from inflight.workload.plan import plan_from_args

    scenario = body.get("scenario", {})
    plan = plan_from_args(openloop_args(scenario, path))
    planned = scenario.get("requests_planned")
    if planned is not None and planned != len(plan.requests):
        raise CalibrationError(
            f"--live {path}: {planned} requests planned live, {len(plan.requests)} here: "
            "not the same workload (code changed since the live run?)"
        )
    lo = plan.min_replicas if plan.min_replicas is not None else 1
    hi = plan.max_replicas if plan.max_replicas is not None else 2
    names = [n for n in body["runs"] if policies is None or n in policies]
    if not names:
        raise CalibrationError(f"--live {path}: no policy to calibrate")
    seed = scenario.get("seed") or 1
    sim_runs: dict[str, dict[str, Any]] = {}
    spreads: dict[str, list[dict[str, Any]]] = {}
    for policy in resolve_policies(",".join(names), hi, max(1, lo)):
        # the policy as it ran live: its recorded settings, else the table of old defaults
        recorded = body["runs"][policy.name].get("trigger_metadata")
        policy = as_run(policy, recorded, body.get("created_at"))
        config = replace(sim_config(plan, policy, seed), scrape_offset_s=scrape_offset_s)
        if startup_s is not None:
            config = replace(config, startup_s=startup_s)
        result = simulate_plan(config, plan)  # after the plan's warm-up, as sim compare
        sim_runs[policy.name] = report.measures(result, plan.slo)
        spreads[policy.name] = []
        for k in range(phases if phases > 1 else 0):
            offset_s = round(k * config.scrape_interval_s / phases, 6)
            m = report.measures(
                simulate_plan(replace(config, scrape_offset_s=offset_s), plan),
                plan.slo,
            )
            spreads[policy.name].append({"scrape_offset_s": offset_s, **_figures(m)})
    live_runs = {n: body["runs"][n] for n in names}
    rows = openloop_rows(sim_runs, live_runs)
    for name, row in rows.items():
        if spreads.get(name):
            row["phase_spread"] = phase_spread(spreads[name], live_runs[name])
    for name, row in rows.items():
        file = live_runs[name].get("file")
        if file and (path / file).exists():
            doc = read_run(path, file)
            delays = serving_delays(doc.get("timeline", []), doc.get("router_samples", []))
            row["live_serving_delay_s"] = _summary(delays)
    return {
        "kind": "open-loop",
        "scenario": scenario.get("name"),
        "seed": seed,
        "mirrors_time_scale": body.get("time_scale"),
        "scrape_offset_s": scrape_offset_s,
        "bars": {"attainment_points": 100 * ATTAINMENT_BAR, "replica_seconds_rel": 0.05},
        "startup_s": plan.startup_s if startup_s is None else startup_s,
        "phases": phases,
        "policies": rows,
    }


# --- report ---------------------------------------------------------------------------
def _pct(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{100 * v:+.{digits}f} %"


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "–" if v is None else format(v, fmt)


def _spread(row: Doc) -> str:
    sp = row.get("phase_spread")
    if not sp or sp["slo_attainment"] is None:
        return "–"
    (a0, a1), (r0, r1) = sp["slo_attainment"], sp["replica_seconds"]
    return (
        f"{100 * a0:.1f}–{100 * a1:.1f} %, {r0:.0f}–{r1:.0f} "
        f"({'yes' if sp['live_inside'] else '**no**'})"
    )


def _delay(row: Doc) -> str:
    d = row.get("live_serving_delay_s")
    if not d or not d["n"]:
        return "–"
    return f"{d['median']:.0f} / {d['max']:.0f} (n={d['n']})"


def within_all(body: Doc) -> bool:
    """Every figure within its bar (the sweep: throughput and changes; open loop: both)."""
    ok = True
    for row in body["policies"].values():
        if body["kind"] == "sweep":
            ok &= all(lv["within"] for lv in row["levels"])
            ok &= all(row["changes_within"].values())
        else:
            ok &= row["attainment_within"] and row["replica_seconds_within"]
    return bool(ok)


def markdown(body: Doc) -> str:
    lines = [f"# Simulator calibration: {body['kind']}", ""]
    lines += [f"Live: {', '.join(f'`{x}`' for x in body['live'])}", ""]
    lines += [
        f"Simulated with the scrapes {body['scrape_offset_s']:g} s after the run's start "
        "(`--scrape-offset-s`; HPA syncs and KEDA polls from the start, every 15 and 30 s).",
        "",
    ]
    if body["kind"] == "sweep":
        lines += [
            f"Throughput bar ±{100 * SWEEP_THROUGHPUT_BAR:g} % per level; replica changes: "
            f"the same number, each within {CHANGE_TIME_BAR_S:g} s (one KEDA polling "
            "interval). Differences are (sim − live) ÷ live, one column per live run.",
            "",
        ]
        labels = sorted({lab for r in body["policies"].values() for lv in r["levels"]
                         for lab in lv["live"]})  # fmt: skip
        head = "| policy | c | sim req/s | sim p50 s | " + " | ".join(labels) + " | within |"
        lines += [head, "|---|---:|---:|---:|" + "---:|" * len(labels) + "---|"]
        for name, row in body["policies"].items():
            for lv in row["levels"]:
                cells = []
                for lab in labels:
                    x = lv["live"].get(lab)
                    cells.append(
                        "–"
                        if x is None
                        else f"{x['throughput_rps']:.3f} ({_pct(x['throughput_diff'])})"
                    )
                lines.append(
                    f"| {name} | {lv['concurrency']} | {lv['sim_throughput_rps']:.4f} | "
                    f"{_num(lv['sim_e2e_p50_s'], '.2f')} | "
                    + " | ".join(cells)
                    + f" | {'yes' if lv['within'] else '**no**'} |"
                )
        lines += ["", "## Replica changes (t s, from, to)", ""]
        for name, row in body["policies"].items():
            lines.append(f"- {name}: sim {len(row['sim_changes'])}: {row['sim_changes']}")
            for lab, ch in row["live_changes"].items():
                ok = row["changes_within"][lab]
                lines.append(
                    f"  - live {lab} {len(ch)}: {ch} — {'match' if ok else '**no match**'}"
                )
    else:
        lines += [
            f"Scenario `{body['scenario']}`, seed {body['seed']}; bars: SLO attainment "
            f"±{100 * ATTAINMENT_BAR:g} points, replica-seconds ±{100 * REPLICA_SECONDS_BAR:g} %.",
            "",
            f"Simulated replica start-up {body['startup_s']:g} s. Live serving delay: seed s "
            "from a replica asked for to the router serving it (median / max over the run).",
            "",
            "| policy | live attainment | sim | Δ points | live replica-s | sim | Δ | "
            "changes live / sim | live serving delay s | within | sim over phases: "
            "attainment, replica-s (live inside) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for name, r in body["policies"].items():
            ok = r["attainment_within"] and r["replica_seconds_within"]
            lines.append(
                f"| {name} | {_pct(r['live_slo_attainment'], 1).lstrip('+')} | "
                f"{_pct(r['sim_slo_attainment'], 1).lstrip('+')} | "
                f"{_num(r['attainment_diff_points'], '+.1f')} | "
                f"{_num(r['live_replica_seconds'], '.0f')} | "
                f"{_num(r['sim_replica_seconds'], '.0f')} | "
                f"{_pct(r['replica_seconds_diff'], 1)} | "
                f"{r['live_changes']} / {r['sim_changes']} | {_delay(r)} | "
                f"{'yes' if ok else '**no**'} | {_spread(r)} |"
            )
    lines += ["", f"Every figure within its bar: {'yes' if body['within'] else 'no'}."]
    return "\n".join(lines) + "\n"


def calibrate(
    paths: Sequence[Path],
    policies: Sequence[str] | None = None,
    scrape_offset_s: float = 0.0,
    startup_s: float | None = None,
    phases: int = 1,
) -> dict[str, Any]:
    """Read the live directories, simulate, judge: ``calibration.json``'s body.

    ``scrape_offset_s``: the phase of the simulated scrapes (``SimConfig.scrape_offset_s``);
    ``startup_s``: the simulated replicas' start-up in place of the live run's (open loop:
    to see how much of a gap the live serving delay explains)."""
    if not paths:
        raise CalibrationError("--live: give at least one live comparison directory")
    lives = {str(p): (p, read_comparison(p)) for p in paths}
    kinds = {b["schema"] for _, b in lives.values()}
    if len(kinds) != 1:
        raise CalibrationError("--live: the directories mix closed-loop and open-loop comparisons")
    if kinds == {SWEEP_SCHEMA}:
        body = calibrate_sweep(lives, policies, scrape_offset_s)
    else:
        if len(paths) != 1:
            raise CalibrationError("--live: one open-loop comparison at a time")
        path, live = lives[str(paths[0])]
        body = calibrate_openloop(path, live, policies, scrape_offset_s, startup_s, phases)
    body = {"schema": SCHEMA, "live": [str(p) for p in paths], **body}
    body["within"] = within_all(body)
    return body


def _main(a: argparse.Namespace) -> int:
    import logging

    from inflight.measure.results import ResultFileExists, new_out_dir, write_new

    # As inflight sim run|compare: the control loops' decisions are not printed.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("inflight.up").setLevel(logging.ERROR)
    try:
        policies = [p for p in a.policies.split(",") if p.strip()] if a.policies else None
        if a.phases < 1:
            raise CalibrationError(f"--phases: must be >= 1, got {a.phases}")
        body = calibrate(a.live or [], policies, a.scrape_offset_s, a.startup_s, a.phases)
        out = new_out_dir(a.out_dir, "calibrations", a.force)
        write_new(out / "calibration.json", json.dumps(body, indent=1) + "\n", a.force)
        md = markdown(body)
        write_new(out / "calibration.md", md, a.force)
    except (CalibrationError, ResultFileExists, ValueError) as exc:
        print(f"inflight sim calibrate: error: {exc}", file=sys.stderr)
        return 2
    print(md)
    return 0 if body["within"] else 1


def register(sub: Any) -> None:
    """``inflight sim calibrate`` (a hook of ``inflight.sim.cli``)."""
    p = sub.add_parser("calibrate", help="the simulator against live comparison directories")
    p.add_argument(
        "--live",
        type=Path,
        action="append",
        help="a live comparison directory (comparison.json and its run files); repeatable",
    )
    p.add_argument("--policies", help="only these policies (default: every one in --live)")
    p.add_argument(
        "--scrape-offset-s",
        type=float,
        default=0.0,
        help="phase of the simulated Prometheus scrapes, seed s in [0, 5) (default 0): "
        "live runs do not record theirs",
    )
    p.add_argument(
        "--startup-s",
        type=float,
        default=None,
        help="open loop: simulate this replica start-up, seed s, instead of the live "
        "run's (e.g. the live serving delay calibration.json reports)",
    )
    p.add_argument(
        "--phases",
        type=int,
        default=1,
        help="open loop: also simulate every policy at N scrape phases over one interval "
        "and report the spread (default 1: none)",
    )
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--force", action="store_true", help="write into a non-empty --out-dir")
    p.set_defaults(func=_main)
