"""``inflight sim tune``: the cheapest saturation trigger metadata that meets a user's SLO.

The workload flags are ``inflight sim run``'s (``inflight.sim.cli``: ``--scenario``, ``--arrivals``
or ``--trace``, the lengths, the SLO, the replica bounds and start-up). On every seed of
``--seeds`` the command simulates (``inflight.sim.core.simulate``; figures from
``inflight.sim.report.measures``, i.e. the bench's ``inflight.measure.slo.run_measures``):

1. the static maximum, ``fixed:MAX``: if even it misses ``--attainment`` on a seed, no
   autoscaler setting can meet the goal, and the command says so (exit 1);
2. the peers' defaults and ``saturation`` at its defaults (``inflight bench compare``'s
   open-loop policies), for the Pareto table;
3. the search of ``inflight.sim.tune.tune``: ``saturation`` with each candidate's
   ``Candidate.metadata()`` as trigger metadata, judged by its worst seed: SLO attainment
   and replica-seconds ÷ ``fixed:MAX``'s on the same seed.

It prints the chosen metadata as a ScaledObject trigger metadata block, its figures and
margin, and the Pareto table; ``--out FILE`` (never overwritten) gets the same as JSON.

Held out (``--holdout-seeds``, ``--holdout-trace-start-s``): the search sees only
``--seeds`` (or only the trace window ``--trace-start-s`` .. + ``--trace-duration-s``); the
chosen setting, ``saturation`` at its defaults and the fixed fleets ``fixed:1 … fixed:MAX``
are then run on the other seeds (or on the same length of the trace from the held-out
start), and the command reports their figures there, with each one's frontier gap
(``inflight.measure.frontier``): how the choice fares on traffic it was not chosen on.
Nothing meets the goal → exit 1 naming the best attainment found (no made-up answer).
Bad flags → exit 2 naming the flag (``inflight.sim.cli``'s guard).

The replicas' KV cache and the router's admission are ``run|compare``'s, through the same
functions (``inflight.sim.kvcache``: ``--kv-blocks``, ``--block-size``, ``--max-model-len``;
``inflight.sim.token_admission``: on unless ``--no-token-admission``): every run of the
search, the peers, the baseline and the held-out parts is simulated on them, and the header,
the printed figures and the JSON's ``workload`` say which.

The simulations go to a process pool (``--jobs``): a job is a module-level function of a
small frozen context (the workload flags and seed); each worker rebuilds a seed's plan
once and keeps it.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from inflight.measure.frontier import FleetPoint, fleet_names
from inflight.measure.frontier import judge as frontier_judge
from inflight.measure.results import ResultFileExists, write_new
from inflight.measure.slo import pareto_front
from inflight.planes.policy_catalogue import Policy, resolve_policies
from inflight.sim import kvcache, report, token_admission
from inflight.sim.cli import (
    DEFAULT_SEEDS,
    UsageError,
    _bounds,
    _guarded,
    _meta,
    _pct,
    _plan,
    _seeds,
    _workload_flags,
    sim_config,
    simulate_plan,
)
from inflight.sim.core import SimConfig, policy_names
from inflight.sim.tune import (
    SEARCHES,
    Candidate,
    Judged,
    SearchSpace,
    TuneResult,
    Verdict,
    tune,
)
from inflight.workload.plan import OpenLoopPlan
from inflight.workload.trace import TraceError

SCHEMA = "inflight.sim.tune/1"
DEFAULT_ATTAINMENT = 0.95
DEFAULT_JOBS = 2  # this project's machine has two cores
# The policies of the Pareto table besides fixed:MAX and the tuned setting: inflight bench
# compare's open-loop set (inflight.planes.policy_catalogue.OPEN_LOOP_POLICIES), those this build
# simulates.
PEER_POLICIES = "saturation,kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps"
# The flags a worker needs to rebuild a seed's plan (inflight.sim.cli._plan reads them).
WORKLOAD_KEYS = (
    "scenario",
    "arrivals",
    "trace",
    "prompt_tokens",
    "max_tokens",
    "seed",
    "slo_ttft_s",
    "slo_tpot_s",
    "drain_s",
    "min_replicas",
    "max_replicas",
    "startup_s",
    "trace_start_s",
    "trace_duration_s",
    "trace_rate_scale",
    "trace_warmup_s",
    "arrivals_warmup_s",
    "hold_deadline_s",
    "hold_deadline_peers",
    # --priority-mix, --priority-class, --max-late-s (inflight.workload.priorities)
    "priority_mix",
    "priority_class",
    "max_late_s",
    # the replicas' KV cache and the router's token admission (inflight.sim.kvcache,
    # inflight.sim.token_admission): read by _config, not by the plan
    "kv_blocks",
    "block_size",
    "max_model_len",
    "token_admission",
    # the replicas' prefix cache, on for a workload that carries block ids (inflight.sim.kvcache)
    "no_prefix_caching",
)
# The flags of tune itself (the search, the output, the held-out split) and argparse's own:
# every other flag of the command is a workload flag and must reach the workers
# (tests/unit/test_sim_tune_kv.py checks the two lists cover the parser).
TUNE_KEYS = (
    "attainment",
    "seeds",
    "out",
    "jobs",
    "search",
    "targets",
    "down_windows_s",
    "growth_horizons_s",
    "floor_fractions",
    "excursion_margins",
    "holdout_seeds",
    "holdout_trace_start_s",
    "command",
    "sim_command",
    "func",
)

_I = TypeVar("_I")
_O = TypeVar("_O")
Flags = tuple[tuple[str, Any], ...]


# --- the jobs (module level: they go to worker processes) ----------------------------------
@functools.lru_cache(maxsize=16)
def _seed_plan(flags: Flags, seed: int) -> OpenLoopPlan:
    """A seed's plan, built once per process."""
    return _plan(argparse.Namespace(**dict(flags)), seed)


