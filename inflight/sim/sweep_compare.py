"""``inflight sim compare --scenario sweep|slowing``: the closed-loop comparison, simulated.

What ``inflight bench compare`` (``inflight.bench.closedloop.compare``) runs with its
defaults, in virtual time: the same flags and defaults (the flag set both parsers take,
``inflight.workload.sweep.add_closed_loop_flags``, resolved by
``inflight.workload.sweep.closed_loop_args``), the same policies
(``inflight.planes.policy_catalogue.CLOSED_LOOP_POLICIES``: fixed:1, fixed:2, qps, saturation)
and replica bound (``inflight.workload.sweep.DEFAULT_MAX_REPLICAS``), the sweep's
structure at the live comparison's time-scale
(``inflight.sim.closed_loop.SweepPlan.from_bench``), start-up 30 s (the emulator's). Each
run is the live bench's ``RunResult`` document; the comparison is
``inflight.bench.closedloop.compare``'s ``comparison.json`` layout with the seed's
reproduction checks (``inflight.measure.repro``) and each policy's replica changes
(``inflight.measure.repro.replica_changes`` over the sweep), plus ``comparison.md``,
``sweep.png`` and ``timeseries.png``.

Then, as live, the slowing model (``inflight.workload.slowing``; ``--scenario slowing``: it
alone; ``--no-slowing``: the sweep alone): the same flags and level, the same policies,
the warm-up then the one level without a gap, each run the live ``slowing-<policy>.json``
document with its ``slowing_phases``, read by ``inflight.measure.repro``'s slowing checks
and drawn in ``slowing.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inflight.control.hold_order import HOLD_DEADLINE_S
from inflight.measure import repro
from inflight.measure.results import dumps, new_out_dir, write_new
from inflight.measure.table import checks_list, comparison_table, run_table
from inflight.planes.policy_catalogue import CLOSED_LOOP_POLICIES, Policy, parse_policies
from inflight.sim.closed_loop import SweepPlan, simulate_sweep, sweep_result
from inflight.sim.core import SimConfig, policy_names
from inflight.workload import slowing as slowing_model
from inflight.workload.sweep import (
    DEFAULT_MAX_REPLICAS,
    DEFAULT_TIME_SCALE,
    add_closed_loop_flags,
    closed_loop_args,
)

SCHEMA = "inflight-bench-compare/1"  # inflight.bench.closedloop.compare's layout
UNITS = "seed seconds (simulated, time-scale 1); rates per seed second"

# Flags of `inflight sim compare` that mean nothing to the closed-loop sweep.
_OPEN_LOOP_ONLY = (
    ("--arrivals", "arrivals"),
    ("--trace", "trace"),
    ("--min-replicas", "min_replicas"),
    ("--seed", "seed"),
    ("--slo-ttft-s", "slo_ttft_s"),
    ("--slo-tpot-s", "slo_tpot_s"),
    ("--drain-s", "drain_s"),
)


def bench_compare_args(**overrides: Any) -> argparse.Namespace:
    """``inflight bench compare``'s sweep flags at their defaults (the flag set its parser
    takes, ``inflight.workload.sweep.add_closed_loop_flags``), ``overrides`` applied (None
    leaves a default), resolved for the closed loop by
    ``inflight.workload.sweep.closed_loop_args`` (ValueError names a bad flag)."""
    parser = argparse.ArgumentParser(prog="inflight bench compare")
    add_closed_loop_flags(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        if value is not None:
            setattr(args, key, value)
    return closed_loop_args(args)


def sim_config(
    policy: Policy,
    max_replicas: int,
    startup_s: float,
    seed: int,
    scrape_offset_s: float = 0.0,
    hold_deadline_s: float = HOLD_DEADLINE_S,
) -> SimConfig:
    """The stack ``inflight bench compare`` starts for ``policy`` (``Policy.up_args``)."""
    return SimConfig(
        policy=policy.name if policy.frozen else policy.kind,
        min_replicas=1,
        max_replicas=max(max_replicas, policy.replicas),
        startup_s=startup_s,
        scaler_metadata=dict(policy.metadata),
        seed=seed,
        scrape_offset_s=scrape_offset_s,
        hold_deadline_s=hold_deadline_s,
    )


def run_policy(
    policy: Policy,
    plan: SweepPlan,
    *,
    max_replicas: int,
    startup_s: float,
    seed: int,
    command: Sequence[str] = (),
    scrape_offset_s: float = 0.0,
    hold_deadline_s: float = HOLD_DEADLINE_S,
) -> dict[str, Any]:
    """One policy's simulated sweep: the live bench's run document (``RunResult.to_json``)."""
    config = sim_config(policy, max_replicas, startup_s, seed, scrape_offset_s, hold_deadline_s)
    run = simulate_sweep(config, plan)
    result = sweep_result(
        run,
        policy=policy.name,
        frozen=policy.frozen,
        command=command,
        extra={
            "seed": seed,
            "startup_s": startup_s,
            "max_replicas": max_replicas,
            "scrape_offset_s": scrape_offset_s,
        },
    )
    return result.to_json()


def changes(doc: Mapping[str, Any]) -> list[tuple[float, int, int]]:
    """(t, from, to) of the desired replica count over the sweep (warm-up to last level)."""
    return repro.replica_changes(doc, *repro.sweep_span(doc))


def summary(
    runs: Mapping[str, Mapping[str, Any]],
    meta: Mapping[str, Any],
    files: Mapping[str, str],
    slowing: Mapping[str, Mapping[str, Any]] | None = None,
    slowing_files: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``comparison.json``: ``inflight.bench.closedloop.compare``'s layout, every run's changes
    added;
    ``slowing``/``slowing_files``: the slowing-model runs and their files."""
    checks = repro.reproduction_checks(runs, slowing)
    return {
        "schema": SCHEMA,
        **meta,
        "policies": list(runs),
        "checks": checks,
        "reproduced": repro.reproduced(checks),
        "runs": {
            name: {
                "file": files[name],
                "valid": d["valid"],
                "invalid_reasons": d["invalid_reasons"],
                "levels": d["levels"],
                "changes": [list(c) for c in changes(d)],
            }
            for name, d in runs.items()
        },
        "slowing": {
            name: {
                "file": (slowing_files or {})[name],
                "valid": d["valid"],
                "invalid_reasons": d["invalid_reasons"],
                "changes": [list(c) for c in changes(d)],
            }
            for name, d in (slowing or {}).items()
        },
    }


