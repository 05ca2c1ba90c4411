"""``inflight bench compare --scenario ramp|spike|diurnal`` (or ``--arrivals``/``--trace``):
the same open-loop requests on a fresh ``inflight up`` per policy, judged on SLO
attainment against replica-seconds (issue #13, item 4).

Every policy gets the scenario's replica bounds and start-up (``inflight up --min-replicas
--max-replicas --startup-s``) and exactly the same planned requests (one seed). Default
policies: :data:`inflight.planes.policy_catalogue.OPEN_LOOP_POLICIES` with MAX = the scenario's
maximum, so the ratio has its static-maximum baseline. It writes into a new ``--out-dir``:

* ``<policy>.json.gz``: each run, gzipped (every request, router sample and timeline point, the
  measures; ``inflight.bench.openloop.run``);
* ``comparison.json`` / ``comparison.md``: :mod:`inflight.measure.openloop_report` (the simulator
  writes the same);
* ``pareto.png``: replica-seconds ratio against SLO attainment, the front highlighted;
* ``timeseries.png``: per policy, L, replicas (existing and desired) and arrivals;
* the static frontier, ``fixed:1 … fixed:max`` (``--frontier sim|live|off``, default sim:
  :mod:`inflight.bench.openloop.frontier`): each policy's frontier gap in ``comparison.json``
  and ``comparison.md``, the frontier on ``pareto.png``.

Default time-scale: :data:`OPEN_LOOP_TIME_SCALE` (why: its comment).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inflight import interrupt
from inflight.bench.comparison import Progress, interruptible, on_stack, unclean_reason
from inflight.bench.openloop.frontier import (
    DEFAULT_FRONTIER,
    SIM_DIR,
    run_sim_frontier,
)
from inflight.bench.openloop.run import (
    priority_up_args,
    read_timeline_rows,
    run_document,
    send_plan,
)
from inflight.bench.openloop.sender import OpenLoopRun
from inflight.bench.stack import Stack, StackError
from inflight.bench.target import BenchError
from inflight.control.hold_order import HOLD_DEADLINE_S, hold_order_note
from inflight.measure.classes import class_table
from inflight.measure.frontier import fleet_names
from inflight.measure.openloop_report import build_comparison, comparison_markdown
from inflight.measure.results import ResultFileExists, dumps, new_out_dir
from inflight.planes.policy_catalogue import Policy, parse_policies, resolve_policies
from inflight.workload.plan import (
    DEFAULT_MAX_REPLICAS,
    DEFAULT_MIN_REPLICAS,
    OpenLoopPlan,
    plan_from_args,
)

# Seed → wall: 0.1 (a 1,500 s ramp takes 150 s of wall per policy). Measured on this
# 2-core machine (`inflight bench emulator --time-scale 0.1 --stream --replicas 8`): 0.987
# of the model's throughput at concurrency 8 and 0.999 at 32 (the peak of `ramp` is 5
# req/s ≈ 22 in flight over 8 replicas), 34 % of one core for the 8 emulators. With the
# stack's start-up (3 replicas × 100 s seed = 10 s wall), the drain and the stop, one
# policy of `ramp` takes ≈ 3 min and 8 policies ≈ 25 min (≤ 30 min, issue #13); `diurnal`
# (1,800 s) ≈ 28 min.
OPEN_LOOP_TIME_SCALE = 0.1


def main(args: argparse.Namespace) -> int:
    return interruptible(_main, args)


def _main(args: argparse.Namespace, progress: Progress) -> int:
    notes: list[str] = []
    try:
        plan = plan_from_args(args)
        max_r = plan.max_replicas if plan.max_replicas is not None else DEFAULT_MAX_REPLICAS
        min_r = plan.min_replicas if plan.min_replicas is not None else DEFAULT_MIN_REPLICAS
        if max_r < max(1, min_r):
            raise ValueError(f"--max-replicas: must be >= 1 and >= {min_r}, got {max_r}")
        policies = resolve_policies(args.policies, max_r, max(1, min_r))
        frontier_mode = getattr(args, "frontier", None) or DEFAULT_FRONTIER
        asked = {p.name for p in policies}
        live_fleets = (
            [f for f in parse_policies(",".join(fleet_names(max_r))) if f.name not in asked]
            if frontier_mode == "live"
            else []
        )
        time_scale = args.time_scale or OPEN_LOOP_TIME_SCALE
        extra_up = [] if plan.startup_s is None else ["--startup-s", f"{plan.startup_s:g}"]
        if plan.hold_deadline_s is not None:
            extra_up += ["--hold-deadline-s", f"{plan.hold_deadline_s:g}"]
        classes_up = priority_up_args(plan)  # to the stacks whose router holds requests
        out = new_out_dir(args.out_dir, "comparisons", args.force)
        state_root: Path = args.state_root or Path("state") / "bench" / out.name
    except (ValueError, ResultFileExists, BenchError) as exc:
        print(f"inflight bench compare: {exc}", file=sys.stderr)
        return 2
    hold_deadline_s = HOLD_DEADLINE_S if plan.hold_deadline_s is None else plan.hold_deadline_s
    notes.append(hold_order_note(hold_deadline_s))
    fifo = [p.name for p in policies if classes_up and not _router_holds(p)]
    if fifo:
        notes.append(
            f"--priority-class went to every stack but {', '.join(fifo)}: their router holds "
            "no request (they queue in the replicas, as those systems do), so none is ordered "
            "or shed by class there."
        )
    started = datetime.now(UTC)
    t_wall = time.monotonic()
    runs: dict[str, dict[str, Any]] = {}
    fleet_runs: dict[str, dict[str, Any]] = {}
    progress.out, progress.state_root = out, state_root
    frontier: dict[str, Any] | None = None
    if frontier_mode == "sim":  # seconds of CPU; first, so a bad workload shows at once
        progress.running = "the simulated frontier"
        frontier = run_sim_frontier(args, plan, max(1, min_r), max_r, out)
        progress.running = None
        if frontier.get("note"):
            notes.append(f"The static frontier could not be simulated: {frontier['note']}")
    try:
        for policy in [*policies, *live_fleets]:
            progress.running = policy.name
            up = extra_up + (classes_up if _router_holds(policy) else [])
            doc = _one(policy, args, plan, time_scale, state_root / policy.slug, max_r, min_r,
                       up)  # fmt: skip
            doc["file"] = f"{policy.slug}.json.gz"
            with interrupt.deferred():
                progress.write(out / doc["file"], dumps(doc), args.force)
                progress.running = None
            (runs if policy.name in asked else fleet_runs)[policy.name] = doc
    except (StackError, BenchError, ResultFileExists, ValueError) as exc:
        print(f"inflight bench compare: {exc}", file=sys.stderr)
        return 2
    if frontier_mode == "live":
        every = {**runs, **fleet_runs}
        frontier = {"source": "live",
                    "fleets": {n: every[n] for n in fleet_names(max_r) if n in every}}  # fmt: skip
    elif frontier_mode == "sim":
        notes.append(
            f"The static frontier (fixed:1 … fixed:{max_r}) is simulated on the same requests, "
            f"not run live (--frontier sim): {SIM_DIR}/ holds its comparison"
        )
    fields = {d["replica_field"] for d in runs.values()}
    if fields != {"live"}:
        notes.append(
            "timeline.jsonl had no 'live' field (replicas that exist, starting and draining "
            "included): replica-seconds integrate 'ready' replicas, which undercounts start-up"
        )
    meta = {
        "created_at": started.isoformat(timespec="seconds"),
        "command": ["inflight", *sys.argv[1:]],
        "time_scale": time_scale,
        "units": "seed time: wall seconds / time_scale; rates per seed second",
        "wall_s": round(time.monotonic() - t_wall, 1),
        "source": "live",
        **plan.scenario_meta(),
        "hold_deadline_s": hold_deadline_s,
        "min_replicas": min_r,
        "max_replicas": max_r,
        "startup_up_args": extra_up,
        "notes": notes,
    }
    comparison = build_comparison(meta, runs, frontier)
    md = comparison_markdown(comparison, notes=notes)
    if table := class_table({**runs, **fleet_runs}):
        md += f"\n## SLO attainment a priority class\n\n{table}"
    with interrupt.deferred():  # both or, interrupted before, neither
        progress.write(out / "comparison.json", dumps(comparison), args.force)
        progress.write(out / "comparison.md", md, args.force)
        progress.compared = True
    from inflight.measure.plots import openloop_timeseries_plot, pareto_plot

    pareto_plot(
        comparison,
        out / "pareto.png",
        title=f"{plan.name}: replica-seconds against SLO attainment · time-scale {time_scale}",
    )
    openloop_timeseries_plot(runs, out / "timeseries.png", title=f"{plan.name}: L, replicas "
                             f"and arrivals · time-scale {time_scale}")  # fmt: skip
    print(md)
    return 0 if all(d["valid"] for d in [*runs.values(), *fleet_runs.values()]) else 1


def _router_holds(policy: Policy) -> bool:
    """Whether ``inflight up --policy`` runs its router with ``--hold-when-full`` (what
    ``--priority-class`` orders): always but under the peers that queue in the replicas."""
    from inflight.planes.peers.catalog import PEERS

    peer = PEERS.get(policy.kind)
    return peer is None or peer.router_hold


def _one(
    policy: Policy,
    args: argparse.Namespace,
    plan: OpenLoopPlan,
    time_scale: float,
    state_dir: Path,
    max_replicas: int,
    min_replicas: int,
    extra_up: list[str],
) -> dict[str, Any]:
    """One policy on a fresh stack: its run document, with the stack's facts."""

    def send(stack: Stack) -> tuple[OpenLoopRun, str]:
        return asyncio.run(
            send_plan(
                router_url=stack.router_url,
                plan=plan,
                time_scale=time_scale,
                model=args.model,
                sample_interval_s=args.sample_interval_s,
                progress_prefix=f"[{policy.name}] ",
                progress=not args.no_progress,
            )
        )

    (run, model), extra = on_stack(
        policy,
        args,
        time_scale,
        state_dir,
        policy.name,
        send,
        max_replicas=max_replicas,
        min_replicas=None if policy.frozen else min_replicas,
        extra_args=extra_up,
    )
    doc = run_document(
        run,
        plan,
        read_timeline_rows(state_dir / "timeline.jsonl"),
        policy=policy.name,
        frozen=policy.frozen,
        url=str(extra["stack"]["stack_info"].get("router_url")),
        model=model,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        extra=extra,
    )
    if (why := unclean_reason(extra["stack"])) is not None:
        doc["invalid_reasons"].append(why)
        doc["valid"] = False
    if (settings := extra["stack"]["stack_info"].get("trigger_metadata")) is not None:
        doc["trigger_metadata"] = settings  # every key its scaler ran with, resolved
    return doc