def workload_flags(a: argparse.Namespace) -> Flags:
    """The workload flags of ``a`` as the workers get them (hashable: a list becomes a
    tuple)."""
    return tuple(
        (k, tuple(v) if isinstance(v, list) else v)
        for k, v in ((k, getattr(a, k)) for k in WORKLOAD_KEYS)
    )


def _config(flags: Flags, plan: OpenLoopPlan, policy: Policy, seed: int) -> SimConfig:
    """``policy``'s stack on ``plan``, as ``inflight sim run|compare`` builds it: the
    replicas' KV cache (``--kv-blocks``, ``--block-size``, ``--max-model-len``) and the
    router's token admission (on unless ``--no-token-admission``)."""
    a = argparse.Namespace(**dict(flags))
    return token_admission.apply(kvcache.apply(sim_config(plan, policy, seed), a), a)


def _figures(flags: Flags, policy: Policy, seed: int) -> tuple[float, float]:
    """One simulated run of ``policy`` on ``seed``: (SLO attainment, replica-seconds)."""
    plan = _seed_plan(flags, seed)
    result = simulate_plan(_config(flags, plan, policy, seed), plan)
    m = report.measures(result, plan.slo)
    if m["slo_attainment"] is None:  # no request: refused when the plan is built
        raise UsageError("the workload has no requests")
    return float(m["slo_attainment"]), float(m["replica_seconds"])


def _policy_job(item: tuple[Flags, Policy, int]) -> tuple[float, float]:
    return _figures(*item)


@dataclass(frozen=True)
class JudgeContext:
    """What the judge needs: the workload flags, the replicas the trigger starts from, and
    the static maximum's replica-seconds on each seed."""

    flags: Flags
    start_replicas: int
    baseline_rs: tuple[tuple[int, float], ...]


def candidate_policy(candidate: Candidate, start_replicas: int = 1) -> Policy:
    """``saturation`` with the candidate's metadata, named as ``--policies`` spells it."""
    meta = tuple(candidate.metadata().items())
    name = "saturation[" + ";".join(f"{k}={v}" for k, v in meta) + "]"
    return Policy(name, "saturation", start_replicas, meta)


def judge(ctx: JudgeContext, candidate: Candidate, seed: int) -> Verdict:
    """``inflight.sim.tune``'s judge: the candidate on ``seed`` against ``fixed:MAX`` on that
    seed."""
    attainment, rs = _figures(ctx.flags, candidate_policy(candidate, ctx.start_replicas), seed)
    return Verdict(attainment, rs / dict(ctx.baseline_rs)[seed])


