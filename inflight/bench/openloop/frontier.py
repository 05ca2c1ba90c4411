"""The static frontier of a live open-loop comparison (issue #24): ``fixed:1 … fixed:max``.

``inflight bench compare --frontier``:

* ``sim`` (default): the simulator runs the fixed fleets on the same workload flags, in a
  child ``inflight sim compare --policies fixed:1,…,fixed:MAX --no-frontier`` (the layout
  keeps ``inflight/bench`` from importing ``inflight/sim``; a command line is the
  interface). A fixed fleet has no control loop, so the simulator, calibrated against the
  live stack (docs/sim.md: ``fixed:8`` within the bars), is a fair stand-in, and it costs
  seconds where eight more live stacks would cost ``max × (duration × time-scale + 20 s)``.
  Its files go to ``<out-dir>/frontier-sim/``; ``comparison.json`` says ``"source":
  "sim"``.
* ``live``: the fleets the policies do not already include run live, one ``inflight up
  --replicas N --no-autoscale`` each, like any policy (``"source": "live"``).
* ``off``: no frontier; the gap keys are None.

Only :func:`run_sim_frontier` runs anything; :func:`sim_command` is the child's argv.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from inflight.measure.frontier import fleet_names
from inflight.procs import inflight_command
from inflight.workload.plan import OpenLoopPlan

FRONTIER_MODES = ("sim", "live", "off")
DEFAULT_FRONTIER = "sim"
SIM_DIR = "frontier-sim"
SIM_TIMEOUT_S = 1800.0  # wall s: a seed-hour at 8 replicas is ~1 s of CPU; this is a hang


def sim_command(
    args: argparse.Namespace, plan: OpenLoopPlan, min_r: int, max_r: int, out_dir: Path
) -> list[str]:
    """``inflight sim compare`` for the fixed fleets on the comparison's workload: the same
    source (scenario, arrivals or trace and its window), lengths, seed, SLO, drain, replica
    start-up and hold deadline (the simulator reads them with the same code)."""
    argv = [
        *inflight_command("sim", "compare"),
        "--policies", ",".join(fleet_names(max_r)), "--no-frontier",
        "--min-replicas", str(min_r), "--max-replicas", str(max_r),
        "--slo-ttft-s", repr(plan.slo.ttft_s), "--slo-tpot-s", repr(plan.slo.tpot_s),
        "--drain-s", repr(plan.drain_s),
    ]  # fmt: skip
    for flag, attr in (
        ("--scenario", "scenario"),
        ("--arrivals", "arrivals"),
        ("--trace", "trace"),
        ("--trace-start-s", "trace_start_s"),
        ("--trace-duration-s", "trace_duration_s"),
        ("--trace-rate-scale", "trace_rate_scale"),
        ("--prompt-tokens", "prompt_tokens"),
        ("--max-tokens", "max_tokens"),
    ):
        value = getattr(args, attr, None)
        if value is not None:
            argv += [flag, str(value)]
    if getattr(args, "trace", None) is not None:
        # The same warm-up as the live runs (seed s of the trace, the flag's unit), or none.
        warm = plan.meta.get("trace_warmup")
        argv += ["--trace-warmup-s", repr(warm["duration_s"] if warm else 0.0)]
    if plan.meta.get("arrivals_warmup_s"):  # --arrivals: the same warm-up as the live runs
        argv += ["--arrivals-warmup-s", repr(plan.meta["arrivals_warmup_s"])]
    seed = plan.meta.get("seed")
    argv += ["--seeds", str(1 if seed is None else seed)]  # a trace: one run, seed 1
    if plan.startup_s is not None:
        argv += ["--startup-s", repr(plan.startup_s)]
    if plan.hold_deadline_s is not None:
        argv += ["--hold-deadline-s", repr(plan.hold_deadline_s)]
    mix = getattr(args, "priority_mix", None)
    argv += [] if mix is None else ["--priority-mix", mix]
    argv += [f"--priority-class={spec}" for spec in plan.priority_classes]
    if plan.max_late_s is not None:
        argv += ["--max-late-s", repr(plan.max_late_s)]
    return [*argv, "--out-dir", str(out_dir)]


def run_sim_frontier(
    args: argparse.Namespace, plan: OpenLoopPlan, min_r: int, max_r: int, out: Path
) -> dict[str, Any]:
    """The ``frontier`` argument of :func:`inflight.measure.openloop_report.build_comparison`,
    simulated; on failure, a frontier with no fleets and a note saying why (the live
    comparison still stands)."""
    sim_dir = out / SIM_DIR
    argv = sim_command(args, plan, min_r, max_r, sim_dir)
    shown = ["inflight", *argv[argv.index("inflight") + 1 :]]
    base: dict[str, Any] = {"source": "sim", "dir": SIM_DIR, "command": shown}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SIM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {**base, "fleets": {}, "note": f"the simulation ran past {SIM_TIMEOUT_S:g} s"}
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        note = f"inflight sim compare exited {done.returncode}: {why}"
        return {**base, "fleets": {}, "note": note}
    doc = json.loads((sim_dir / "comparison.json").read_text(encoding="utf-8"))
    return {**base, "fleets": doc["runs"]}
