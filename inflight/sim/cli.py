"""``inflight sim run|compare``: the stack in virtual time, on the bench's workloads.

The workload flags are ``inflight bench``'s open-loop flags, read by the same code
(``inflight.workload.plan``: ``--scenario``, ``--arrivals``, ``--trace``, the length
distributions, ``--seed``, the SLO, ``--drain-s``, replica bounds and start-up), so a
scenario can go to either. ``run`` simulates one policy and writes ``run.json`` (the live
bench's measures, ``inflight.measure.slo.run_measures``), ``timeline.jsonl``,
``decisions.jsonl`` (KEDA's and the HPA's), ``scaler.jsonl`` (the scaler's answers and the
policy's reasons) and ``requests.jsonl``. ``compare`` simulates several policies
(``--policies``, parsed as ``inflight bench compare`` parses them:
``inflight.planes.policy_catalogue``) on several seeds, every policy seeing the same requests for
a seed, and writes the live comparison's ``comparison.json`` / ``comparison.md``
(``inflight.measure.openloop_report``), ``pareto.png`` and ``timeseries.png``.
Output directories are never overwritten (``inflight.measure.results.new_out_dir``).
``trace-from-prometheus`` is registered by ``inflight.sim.prom_trace``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from inflight import names
from inflight.control.hold_order import HOLD_DEADLINE_S, hold_order_note
from inflight.measure.classes import class_measures, class_table
from inflight.measure.frontier import fleet_names
from inflight.measure.openloop_report import build_comparison, comparison_markdown
from inflight.measure.results import ResultFileExists, new_out_dir, write_new
from inflight.measure.run_rows import TimelineRow, as_row
from inflight.measure.slo import Outcome, slo_measures
from inflight.planes.policy_catalogue import Policy, parse_policies, resolve_policies, with_run
from inflight.sim import dispatch_flags, kvcache, outages, report, token_admission
from inflight.sim.core import SCALER_POLICIES, SimConfig, SimResult, policy_names, simulate
from inflight.workload.flags import concurrency_list
from inflight.workload.plan import (
    CLOSED_LOOP,
    DEFAULT_MAX_REPLICAS,
    DEFAULT_MIN_REPLICAS,
    OpenLoopPlan,
    add_arrivals_warmup_flag,
    add_open_loop_flags,
    add_trace_warmup_flag,
    plan_from_args,
)
from inflight.workload.scenarios import PREFIX_SCENARIOS, SCENARIOS
from inflight.workload.slowing import add_slowing_flags
from inflight.workload.trace import TraceError

# `inflight sim compare --scenario sweep|slowing`: the closed-loop comparison
# (inflight.sim.sweep_compare), `inflight bench compare`'s closed-loop scenarios.
CLOSED_LOOP_SCENARIOS = CLOSED_LOOP
DEFAULT_SEEDS = "1,2,3"
TIME_SCALE = 1.0  # the simulator runs in seed time
UNITS = "seed seconds (simulated, time-scale 1); rates per seed second"

# Trigger keys the simulator sets itself (from --policy, its time-scale 1 and the replica's
# slots), as inflight up sets them from its flags.
FROM_FLAGS = frozenset({names.META_POLICY, names.META_TIME_SCALE, names.META_SLOTS_PER_REPLICA})


class UsageError(ValueError):
    """A bad flag value; the message names the flag."""


def parse_scaler_metadata(text: str | None, flag: str = "--scaler-metadata") -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` → dict; keys from ``inflight.names.METADATA_DEFAULTS``."""
    from external_scaler.errors import MetadataError
    from external_scaler.metadata import parse_metadata

    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"{flag}: expected KEY=VALUE, got {item!r}")
        if key not in names.METADATA_DEFAULTS or key in FROM_FLAGS:
            known = ", ".join(k for k in names.METADATA_DEFAULTS if k not in FROM_FLAGS)
            raise UsageError(f"{flag}: unknown key {key!r} (valid keys: {known})")
        if key in out:
            raise UsageError(f"{flag}: key {key!r} given twice")
        out[key] = value.strip()
    try:
        parse_metadata({**names.METADATA_DEFAULTS, **out}, experimental=True)
    except MetadataError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    return out


def _bounds(plan: OpenLoopPlan) -> tuple[int, int]:
    lo = DEFAULT_MIN_REPLICAS if plan.min_replicas is None else plan.min_replicas
    hi = DEFAULT_MAX_REPLICAS if plan.max_replicas is None else plan.max_replicas
    if hi < max(1, lo):
        raise UsageError(f"--max-replicas: must be >= 1 and >= {lo}, got {hi}")
    return lo, hi