def _quiet() -> None:
    """Workers log only errors (the control loops log every refused decision)."""
    logging.getLogger().setLevel(logging.ERROR)


class Runner:
    """``map`` over a process pool of ``jobs`` workers (in this process when ``jobs`` is 1)."""

    def __init__(self, pool: ProcessPoolExecutor | None) -> None:
        self.pool = pool
        self.runs = 0

    def map(self, fn: Callable[[_I], _O], items: Sequence[_I]) -> list[_O]:
        self.runs += len(items)
        if self.pool is None:
            return [fn(item) for item in items]
        return list(self.pool.map(fn, items))


@contextmanager
def runner(jobs: int) -> Iterator[Runner]:
    if jobs <= 1:
        yield Runner(None)
        return
    with ProcessPoolExecutor(max_workers=jobs, initializer=_quiet) as pool:
        yield Runner(pool)


# --- held out ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Holdout:
    """Traffic the search did not see: ``flags`` (the workload) on ``seeds``."""

    label: str
    flags: Flags
    seeds: tuple[int, ...]


def holdouts(a: argparse.Namespace, flags: Flags, seeds: Sequence[int]) -> list[Holdout]:
    """The held-out parts ``--holdout-seeds`` and ``--holdout-trace-start-s`` name; each is
    checked to be disjoint from what the search sees, and its plan built (a bad window is
    named before any run)."""
    out: list[Holdout] = []
    if a.holdout_seeds is not None:
        if a.trace is not None:
            raise UsageError(
                "--holdout-seeds: a trace is the same on every seed; hold out a part of it "
                "with --holdout-trace-start-s"
            )
        held = tuple(_seeds(a.holdout_seeds))
        if set(held) & set(seeds):
            raise UsageError(
                f"--holdout-seeds: {a.holdout_seeds} shares seeds with --seeds "
                f"{','.join(map(str, seeds))}: held-out traffic must be traffic the search "
                "did not see"
            )
        out.append(Holdout(f"seeds {','.join(map(str, held))}", flags, held))
    if a.holdout_trace_start_s is not None:
        start = a.holdout_trace_start_s
        if a.trace is None:
            raise UsageError("--holdout-trace-start-s: holds out a part of --trace; no --trace")
        if a.trace_duration_s is None:
            raise UsageError(
                "--holdout-trace-start-s: needs --trace-duration-s (without it the search "
                "sees the trace to its end, and nothing is held out)"
            )
        if start < 0:
            raise UsageError(f"--holdout-trace-start-s: must be >= 0, got {start:g}")
        tuned = a.trace_start_s or 0.0
        if abs(start - tuned) < a.trace_duration_s:
            raise UsageError(
                f"--holdout-trace-start-s: {start:g} s overlaps the tuned window "
                f"{tuned:g}-{tuned + a.trace_duration_s:g} s of the trace"
            )
        held_flags = tuple((k, start if k == "trace_start_s" else v) for k, v in flags)
        try:
            _seed_plan(held_flags, seeds[0])
        except (TraceError, ValueError) as exc:
            raise UsageError(f"--holdout-trace-start-s: {exc}") from None
        out.append(
            Holdout(
                f"trace {start:g}-{start + a.trace_duration_s:g} s", held_flags, tuple(seeds[:1])
            )
        )
    return out


def judge_holdout(
    run: Runner, holdout: Holdout, policies: Sequence[Policy], max_replicas: int, start: int
) -> dict[str, dict[str, Any]]:
    """``policies`` and ``fixed:1 … fixed:MAX`` on the held-out part: per policy, SLO
    attainment and replica-seconds ÷ ``fixed:MAX``'s (means over its seeds), the frontier
    gap and the fixed fleets that dominate it."""
    fleets = resolve_policies(",".join(fleet_names(max_replicas)), max_replicas, start)
    every = [*fleets, *policies]
    items = [(holdout.flags, p, s) for p in every for s in holdout.seeds]
    figs = run.map(_policy_job, items)
    n = len(holdout.seeds)
    per = {p.name: figs[i * n : (i + 1) * n] for i, p in enumerate(every)}
    top = per[fleets[-1].name]
    means = {
        name: (
            sum(att for att, _ in rows) / n,
            sum(rs / top[k][1] for k, (_, rs) in enumerate(rows)) / n,
        )
        for name, rows in per.items()
    }
    points = [
        FleetPoint(f.name, i + 1, means[f.name][1], means[f.name][0]) for i, f in enumerate(fleets)
    ]
    out: dict[str, dict[str, Any]] = {}
    for p in policies:
        att, ratio = means[p.name]
        v = frontier_judge(points, ratio, att)
        out[p.name] = {
            "slo_attainment": att,
            "replica_seconds_ratio": ratio,
            "frontier_gap": v.gap,
            "dominated_by_fixed": list(v.dominated_by),
        }
    return out


