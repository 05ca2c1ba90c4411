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
``inflight.bench.openloop.compare``; both start and stop each stack with :func:`on_stack`.

Default time-scale: ``DEFAULT_TIME_SCALE`` (chosen so the whole comparison takes ≤ 15
minutes on a 2-core machine while it stays unsaturated; see docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from inflight.bench import cpu, interrupt, proctree
from inflight.bench.closedloop import slowing as slowing_model
from inflight.bench.closedloop.run import BenchError, closed_loop_args, sweep_to_result
from inflight.bench.closedloop.sweep import Level, sweep_levels
from inflight.bench.stack import Policy, Stack, StackError, parse_policies
from inflight.control.hold_order import HOLD_DEADLINE_S
from inflight.measure.repro import reproduced, reproduction_checks
from inflight.measure.results import ResultFileExists, RunResult, dumps, new_out_dir, write_new
from inflight.measure.table import checks_list, comparison_table, run_table

T = TypeVar("T")

DEFAULT_TIME_SCALE = 0.2
DEFAULT_MAX_REPLICAS = 2
CLOSED_LOOP_POLICIES = "fixed:1,fixed:2,qps,saturation"


def on_stack(
    policy: Policy,
    args: argparse.Namespace,
    time_scale: float,
    state_dir: Path,
    label: str,
    body: Callable[[Stack], T],
    *,
    max_replicas: int,
    min_replicas: int | None = None,
    extra_args: Sequence[str] = (),
) -> tuple[T, dict[str, Any]]:
    """Start a fresh ``inflight up`` for ``policy``, run ``body`` on it, stop it and prove it
    gone; return ``body``'s result and the ``stack`` and ``cpu`` facts of the run."""
    stack = Stack(
        policy=policy,
        state_dir=state_dir,
        time_scale=time_scale,
        max_replicas=max_replicas,
        extra_args=(*extra_args, *args.up_arg),
        min_replicas=min_replicas,
    )
    up_args = [*policy.up_args(max_replicas, min_replicas), *stack.extra_args]
    print(f"== {label}: starting inflight up ({' '.join(up_args)})", file=sys.stderr, flush=True)
    wall0 = time.monotonic()
    # One try from the start: Ctrl-C or SIGTERM (inflight.bench.interrupt) anywhere in it stops the
    # stack.
    try:
        stack.start(args.stack_timeout_s)
        cpu_before = proctree.tree_cpu_s(stack.pid)
        machine_before = cpu.mark()
        wall0 = time.monotonic()
        result = body(stack)
        stack.snapshot()
        stack_cpu_s = proctree.tree_cpu_s(stack.pid) - cpu_before
    finally:
        wall_s = time.monotonic() - wall0
        with interrupt.deferred():  # a signal during the stop waits for this line too
            report = stack.stop()
            print(
                f"== {label}: stopped; clean={report.get('clean')} wall={wall_s:.0f}s",
                file=sys.stderr,
                flush=True,
            )
    loadgen_s, busy = cpu.since(machine_before, cpu.mark())
    extra = {
        "stack": {**report, "stack_info": stack.info, "state_dir": str(state_dir)},
        "cpu": {
            "wall_s": round(wall_s, 1),
            "stack_cores": round(stack_cpu_s / wall_s, 3),
            "loadgen_cores": round(loadgen_s / wall_s, 3),
            "machine_busy": None if busy is None else round(busy, 3),
            "cores": cpu.cores(),
        },
    }
    return result, extra


def unclean_reason(report: dict[str, Any]) -> str | None:
    """Why a stopped stack makes its run invalid (None when it stopped clean)."""
    if report.get("clean"):
        return None
    return (
        f"stack left processes {report.get('pids_left_after_stop')} or ports "
        f"{report.get('ports_busy_after_stop')} after stop"
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


@dataclasses.dataclass
class Progress:
    """How far a comparison got: what the line of an interrupted one says."""

    out: Path | None = None
    state_root: Path | None = None
    running: str | None = None  # the policy (run) whose stack runs now
    kept: list[str] = dataclasses.field(default_factory=list)  # files written, whole
    compared: bool = False  # comparison.json and comparison.md written

    def write(self, path: Path, text: str, force: bool) -> None:
        """Write a result file whole: a signal that arrives meanwhile waits for the end."""
        with interrupt.deferred():
            write_new(path, text, force)
            self.kept.append(path.name)

    def interrupted(self, exc: interrupt.Interrupted) -> int:
        """Print the one line of an interrupted comparison; its exit code (130, 143)."""
        if self.out is None:
            line = "nothing was started"
        else:
            during = (
                f"during {self.running} (its stack is stopped, its partial run not written)"
                if self.running is not None
                else "between runs"
            )
            kept = f"kept in {self.out}: {', '.join(self.kept)}" if self.kept else "no file kept"
            line = f"{during}; {kept}"
            if not self.compared:
                line += "; no comparison.json: the comparison is incomplete"
            line += f"; stack logs in {self.state_root}"
        print(f"inflight bench compare: interrupted by {exc.name} {line}", file=sys.stderr,
              flush=True)  # fmt: skip
        return exc.exit_code


def interruptible(
    main: Callable[[argparse.Namespace, Progress], int], args: argparse.Namespace
) -> int:
    """Run a comparison's ``main``; Ctrl-C or SIGTERM stop it (:mod:`inflight.bench.interrupt`): the
    running stack is stopped by its ``finally``, then one line and exit code 130 or 143."""
    progress = Progress()
    with interrupt.handled():
        try:
            return main(args, progress)
        except interrupt.Interrupted as exc:
            return progress.interrupted(exc)


def main(args: argparse.Namespace) -> int:
    from inflight.workload.plan import is_open_loop

    if is_open_loop(args):
        from inflight.bench.openloop.compare import main as open_loop_main

        return open_loop_main(args)
    return interruptible(_closed_loop, args)


def _closed_loop(args: argparse.Namespace, progress: Progress) -> int:
    try:
        args = closed_loop_args(args)
        for flag, attr in (("--min-replicas", "min_replicas"), ("--startup-s", "startup_s")):
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
        "## Reproduction checks (WORKLOAD.md)",
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