def _startup_s(plan: OpenLoopPlan) -> float:
    """The replicas' start-up (seed s): ``--startup-s``, else the simulator's default."""
    return SimConfig().startup_s if plan.startup_s is None else plan.startup_s


def sim_config(plan: OpenLoopPlan, policy: Policy, seed: int) -> SimConfig:
    """One policy of the comparison on this plan's stack (``fixed:N`` keeps N replicas)."""
    lo, hi = _bounds(plan)
    kwargs: dict[str, Any] = {}
    if plan.startup_s is not None:
        kwargs["startup_s"] = plan.startup_s
    if plan.hold_deadline_s is not None:
        kwargs["hold_deadline_s"] = plan.hold_deadline_s
    if plan.hold_deadline_peers:
        kwargs["hold_deadline_peers"] = True
    if plan.priority_classes:  # --priority-class, --max-late-s: the router's, seed s
        kwargs["priority_classes"] = plan.priority_classes
    if plan.max_late_s is not None:
        kwargs["max_late_s"] = plan.max_late_s
    if any(r.prefix_ids for r in (*plan.requests, *plan.warmup)):
        # the requests carry block ids: the replicas cache prefixes, as vLLM does by
        # default (--no-prefix-caching: kvcache.profile turns it off)
        kwargs["profile"] = replace(SimConfig().profile, enable_prefix_caching=True)
    try:
        return SimConfig(
            policy=policy.name if policy.frozen else policy.kind,
            min_replicas=lo,
            max_replicas=hi,
            scaler_metadata=dict(
                with_run(
                    policy.metadata,
                    plan.slo.ttft_s,
                    _startup_s(plan),
                )
            ),
            drain_s=plan.drain_s,
            seed=seed,
            **kwargs,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def simulate_plan(config: SimConfig, plan: OpenLoopPlan) -> SimResult:
    """``plan``'s requests through ``config``'s stack, after the plan's warm-up
    (``--trace-warmup-s`` or ``--arrivals-warmup-s``: replayed first, not measured)."""
    return simulate(config, plan.requests, plan.end_s, plan.warmup, plan.warmup_s)


def _plan(a: argparse.Namespace, seed: int | None) -> OpenLoopPlan:
    """The plan of one seed (a trace is the same on every seed; ``--seed`` refused)."""
    if a.trace is None and seed is not None:
        a = argparse.Namespace(**{**vars(a), "seed": seed})
    return plan_from_args(a)


def _meta(a: argparse.Namespace, plan: OpenLoopPlan, seeds: Sequence[int]) -> dict[str, Any]:
    lo, hi = _bounds(plan)
    meta = plan.scenario_meta()
    meta.update(
        {
            # No clock is read here: a simulated comparison is the same file every time.
            "created_at": None,
            "command": ["inflight", *sys.argv[1:]],
            "time_scale": TIME_SCALE,
            "units": UNITS,
            "source": "sim",
            "seeds": list(seeds),
            "min_replicas": lo,
            "max_replicas": hi,
            "startup_s": _startup_s(plan),
            "hold_deadline_s": HOLD_DEADLINE_S
            if plan.hold_deadline_s is None
            else plan.hold_deadline_s,
            "hold_deadline_peers": plan.hold_deadline_peers,
            **kvcache.meta(a),  # --kv-blocks: the replicas' KV cache
            **token_admission.meta(a),  # --token-admission: the router's
            **dispatch_flags.meta(a),  # --dispatch prefix: the router's
        }
    )
    if plan.meta.get("seed") is not None:
        meta["seed"] = None  # one per run: see "seeds"
    return meta


# --- commands ------------------------------------------------------------------------------
def _run(a: argparse.Namespace) -> int:
    plan = _plan(a, None)
    seed = a.seed if a.seed is not None else 1
    try:
        [policy] = parse_policies(a.policy, start_replicas=1)
    except ValueError as exc:
        raise UsageError(str(exc).replace("--policies", "--policy")) from None
    if not policy.frozen and policy.kind not in policy_names():
        raise UsageError(f"--policy {policy.kind}: not in this build")
    overrides = parse_scaler_metadata(a.scaler_metadata)
    if overrides:
        if policy.kind not in SCALER_POLICIES:
            raise UsageError(f"--scaler-metadata: --policy {a.policy} has no scaler trigger")
        policy = Policy(policy.name, policy.kind, policy.replicas, tuple(overrides.items()))
    config = kvcache.apply(outages.apply(sim_config(plan, policy, seed), a), a)
    config = token_admission.apply(config, a)
    config = dispatch_flags.apply(config, a)
    out = new_out_dir(a.out_dir, "results", a.force)
    result = simulate_plan(config, plan)
    workload = {**plan.scenario_meta(), "source": "sim", "time_scale": TIME_SCALE}
    body = report.write_run(out, result, plan.slo, workload, sys.argv, a.force)
    m = body["measures"]
    print(
        f"{policy.name}: {m['requests_sent']} requests, SLO attainment "
        f"{_pct(m['slo_attainment'])}, {m['replica_seconds']:.0f} replica-s "
        f"(mean {m['mean_replicas']:.2f} replicas), {m['changes']} changes; {out}"
    )
    if table := class_table({policy.name: m}):
        print(table, end="")
    return 0


def _pooled(results: Sequence[SimResult], plan: OpenLoopPlan) -> dict[str, Any]:
    """One policy over its seeds: the SLO figures of all their requests together, the mean
    of replica-seconds, changes and reversals, each seed's own measures under ``seeds``."""
    per_seed = {str(r.config.seed): report.measures(r, plan.slo) for r in results}
    outcomes: list[Outcome] = [o for r in results for o in report.outcomes(r)]
    pooled = slo_measures(outcomes, plan.slo)
    hold = results[0].config.hold_plan
    if hold is not None:  # --priority-class: attainment a class, every seed's requests
        names = [c.name for c in hold.classes]
        classes = [names[hold.class_of(q.priority)] for r in results for q in r.requests]
        pooled["by_class"] = class_measures(outcomes, classes, names, plan.slo)
    for key in ("replica_seconds", "mean_replicas", "changes", "reversals"):
        values = [float(m[key]) for m in per_seed.values() if m[key] is not None]
        pooled[key] = round(sum(values) / len(values), 3) if values else None
    errors = [m["littles_law"]["error"] for m in per_seed.values()]
    known = [e for e in errors if e is not None]
    pooled["littles_law"] = {"error": max(known)} if known else None  # the worst seed's
    pooled["seeds"] = per_seed
    pooled["slo_attainment_min"] = min(
        (m["slo_attainment"] for m in per_seed.values() if m["slo_attainment"] is not None),
        default=None,
    )
    return pooled


def _plot_run(result: SimResult, measures: dict[str, Any]) -> dict[str, Any]:
    """What ``inflight.measure.plots.openloop_timeseries_plot`` reads from a live run's document."""
    from inflight.measure.plots import SENT_S

    last = result.timeline[-1]
    return {
        "router_samples": result.inflight_samples,
        # The step function as the live timeline has it (a point per poll): the value held
        # at 0, every change, and the value held at the end.
        "timeline": [
            *(as_row(TimelineRow(p["t"], p["desired"], p["live"])) for p in result.timeline),
            as_row(TimelineRow(result.finished_s, last["desired"], last["live"])),
        ],
        "replica_field": "live",
        # A live run's request rows have OpenLoopRequest's columns; the plot reads only
        # sent_s (column SENT_S), so these rows stop there.
        "requests": [(*(None,) * SENT_S, r.sent_s) for r in result.requests],
        "scenario": {"duration_s": result.end_s},
        "slo_attainment": measures["slo_attainment"],
        "replica_seconds": measures["replica_seconds"],
    }


def _compare(a: argparse.Namespace) -> int:
    if a.scenario in CLOSED_LOOP_SCENARIOS:
        if a.router_down or a.routers != 1:
            raise UsageError("--routers, --router-down: open-loop workloads only")
        if kvcache.meta(a):  # the sweep's replicas keep the default cache
            raise UsageError("--kv-blocks, --block-size, --max-model-len: open-loop workloads only")
        if token_admission.on(a):  # the sweep's router admits on slots
            raise UsageError(f"{token_admission.FLAG}: open-loop workloads only")
        from inflight.sim.sweep_compare import main as sweep_main

        return sweep_main(a)
    for flag, value in (("--concurrency", a.concurrency), ("--requests", a.requests)):
        if value is not None:
            raise UsageError(f"{flag}: the closed-loop sweep's (--scenario sweep)")
    seeds = _seeds(a.seeds or DEFAULT_SEEDS)
    if a.seed is not None:
        raise UsageError("--seed: compare takes --seeds")
    plans = {seed: _plan(a, seed) for seed in seeds}
    first = plans[seeds[0]]
    lo, hi = _bounds(first)
    try:
        policies = resolve_policies(a.policies, hi, max(1, lo))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    unknown = [p.name for p in policies if not p.frozen and p.kind not in policy_names()]
    if unknown:
        raise UsageError(f"--policies: not in this build: {', '.join(unknown)}")
    # The static frontier (issue #24): every fixed fleet 1..max not already compared.
    names_asked = {p.name for p in policies}
    fleets = [] if getattr(a, "no_frontier", False) else parse_policies(",".join(fleet_names(hi)))
    configs = {
        p.name: {
            s: dispatch_flags.apply(
                token_admission.apply(
                    kvcache.apply(outages.apply(sim_config(plans[s], p, s), a), a), a
                ),
                a,
            )
            for s in seeds
        }
        for p in [*policies, *(f for f in fleets if f.name not in names_asked)]
    }
    out = new_out_dir(a.out_dir, "comparisons", a.force)
    runs: dict[str, dict[str, Any]] = {}
    plot_runs: dict[str, dict[str, Any]] = {}
    down_rows: dict[str, list[dict[str, Any]]] = {}
    for policy in policies:
        results = [simulate_plan(configs[policy.name][s], plans[s]) for s in seeds]
        runs[policy.name] = _pooled(results, first)
        if (settings := report.trigger_settings(results[0].config)) is not None:
            runs[policy.name]["trigger_metadata"] = settings
        if results[0].config.router_down:
            down_rows[policy.name] = outages.during(results[0], results[0].config.router_down)
        plot_runs[policy.name] = _plot_run(results[0], runs[policy.name]["seeds"][str(seeds[0])])
        _progress(policy.name, runs[policy.name])
    frontier_runs: dict[str, dict[str, Any]] = {}
    for fleet in fleets:
        if fleet.name in runs:
            frontier_runs[fleet.name] = runs[fleet.name]
            continue
        results = [simulate_plan(configs[fleet.name][s], plans[s]) for s in seeds]
        frontier_runs[fleet.name] = _pooled(results, first)
        _progress(f"{fleet.name} (frontier)", frontier_runs[fleet.name])
    frontier = {"source": "sim", "fleets": frontier_runs} if fleets else None
    comparison = build_comparison(_meta(a, first, seeds), runs, frontier)
    if down_rows:
        comparison["router_down"] = {"routers": a.routers, "policies": down_rows}
    write_new(out / "comparison.json", json.dumps(comparison, indent=2) + "\n", a.force)
    notes = [
        f"Simulated (inflight sim), seeds {', '.join(map(str, seeds))}: SLO figures over "
        "every seed's requests together; replica-seconds, changes and reversals are the "
        "seeds' mean; each seed's own figures are under runs.<policy>.seeds.",
        hold_order_note(
            first.hold_deadline_s if first.hold_deadline_s is not None else HOLD_DEADLINE_S,
            first.hold_deadline_peers,
        ),
    ]
    if frontier is not None:
        notes.append(
            f"Static frontier: fixed:1 … fixed:{hi} simulated on the same requests and seeds "
            "(pooled as the policies are); --no-frontier leaves it out."
        )
    markdown = comparison_markdown(comparison, notes=notes) + outages.markdown(down_rows, a.routers)
    if table := class_table(runs):
        markdown += f"\n## SLO attainment a priority class\n\n{table}"
    write_new(out / "comparison.md", markdown, a.force)
    from inflight.measure.plots import openloop_timeseries_plot, pareto_plot

    title = f"{first.name} (simulated)"
    pareto_plot(comparison, out / "pareto.png", title=f"{title}: replica-seconds vs SLO")
    openloop_timeseries_plot(
        plot_runs, out / "timeseries.png", title=f"{title}, seed {seeds[0]}: L and replicas"
    )
    print(markdown)
    return 0


def _progress(name: str, run: dict[str, Any]) -> None:
    print(
        f"{name}: SLO attainment {_pct(run['slo_attainment'])} "
        f"(worst seed {_pct(run['slo_attainment_min'])})",
        file=sys.stderr,
    )


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds: expected integers separated by commas, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds: one or more distinct integers, got {text!r}")
    return seeds


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _guarded(fn: Any) -> Any:
    def run(a: argparse.Namespace) -> int:
        # The control loops log every decision; the files have them. Warnings stay.
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("inflight.up").setLevel(logging.ERROR)
        try:
            return int(fn(a))
        except (UsageError, TraceError, ResultFileExists, ValueError) as exc:
            print(f"inflight sim {a.sim_command}: error: {exc}", file=sys.stderr)
            return 2

    return run


def _workload_flags(
    p: argparse.ArgumentParser, out_dir: bool = True, closed_loop: bool = False
) -> None:
    """The workload, stack and SLO flags; ``--out-dir``/``--force`` unless ``out_dir`` is
    False (``tune`` writes one file, ``--out``); ``closed_loop``: ``--scenario sweep`` too
    (``compare``)."""
    g = p.add_argument_group("workload: one of --scenario, --arrivals, --trace")
    g.add_argument(
        "--scenario",
        choices=sorted({*SCENARIOS, *PREFIX_SCENARIOS})
        + (list(CLOSED_LOOP_SCENARIOS) if closed_loop else []),
        help="inflight/workload/scenarios.py"
        + (
            "; sweep: the closed-loop sweep of inflight bench compare, then the slowing model "
            "unless --no-slowing; slowing: the slowing model only"
            if closed_loop
            else ""
        ),
    )
    g.add_argument(
        "--prompt-tokens",
        help="N | lognormal:MEAN:SIGMA | uniform:A:B (default: the scenario's, else 3000)",
    )
    g.add_argument("--max-tokens", help="as --prompt-tokens (default: the scenario's, else 300)")
    s = p.add_argument_group("stack (defaults: the scenario's, else 1..2 replicas, 30 s)")
    s.add_argument("--min-replicas", type=int)
    s.add_argument("--max-replicas", type=int)
    s.add_argument("--startup-s", type=float, help="replica start-up, seed seconds")
    s.add_argument(
        "--hold-deadline-s",
        type=float,
        help="the router's --hold-deadline-s under inflight's own policies, seed seconds "
        f"(0: FIFO; default inflight up's, {HOLD_DEADLINE_S:g}; the peers hold FIFO)",
    )
    s.add_argument(
        "--hold-deadline-peers",
        action="store_true",
        help="the peers' runs get --hold-deadline-s too: each peer's autoscaler behind "
        "inflight's router instead of its own system's FIFO (what the order alone is worth)",
    )
    add_open_loop_flags(p)
    add_trace_warmup_flag(p)
    add_arrivals_warmup_flag(p)
    if not out_dir:
        return
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--force", action="store_true", help="write into a non-empty --out-dir")


def register(subparsers: Any) -> None:
    sim = subparsers.add_parser(
        "sim",
        help="the stack's own code in virtual time: simulate policies on a workload",
        description=(__doc__ or "").split("\n\n")[0],
    )
    sub = sim.add_subparsers(dest="sim_command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="one policy on one workload")
    _workload_flags(run)
    run.add_argument(
        "--policy",
        default="saturation",
        help=f"{', '.join(policy_names())}, fixed:N or saturation[KEY=VALUE;...]",
    )
    run.add_argument(
        "--scaler-metadata",
        help="KEY=VALUE,... overrides of the trigger metadata (e.g. targetSaturation=0.8)",
    )
    outages.add_flags(run)
    kvcache.add_flags(run)
    token_admission.add_flags(run)
    dispatch_flags.add_flags(run)
    run.set_defaults(func=_guarded(_run))

    cmp = sub.add_parser("compare", help="several policies on several seeds")
    _workload_flags(cmp, closed_loop=True)
    cmp.add_argument(
        "--seeds", default=None, help=f"default {DEFAULT_SEEDS} (--scenario sweep|slowing: one, 1)"
    )
    cmp.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=None,
        help="--scenario sweep: workers per level (default: inflight bench compare's)",
    )
    cmp.add_argument(
        "--requests",
        type=int,
        default=None,
        help="--scenario sweep: requests per level (default: inflight bench compare's)",
    )
    add_slowing_flags(cmp)
    cmp.add_argument(
        "--policies",
        help="as inflight bench compare's: fixed:N, "
        f"{', '.join(policy_names())}, saturation[KEY=VALUE;...] (default: fixed:MAX, "
        "saturation, the peers, qps)",
    )
    cmp.add_argument(
        "--no-frontier",
        action="store_true",
        help="open loop: do not also simulate fixed:1 ... fixed:MAX, the static frontier each "
        "policy's frontier gap is measured against (inflight/measure/frontier.py)",
    )
    outages.add_flags(cmp)
    kvcache.add_flags(cmp)
    token_admission.add_flags(cmp)
    dispatch_flags.add_flags(cmp)
    cmp.set_defaults(func=_guarded(_compare))

    # Hooks: other modules of this package add their own subcommands when present.
    for module_name in (
        "inflight.sim.prom_trace",
        "inflight.sim.tune_cli",
        "inflight.sim.calibrate",
        "inflight.sim.generalize",
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        register_sub = getattr(module, "register", None)
        if register_sub is not None:
            register_sub(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inflight")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))