def holdout_table(results: dict[str, dict[str, dict[str, Any]]], baseline: str) -> str:
    """Markdown: per held-out part and policy, its figures and frontier gap."""
    lines = [
        f"| held out | policy | SLO attainment | replica-s ÷ {baseline} | frontier gap | "
        "dominated by |",
        "|---|---|---:|---:|---:|---|",
    ]
    for label, runs in results.items():
        for name, r in runs.items():
            lines.append(
                f"| {label} | {name} | {_pct(r['slo_attainment'])} | "
                f"{r['replica_seconds_ratio']:.3f} | {100 * r['frontier_gap']:+.1f} | "
                f"{', '.join(r['dominated_by_fixed'][:1]) or '—'} |"
            )
    return "\n".join(lines) + "\n"


# --- flags ---------------------------------------------------------------------------------
def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag}: expected numbers separated by commas, got {text!r}") from None
    if not values:
        raise UsageError(f"{flag}: no value in {text!r}")
    return values


def search_space(
    a: argparse.Namespace, startup_s: float, min_replicas: int, slo_ttft_s: float | None = None
) -> SearchSpace:
    """``SearchSpace.for_startup``, narrowed by ``--targets``, ``--down-windows-s`` and
    ``--growth-horizons-s`` where given; every candidate states ``slo_ttft_s``, the TTFT SLO
    the search simulates, as its ``sloTtftSeconds``."""
    space = SearchSpace.for_startup(startup_s, min_replicas)
    targets = _floats(a.targets, "--targets")
    downs = _floats(a.down_windows_s, "--down-windows-s")
    growths = _floats(a.growth_horizons_s, "--growth-horizons-s")
    floors = _floats(a.floor_fractions, "--floor-fractions")
    margins = _floats(a.excursion_margins, "--excursion-margins")
    if margins is not None and not all(1 <= m <= 100 for m in margins):
        raise UsageError(
            f"--excursion-margins: each must be from 1 to 100, got {a.excursion_margins!r}"
        )
    if floors is not None and not all(0 <= f <= 1 for f in floors):
        raise UsageError(f"--floor-fractions: each must be in [0, 1], got {a.floor_fractions!r}")
    if targets is not None and not all(0 < t <= 1 for t in targets):
        raise UsageError(f"--targets: each target must be in (0, 1], got {a.targets!r}")
    for flag, values in (("--down-windows-s", downs), ("--growth-horizons-s", growths)):
        if values is not None and any(v < 0 for v in values):
            raise UsageError(f"{flag}: seconds must be >= 0, got {values}")
    return SearchSpace(
        targets=targets or space.targets,
        down_windows_s=downs or space.down_windows_s,
        growth_horizons_s=growths or space.growth_horizons_s,
        up_windows_s=space.up_windows_s,
        activations=space.activations,
        floor_fractions=floors or space.floor_fractions,
        floor_window_s=space.floor_window_s,
        startup_s=space.startup_s,
        excursion_margins=margins or space.excursion_margins,
        slo_ttft_s=slo_ttft_s,
    )


# --- output --------------------------------------------------------------------------------
def stack_line(a: argparse.Namespace, config: SimConfig) -> str:
    """The replicas' KV cache and the router's admission, as the header states them."""
    p = config.profile
    cache = (
        f"KV cache {p.kv_blocks} blocks of {p.block_size} tokens a replica "
        f"({p.kv_cache_size_tokens} tokens, context {p.max_model_len})"
        if kvcache.meta(a)
        else f"KV cache the default ({p.kv_cache_size_tokens} tokens a replica: never binds)"
    )
    admission = "tokens and slots" if token_admission.enabled(a) else "slots only"
    return f"{cache}; the router admits on {admission} under saturation and fixed:N"