def markdown(
    body: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    slowing: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    title = "sweep" + (" and slowing model" if slowing else "") if runs else "slowing model"
    lines = [
        f"# Policy comparison, closed loop: {title} (simulated)",
        "",
        f"`{' '.join(body['command'])}`",
        "",
        f"Simulated by `inflight sim` (seed {body['seed']}, start-up {body['startup_s']:g} s, "
        f"max {body['max_replicas']} replicas); the sweep's gaps and sampler as the live "
        f"bench runs them at time-scale {body['mirrors_time_scale']:g}. Every figure in "
        "seed time.",
        "",
    ]
    if runs:
        lines.append(comparison_table(runs))
    if slowing:
        s = body["slowing_model"]
        lines += [
            f"Slowing model: {s['concurrency']} clients, max_tokens "
            + ", ".join(f"{m} from {t:g} s" for t, m in s["phases"])
            + " (seed s after the level's start), after a warm-up with no gap.",
            "",
        ]
    lines += [
        "## Reproduction checks (docs/workload.md)",
        "",
        checks_list(body["checks"]),
        "## Replica changes (desired; t in seed s from the warm-up's start)",
        "",
    ]
    every = [*body["runs"].items(), *((f"slowing {k}", v) for k, v in body["slowing"].items())]
    for name, r in every:
        text = ", ".join(f"{t:g} s: {a} → {b}" for t, a, b in r["changes"]) or "none"
        lines.append(f"- {name}: {len(r['changes'])} — {text}")
    lines += ["", "## Validity", ""]
    for name, r in every:
        why = "; ".join(r["invalid_reasons"])
        lines.append(f"- {name}: {'valid' if r['valid'] else 'INVALID: ' + why}")
    lines += ["", "## Per-run tables", ""]
    for name, d in [*runs.items(), *((f"slowing {k}", v) for k, v in (slowing or {}).items())]:
        lines += [f"### {name}", "", run_table(d)]
    return "\n".join(lines) + "\n"


def main(a: argparse.Namespace) -> int:
    """``inflight sim compare --scenario sweep|slowing``: errors raise ValueError naming
    the flag."""
    given = [flag for flag, attr in _OPEN_LOOP_ONLY if getattr(a, attr, None) is not None]
    if given:
        raise ValueError(f"{given[0]}: open-loop only (not with --scenario {a.scenario})")
    try:
        seeds = [int(s) for s in (a.seeds or "1").split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds: expected one integer, got {a.seeds!r}") from None
    if len(seeds) != 1:
        raise ValueError(
            f"--seeds: the closed-loop sweep takes one seed (it only breaks the router's "
            f"ties), got {a.seeds!r}"
        )
    args = bench_compare_args(
        concurrency=a.concurrency,
        requests=a.requests,
        prompt_tokens=a.prompt_tokens,
        max_tokens=a.max_tokens,
    )
    if args.requests < 1:
        raise ValueError(f"--requests: must be >= 1, got {args.requests}")
    max_replicas = DEFAULT_MAX_REPLICAS if a.max_replicas is None else a.max_replicas
    if max_replicas < 1:
        raise ValueError(f"--max-replicas: must be >= 1, got {max_replicas}")
    startup_s = SimConfig().startup_s if a.startup_s is None else a.startup_s
    if startup_s < 0:
        raise ValueError(f"--startup-s: must be >= 0, got {startup_s}")
    policies = parse_policies(a.policies or CLOSED_LOOP_POLICIES)
    unknown = [p.name for p in policies if not p.frozen and p.kind not in policy_names()]
    if unknown:
        raise ValueError(f"--policies: not in this build: {', '.join(unknown)}")
    slow = slowing_model.level_from_args(a)
    sweep, with_slowing = slowing_model.scenario_runs(a.scenario, a.no_slowing)
    plan = SweepPlan.from_bench(args, DEFAULT_TIME_SCALE)
    slow_plan = SweepPlan.from_bench(
        args, DEFAULT_TIME_SCALE, levels=(slow,), gap_s=slowing_model.GAP_S
    )
    out: Path = new_out_dir(a.out_dir, "comparisons", a.force)
    command = ["inflight", *sys.argv[1:]]
    runs: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    for policy in policies if sweep else ():
        doc = run_policy(
            policy,
            plan,
            max_replicas=max_replicas,
            startup_s=startup_s,
            seed=seeds[0],
            command=command,
        )
        files[policy.name] = f"{policy.slug}.json"
        write_new(out / files[policy.name], dumps(doc), a.force)
        write_new(out / f"{policy.slug}.md", run_table(doc), a.force)
        runs[policy.name] = doc
        print(f"{policy.name}: {len(changes(doc))} replica change(s)", file=sys.stderr)
    slowing: dict[str, dict[str, Any]] = {}
    slowing_files: dict[str, str] = {}
    for policy in slowing_model.slowing_policies(policies) if with_slowing else ():
        doc = run_policy(
            policy,
            slow_plan,
            max_replicas=max_replicas,
            startup_s=startup_s,
            seed=seeds[0],
            command=command,
        )
        doc["slowing_phases"] = slowing_model.phases_field(slow)
        slowing_files[policy.name] = slowing_model.file_name(policy)
        write_new(out / slowing_files[policy.name], dumps(doc), a.force)
        slowing[policy.name] = doc
        print(f"slowing {policy.name}: {len(changes(doc))} replica change(s)", file=sys.stderr)
    meta = {
        "created_at": None,  # no clock is read: the same file every time
        "command": command,
        "source": "sim",
        "time_scale": 1.0,
        "mirrors_time_scale": DEFAULT_TIME_SCALE,
        "units": UNITS,
        "seed": seeds[0],
        "max_replicas": max_replicas,
        "startup_s": startup_s,
        "hold_deadline_s": HOLD_DEADLINE_S,
        "sweep": {
            "concurrency": [lv.concurrency for lv in plan.levels],
            "requests": args.requests,
            "prompt_tokens": plan.prompt_tokens,
            "max_tokens": args.max_tokens,
            "warmup": plan.warmup_requests,
            "warmup_concurrency": plan.warmup_concurrency,
            "gap_s": plan.gap_s,
            "settle_s": plan.settle_s,
            "sample_interval_s": plan.sample_interval_s,
        },
    }
    if with_slowing:
        meta["slowing_model"] = {
            "concurrency": slow.concurrency,
            "phase_s": a.slowing_phase_s,
            "phases": slowing_model.phases_field(slow),
            "gap_s": slow_plan.gap_s,
        }
    body = summary(runs, meta, files, slowing, slowing_files)
    write_new(out / "comparison.json", json.dumps(body, indent=1) + "\n", a.force)
    md = markdown(body, runs, slowing)
    write_new(out / "comparison.md", md, a.force)
    from inflight.measure.plots import sweep_plot, timeseries_plot

    if runs:
        sweep_plot(runs, out / "sweep.png", title="closed-loop sweep (simulated)")
        timeseries_plot(
            runs, out / "timeseries.png", title="L (router), λ (client) and replicas (simulated)"
        )
    if slowing:
        timeseries_plot(
            slowing,
            out / "slowing.png",
            title=f"{slowing_model.PLOT_TITLE} (simulated)",
            phases=slowing_model.plot_phases(slow),
        )
    print(md)
    return 0 if body["reproduced"] else 1
