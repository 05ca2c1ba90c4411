"""``inflight bench compare``: one ``inflight up`` per policy, the same sweep on each, one verdict.

For each policy it starts a fresh stack, runs warm-up + sweep, stops the stack and proves
nothing it started is left (PIDs gone, ports free); then, for ``qps`` and ``saturation``,
the slowing-model scenario on a fresh stack: constant concurrency while answers get
longer, so λ falls while L stays at capacity. It writes into a new ``--out-dir``:

* ``<policy>.json.gz`` / ``<policy>.md``: each run (raw records, samples, timeline), the
  JSON gzipped (``inflight.measure.results.read_json`` reads it);
* ``slowing-<policy>.json.gz``: each slowing-model run;
* ``comparison.json`` / ``comparison.md``: the table, the reproduction checks, CPU;
* ``sweep.png``, ``timeseries.png``, ``slowing.png``.

Each stack's state dir (logs, timeline, Prometheus data) goes under ``--state-root``
(default ``state/bench/<out-dir name>``), outside the results folder.

That is ``--scenario sweep`` (the default; ``slowing``: the slowing-model runs only). The
open-loop scenarios (``--scenario ramp|spike|diurnal``, ``--arrivals``, ``--trace``) are
``inflight.bench.openloop.compare``; both start and stop each stack with
:func:`inflight.bench.comparison.on_stack`.

Default time-scale: ``inflight.workload.sweep.DEFAULT_TIME_SCALE`` (chosen so the whole
comparison takes ≤ 15 minutes on a 2-core machine while it stays unsaturated; see
docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inflight import interrupt
from inflight.bench.closedloop.run import sweep_to_result
from inflight.bench.comparison import Progress, interruptible, on_stack, unclean_reason
from inflight.bench.stack import Stack, StackError
from inflight.bench.target import BenchError
from inflight.control.hold_order import HOLD_DEADLINE_S
from inflight.measure.repro import reproduced, reproduction_checks
from inflight.measure.results import ResultFileExists, RunResult, dumps, new_out_dir
from inflight.measure.table import checks_list, comparison_table, run_table
from inflight.planes.policy_catalogue import CLOSED_LOOP_POLICIES, Policy, parse_policies
from inflight.workload import slowing as slowing_model
from inflight.workload.sweep import (
    DEFAULT_MAX_REPLICAS,
    DEFAULT_TIME_SCALE,
    Level,
    closed_loop_args,
    sweep_levels,
)


def _one(
    policy: Policy,
    args: argparse.Namespace,
    time_scale: float,
    levels: list[Level],
    state_dir: Path,
    label: str,
    gap_s: float | None = None,
) -> RunResult:
    def sweep(stack: Stack) -> RunResult:
        return asyncio.run(
            sweep_to_result(
                router_url=stack.router_url,
                time_scale=time_scale,
                levels=levels,
                args=args,
                frozen=policy.frozen,
                policy=policy.name,
                timeline_path=state_dir / "timeline.jsonl",
                progress_prefix=f"[{label}] ",
                gap_s=gap_s,
            )
        )

    result, extra = on_stack(
        policy, args, time_scale, state_dir, label, sweep, max_replicas=args.max_replicas
    )
    reasons = list(result.invalid_reasons)
    if (why := unclean_reason(extra["stack"])) is not None:
        reasons.append(why)
    return dataclasses.replace(
        result, extra={**result.extra, **extra}, invalid_reasons=tuple(reasons)
    )


def main(args: argparse.Namespace) -> int:
    """``inflight bench compare --scenario sweep|slowing`` (the open-loop scenarios:
    :func:`inflight.bench.openloop.compare.main`)."""
    return interruptible(_closed_loop, args)


def _closed_loop(args: argparse.Namespace, progress: Progress) -> int:
    try:
        args = closed_loop_args(args)
        for flag, attr in (("--min-replicas", "min_replicas"), ("--startup-s", "startup_s"),
                           ("--frontier", "frontier")):  # fmt: skip
            if getattr(args, attr, None) is not None:
                raise ValueError(f"{flag}: open-loop only (--scenario ramp|spike|diurnal, "
                                 "--arrivals or --trace)")  # fmt: skip
        if args.max_replicas is None:
            args.max_replicas = DEFAULT_MAX_REPLICAS
        policies = parse_policies(args.policies or CLOSED_LOOP_POLICIES)
        time_scale = args.time_scale or DEFAULT_TIME_SCALE
        out = new_out_dir(args.out_dir, "comparisons", args.force)
        state_root: Path = args.state_root or Path("state") / "bench" / out.name
        levels = list(sweep_levels(args.concurrency, args.requests, args.max_tokens))
        slow = slowing_model.level_from_args(args)
    except (ValueError, ResultFileExists, BenchError) as exc:
        print(f"inflight bench compare: {exc}", file=sys.stderr)
        return 2
    sweep, with_slowing = slowing_model.scenario_runs(
        getattr(args, "scenario", None), args.no_slowing
    )
    started = datetime.now(UTC)
    t_wall = time.monotonic()
    runs: dict[str, dict[str, Any]] = {}
    slowing: dict[str, dict[str, Any]] = {}
    progress.out, progress.state_root = out, state_root
    slowing_files: dict[str, str] = {}
    try:
        for policy in policies if sweep else ():
            progress.running = policy.name
            result = _one(policy, args, time_scale, levels, state_root / policy.slug, policy.name)
            doc = result.to_json()
            with interrupt.deferred():  # both files or, interrupted before, neither
                progress.write(out / f"{policy.slug}.json.gz", dumps(doc), args.force)
                progress.write(out / f"{policy.slug}.md", run_table(doc), args.force)
                progress.running = None
            runs[policy.name] = doc
        if with_slowing:
            for policy in slowing_model.slowing_policies(policies):
                progress.running = f"slowing {policy.name}"
                result = _one(
                    policy,
                    args,
                    time_scale,
                    [slow],
                    state_root / f"slowing-{policy.slug}",
                    f"slowing {policy.name}",
                    gap_s=slowing_model.GAP_S,
                )
                doc = result.to_json()
                doc["slowing_phases"] = slowing_model.phases_field(slow)
                slowing_files[policy.name] = slowing_model.file_name(policy) + ".gz"
                with interrupt.deferred():
                    progress.write(out / slowing_files[policy.name], dumps(doc), args.force)
                    progress.running = None
                slowing[policy.name] = doc
    except (StackError, BenchError, ResultFileExists, ValueError) as exc:
        print(f"inflight bench compare: {exc}", file=sys.stderr)
        return 2
    wall_s = time.monotonic() - t_wall
    checks = reproduction_checks(runs, slowing)
    summary = {
        "schema": "inflight-bench-compare/1",
        "created_at": started.isoformat(timespec="seconds"),
        "command": ["inflight", *sys.argv[1:]],
        "time_scale": time_scale,
        "units": "seed time: wall seconds / time_scale; rates per seed second",
        "wall_s": round(wall_s, 1),
        # inflight up's default for its own policies (inflight.control.hold_order)
        "hold_deadline_s": HOLD_DEADLINE_S,
        "policies": [p.name for p in policies],
        "checks": checks,
        "reproduced": reproduced(checks),
        "runs": {
            name: {
                "file": f"{name.replace(':', '')}.json.gz",
                "valid": d["valid"],
                "invalid_reasons": d["invalid_reasons"],
                "levels": d["levels"],
                "cpu": d.get("cpu"),
                "stack": {k: v for k, v in d.get("stack", {}).items() if k != "stack_info"},
            }
            for name, d in runs.items()
        },
        "slowing": {
            name: {
                "file": slowing_files[name],
                "valid": d["valid"],
                "invalid_reasons": d["invalid_reasons"],
                "cpu": d.get("cpu"),
            }
            for name, d in slowing.items()
        },
    }
    md = _markdown(summary, runs, slowing, time_scale, wall_s, started)
    with interrupt.deferred():  # both or, interrupted before, neither
        progress.write(out / "comparison.json", dumps(summary), args.force)
        progress.write(out / "comparison.md", md, args.force)
        progress.compared = True
    from inflight.measure.plots import sweep_plot, timeseries_plot

    if runs:
        sweep_plot(runs, out / "sweep.png", title=f"closed-loop sweep · time-scale {time_scale}")
        timeseries_plot(
            runs, out / "timeseries.png", title="L (router), λ (client) and replicas over the sweep"
        )
    if slowing:
        timeseries_plot(
            slowing,
            out / "slowing.png",
            title=slowing_model.PLOT_TITLE,
            phases=slowing_model.plot_phases(slow),
        )
    print(md)
    return 0 if summary["reproduced"] else 1


def _markdown(
    summary: dict[str, Any],
    runs: dict[str, dict[str, Any]],
    slowing: dict[str, dict[str, Any]],
    time_scale: float,
    wall_s: float,
    started: datetime,
) -> str:
    lines = [
        f"# Policy comparison ({started:%Y-%m-%d %H:%M} UTC)",
        "",
        f"`{' '.join(summary['command'])}`",
        "",
        f"Time-scale {time_scale}: every figure in seed time (wall ÷ {time_scale}). "
        f"Wall time of the whole comparison: {wall_s / 60:.1f} min.",
        "",
        comparison_table(runs),
        "## Reproduction checks (docs/workload.md)",
        "",
        checks_list(summary["checks"]),
        "## CPU (fractions of one core; the machine has "
        f"{next(iter(runs.values()), {}).get('cpu', {}).get('cores', '?')} cores)",
        "",
        "| run | wall s | stack | load generator | machine busy (all cores) | clean stop |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, d in [*runs.items(), *((f"slowing {k}", v) for k, v in slowing.items())]:
        c = d.get("cpu", {})
        lines.append(
            f"| {name} | {c.get('wall_s')} | {c.get('stack_cores')} | {c.get('loadgen_cores')} "
            f"| {c.get('machine_busy')} | {d.get('stack', {}).get('clean')} |"
        )
    lines += ["", "## Validity", ""]
    for name, d in [*runs.items(), *((f"slowing {k}", v) for k, v in slowing.items())]:
        why = "; ".join(d["invalid_reasons"])
        lines.append(f"- {name}: {'valid' if d['valid'] else 'INVALID: ' + why}")
    lines += ["", "## Per-run tables", ""]
    for name, d in runs.items():
        lines += [f"### {name}", "", run_table(d)]
    return "\n".join(lines) + "\n"