def metadata_yaml(metadata: dict[str, str]) -> str:
    """The trigger metadata as the ScaledObject spells it (values quoted strings)."""
    lines = [
        "# ScaledObject spec.triggers[0].metadata (manifests/base/scaledobject.yaml): set",
        "# these keys, keep the others (scalerAddress, selector, policy, slotsPerReplica).",
        "metadata:",
        *(f'  {key}: "{value}"' for key, value in metadata.items()),
    ]
    return "\n".join(lines) + "\n"


def _worst(per_seed: Iterable[tuple[float, float]]) -> dict[str, float]:
    rows = list(per_seed)
    return {
        "slo_attainment": min(a for a, _ in rows),
        "replica_seconds_ratio": max(r for _, r in rows),
    }


def pareto_table(rows: dict[str, dict[str, float]], baseline: str) -> tuple[str, set[str]]:
    """Markdown: policy, worst-seed attainment and ratio, ★ on the Pareto front."""
    front = pareto_front(
        {n: (r["replica_seconds_ratio"], r["slo_attainment"]) for n, r in rows.items()}
    )
    lines = [
        f"| policy | SLO attainment (worst seed) | replica-s ÷ {baseline} (worst seed) | front |",
        "|---|---:|---:|:-:|",
    ]
    for name, r in rows.items():
        star = "★" if name in front else ""
        lines.append(
            f"| {name} | {_pct(r['slo_attainment'])} | {r['replica_seconds_ratio']:.3f} | {star} |"
        )
    return "\n".join(lines) + "\n", front


def _judged_json(j: Judged, seeds: Sequence[int], goal: float) -> dict[str, Any]:
    return {
        "metadata": j.candidate.metadata(),
        "slo_attainment": j.slo_attainment,
        "replica_seconds_ratio": j.replica_seconds_ratio,
        "meets_goal": j.meets(goal),
        "seeds": {
            str(s): {
                "slo_attainment": v.slo_attainment,
                "replica_seconds_ratio": v.replica_seconds_ratio,
            }
            for s, v in zip(seeds, j.verdicts, strict=True)
        },
    }


# --- the command ---------------------------------------------------------------------------
def _tune(a: argparse.Namespace) -> int:
    seeds = _seeds(a.seeds)
    if a.seed is not None:
        raise UsageError("--seed: tune takes --seeds")
    goal = a.attainment
    if not 0 < goal <= 1:
        raise UsageError(f"--attainment: must be in (0, 1], got {goal:g}")
    if a.jobs < 1:
        raise UsageError(f"--jobs: must be >= 1, got {a.jobs}")
    if a.search not in SEARCHES:
        raise UsageError(f"--search: must be one of {', '.join(SEARCHES)}, got {a.search!r}")
    out: Path | None = a.out
    if out is not None and out.exists():
        raise UsageError(f"--out: {out} exists; results are never overwritten: choose a new name")
    try:
        first = _plan(a, seeds[0])
    except TraceError as exc:
        raise UsageError(f"--trace: {exc}") from None
    lo, hi = _bounds(first)
    startup_s = SimConfig().startup_s if first.startup_s is None else first.startup_s
    space = search_space(a, startup_s, lo, first.slo.ttft_s)
    flags = workload_flags(a)
    start = max(1, lo)
    [fixed] = resolve_policies("fixed:MAX", hi, start)
    peers = [
        p
        for p in resolve_policies(PEER_POLICIES, hi, start)
        if p.frozen or p.kind in policy_names()
    ]
    # bad bounds, start-up or KV cache: named before any run
    stack = _config(flags, first, fixed, seeds[0])
    held = holdouts(a, flags, seeds)
    logging.getLogger().setLevel(logging.ERROR)
    print(
        f"inflight sim tune: {first.name}, {lo}-{hi} replicas, start-up {startup_s:g} s, "
        f"seeds {','.join(map(str, seeds))}: goal {_pct(goal)} of requests within TTFT "
        f"{first.slo.ttft_s:g} s and TPOT {first.slo.tpot_s:g} s; {stack_line(a, stack)}",
        file=sys.stderr,
    )
    with runner(a.jobs) as run:
        base = run.map(_policy_job, [(flags, fixed, s) for s in seeds])
        worst_seed, (worst_att, _) = min(zip(seeds, base, strict=True), key=lambda x: x[1][0])
        if worst_att < goal:
            print(
                f"inflight sim tune: even the static maximum, {fixed.name} (every replica up "
                f"from the start), reaches an SLO attainment of only {_pct(worst_att)} on seed "
                f"{worst_seed} (goal --attainment {_pct(goal)}): no autoscaler setting can meet "
                "it; relax --slo-ttft-s/--slo-tpot-s or --attainment, or raise --max-replicas",
                file=sys.stderr,
            )
            return 1
        baseline_rs = tuple((s, rs) for s, (_, rs) in zip(seeds, base, strict=True))
        ctx = JudgeContext(flags, start, baseline_rs)
        result = tune(
            functools.partial(judge, ctx), space, goal, seeds, map_fn=run.map, search=a.search
        )
        if result.best is None:
            return _no_answer(result)
        peer_figs = run.map(_policy_job, [(flags, p, s) for p in peers for s in seeds])
        tuned_policy = candidate_policy(result.best.candidate, start)
        default = [p for p in peers if p.name == "saturation"]
        held_out = {
            h.label: judge_holdout(run, h, [tuned_policy, *default], hi, start) for h in held
        }
        total = run.runs
    print(f"inflight sim tune: {total} simulations", file=sys.stderr)
    rs_of = dict(baseline_rs)
    n = len(seeds)
    peer_rows = {
        p.name: _worst(
            (att, rs / rs_of[s])
            for (att, rs), s in zip(peer_figs[i * n : (i + 1) * n], seeds, strict=True)
        )
        for i, p in enumerate(peers)
    }
    best = result.best
    tuned_name = candidate_policy(best.candidate).name
    rows = {
        tuned_name: {
            "slo_attainment": best.slo_attainment,
            "replica_seconds_ratio": best.replica_seconds_ratio,
        },
        **peer_rows,
        fixed.name: _worst((att, 1.0) for att, _ in base),
    }
    table, front = pareto_table(rows, fixed.name)
    metadata = best.candidate.metadata()
    margin = best.slo_attainment - goal
    print(metadata_yaml(metadata))
    print(
        f"SLO attainment {_pct(best.slo_attainment)} (worst of seeds "
        f"{','.join(map(str, seeds))}; goal {_pct(goal)}, margin {100 * margin:+.1f} points); "
        f"replica-seconds {best.replica_seconds_ratio:.3f} of {fixed.name}'s (worst seed)\n"
    )
    print(f"Simulated stack: {stack_line(a, stack)}\n")
    if result.crossings:
        print(crossings_note(result) + "\n")
    print(table)
    if held_out:
        print("Held out (not seen by the search; means over the held-out seeds):\n")
        print(holdout_table(held_out, fixed.name))
    if out is not None:
        body = {
            "schema": SCHEMA,
            "goal": goal,
            "seeds": seeds,
            "workload": _meta(a, first, seeds),
            "metadata": metadata,
            "slo_attainment": best.slo_attainment,
            "replica_seconds_ratio": best.replica_seconds_ratio,
            "margin": margin,
            "baseline": {
                "policy": fixed.name,
                "seeds": {
                    str(s): {"slo_attainment": att, "replica_seconds": rs}
                    for s, (att, rs) in zip(seeds, base, strict=True)
                },
            },
            "peers": peer_rows,
            "pareto_front": sorted(front),
            "space": {
                "targets": list(space.targets),
                "down_windows_s": list(space.down_windows_s),
                "growth_horizons_s": list(space.growth_horizons_s),
                "up_windows_s": list(space.up_windows_s),
                "activations": list(space.activations),
                "floor_fractions": list(space.floor_fractions),
                "floor_window_s": space.floor_window_s,
                "excursion_margins": list(space.excursion_margins),
            },
            "holdout": [
                {
                    "label": h.label,
                    "seeds": list(h.seeds),
                    "trace_start_s": dict(h.flags).get("trace_start_s"),
                    "runs": held_out[h.label],
                }
                for h in held
            ],
            "simulations": total,
            "search": result.search,
            "crossings": [
                {"meets": hi.metadata(), "misses": lo.metadata()} for hi, lo in result.crossings
            ],
            "judged": [_judged_json(j, seeds, goal) for j in result.judged],
        }
        try:
            write_new(out, json.dumps(body, indent=2) + "\n", force=False)
        except ResultFileExists as exc:
            raise UsageError(f"--out: {exc}") from None
        print(f"inflight sim tune: wrote {out}", file=sys.stderr)
    return 0


def crossings_note(result: TuneResult) -> str:
    """What the search saw where attainment was not monotone in targetSaturation."""
    hi, lo = result.crossings[0]
    where = "on the answer's line" if result.search == "bisect" else "in the grid"
    more = (
        "; --search grid judges every target of every combination"
        if result.search == "bisect"
        else ""
    )
    return (
        f"Note: SLO attainment was not monotone in targetSaturation {where} "
        f"({len(result.crossings)} pair(s); e.g. {hi.target_saturation:g} meets the goal and "
        f"{lo.target_saturation:g} misses it, other knobs equal): the bisection's assumption "
        f"does not hold on this traffic{more}."
    )


def _no_answer(result: TuneResult) -> int:
    top = max(result.judged, key=lambda j: (j.slo_attainment, -j.replica_seconds_ratio))
    settings = ", ".join(f"{k}={v}" for k, v in top.candidate.metadata().items())
    print(
        f"inflight sim tune: no setting tried meets the goal {_pct(result.attainment_goal)}: "
        f"the best worst-seed SLO attainment is {_pct(top.slo_attainment)} ({settings}); "
        "lower --targets, longer --down-windows-s/--growth-horizons-s, or relax the SLO",
        file=sys.stderr,
    )
    return 1


def register(sub: Any) -> None:
    """``inflight sim tune`` (``inflight.sim.cli.register`` calls this)."""
    p = sub.add_parser(
        "tune",
        help="the cheapest saturation trigger metadata that meets an SLO attainment",
        description=(__doc__ or "").split("\n\n")[0],
    )
    _workload_flags(p, out_dir=False)
    kvcache.add_flags(p)  # the replicas' KV cache, as sim run|compare's
    token_admission.add_flags(p)  # the router's token admission, on by default
    p.add_argument(
        "--attainment",
        type=float,
        default=DEFAULT_ATTAINMENT,
        help="the goal: the fraction of requests within the SLO on the worst seed "
        f"(default {DEFAULT_ATTAINMENT})",
    )
    p.add_argument("--seeds", default=DEFAULT_SEEDS, help=f"default {DEFAULT_SEEDS}")
    p.add_argument("--out", type=Path, help="write the answer as JSON (never overwritten)")
    p.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        help=f"simulations run in parallel processes (default {DEFAULT_JOBS})",
    )
    p.add_argument(
        "--search",
        default="bisect",
        help="bisect: bisection over the targets, then every target on the answer's line "
        "(default); grid: every target of every combination (about 3x the runs)",
    )
    g = p.add_argument_group("search space (default: inflight.sim.tune.SearchSpace.for_startup)")
    g.add_argument("--targets", help="targetSaturation values, e.g. 1,0.9,0.8")
    g.add_argument("--down-windows-s", help="scaleDownWindowSeconds values, e.g. 60,120,300")
    g.add_argument(
        "--growth-horizons-s",
        help="growthHorizonSeconds values (default 0, the start-up, the start-up + 60)",
    )
    g.add_argument(
        "--floor-fractions",
        help="floorFraction values (the floor learned from recent peaks; 0: off), e.g. 0,0.5",
    )
    g.add_argument(
        "--excursion-margins",
        help="excursionMargin values (how much longer or higher than recent excursions a "
        "held one may be, with startupSeconds the start-up simulated), e.g. 1,1.5",
    )
    h = p.add_argument_group(
        "held out: report the chosen setting on traffic the search did not see"
    )
    h.add_argument(
        "--holdout-seeds",
        help="seeds of --scenario/--arrivals that the search does not see, e.g. 4,5",
    )
    h.add_argument(
        "--holdout-trace-start-s",
        type=float,
        help="with --trace and --trace-duration-s: a window of the same length from this "
        "many seconds after the trace's first request, disjoint from the tuned one",
    )
    p.set_defaults(func=_guarded(_tune))
