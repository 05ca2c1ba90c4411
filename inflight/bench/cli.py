"""``inflight bench run|compare|chaos`` and the component benchmarks
(``inflight.bench.components``):
the one wiring site of the benchmark.

Heavy imports (aiohttp, matplotlib, tqdm) happen inside the commands so ``inflight --help``
stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from inflight import extras
from inflight.bench.openloop.frontier import FRONTIER_MODES
from inflight.planes.policy_catalogue import OPEN_LOOP_POLICIES
from inflight.workload.flags import positive_float
from inflight.workload.plan import (
    CLOSED_LOOP,
    add_arrivals_warmup_flag,
    add_open_loop_flags,
    add_trace_warmup_flag,
    is_open_loop,
)
from inflight.workload.scenarios import SCENARIOS
from inflight.workload.slowing import add_slowing_flags
from inflight.workload.sweep import add_closed_loop_flags


def _workload_flags(p: argparse.ArgumentParser) -> None:
    """The sweep's flags (shared with ``inflight sim``), then the bench's own."""
    add_closed_loop_flags(p)
    p.add_argument("--force", action="store_true", help="overwrite existing result files")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def register(subparsers: Any) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="the reference benchmark: closed-loop sweep, Little's Law check, policy comparison",
        description="Closed-loop meeting-summary benchmark; every figure in seed time.",
    )
    sub = bench.add_subparsers(
        dest="bench_command",
        metavar="{run,compare,chaos,router,soak,upstream-client,emulator,scaler,calibrate-emulator,token-estimate}",
    )
    sub.required = True

    run = sub.add_parser("run", help="one sweep against a running router")
    run.add_argument("--url", help="router base URL, e.g. http://127.0.0.1:8000")
    run.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="an `inflight up` state dir: router URL, time-scale and the replica "
        "timeline come from its stack.json and timeline.jsonl",
    )
    run.add_argument(
        "--time-scale",
        type=positive_float,
        default=None,
        help="time-scale the stack runs at (default: stack.json's, else 1.0)",
    )
    run.add_argument(
        "--frozen",
        action="store_true",
        help="the replica count is meant to be fixed: a change makes the run invalid",
    )
    run.add_argument("--policy", default=None, help="label for the results (e.g. fixed:2)")
    run.add_argument("--results-file", type=Path, required=True)
    run.add_argument("--summary-file", type=Path, default=None)
    run.add_argument("--plot-dir", type=Path, default=None, help="PNGs here")
    _workload_flags(run)
    add_open_loop_flags(run)
    add_trace_warmup_flag(run)
    add_arrivals_warmup_flag(run)
    run.set_defaults(func=_run)

    cmp = sub.add_parser(
        "compare",
        help="start `inflight up` per policy, run the same workload on each, compare",
        description="--scenario sweep (default) or slowing: the seed's closed-loop sweep "
        "and the slowing model, as before. --scenario ramp|spike|diurnal, --arrivals or "
        "--trace: open-loop traffic, judged on SLO attainment against replica-seconds.",
    )
    cmp.add_argument(
        "--scenario",
        default=None,
        choices=(*CLOSED_LOOP, *SCENARIOS),
        help="sweep: closed-loop sweep, then the slowing model unless --no-slowing; "
        "slowing: the slowing model only; ramp|spike|diurnal: open loop (default sweep)",
    )
    cmp.add_argument(
        "--policies",
        default=None,
        help="comma-separated: fixed:N, saturation, qps, kpa, ray, vllm-waiting, epp-queue, "
        "hpa-rps, saturation[KEY=VALUE;...] (scaler metadata, e.g. "
        "saturation[targetSaturation=0.8;scaleDownWindowSeconds=120]); default "
        "closed loop fixed:1,fixed:2,qps,saturation; open loop "
        f"{OPEN_LOOP_POLICIES} (MAX: the scenario's --max-replicas)",
    )
    cmp.add_argument(
        "--time-scale",
        type=positive_float,
        default=None,
        help="time-scale of every stack (default: bench compare's DEFAULT_TIME_SCALE)",
    )
    cmp.add_argument(
        "--max-replicas",
        type=int,
        default=None,
        help="default 2 (closed loop), the scenario's (open loop), else 2",
    )
    cmp.add_argument(
        "--min-replicas",
        type=int,
        default=None,
        help="open loop: of every autoscaled policy (default the scenario's, else 1)",
    )
    cmp.add_argument(
        "--startup-s",
        type=float,
        default=None,
        help="open loop: replica start-up, seed s (default the scenario's; else the emulator's)",
    )
    cmp.add_argument(
        "--hold-deadline-s",
        type=float,
        default=None,
        help="open loop: the router's --hold-deadline-s under inflight's own policies, seed "
        "s: held requests still within it go before late ones (0: FIFO; default inflight "
        "up's; peers always hold FIFO)",
    )
    cmp.add_argument(
        "--out-dir",
        type=Path,
        required=True,
        help="new folder for the comparison (JSON, Markdown, PNGs, one run file per "
        "policy, stack logs); refused if it exists unless --force",
    )
    cmp.add_argument(
        "--state-root",
        type=Path,
        default=None,
        help="where each stack's state dir (logs, Prometheus data) goes "
        "(default: state/bench/<out-dir name>, ignored by git)",
    )
    add_slowing_flags(cmp)
    cmp.add_argument(
        "--up-arg",
        action="append",
        default=[],
        help="extra argument passed to every `inflight up` (repeatable)",
    )
    cmp.add_argument(
        "--stack-timeout-s",
        type=positive_float,
        default=180.0,
        help="wall seconds to wait for stack.json",
    )
    cmp.add_argument(
        "--frontier",
        choices=FRONTIER_MODES,
        default=None,
        help="open loop: the static frontier fixed:1 ... fixed:MAX each policy's frontier gap "
        "is measured against: sim (default) simulates the fleets on the same requests "
        "(inflight sim compare, seconds), live runs those not in --policies live, off skips it",
    )
    _workload_flags(cmp)
    add_open_loop_flags(cmp)
    add_trace_warmup_flag(cmp)
    add_arrivals_warmup_flag(cmp)
    cmp.set_defaults(func=_compare)
    _chaos_parser(sub)
    from inflight.bench.components.cli import register as register_components

    register_components(sub)
    from inflight.bench.calibrate.cli import register as register_calibrate

    register_calibrate(sub)
    _token_estimate_parser(sub)


def _token_estimate_parser(sub: Any) -> None:
    from inflight.bench.token_estimate import add_arguments

    te = sub.add_parser(
        "token-estimate",
        help="the router's text-prompt token estimate against a running engine's count",
        description=(
            "Send prompts cut from texts to an OpenAI-compatible engine (max_tokens 1) and "
            "compare its usage.prompt_tokens with the router's estimate at --chars-per-token "
            "and at the ratio fitted on the other half of the samples: the figure to give the "
            "router's --chars-per-token for that model (docs/capacity.md)."
        ),
    )
    add_arguments(te)
    te.set_defaults(func=_token_estimate)


def _chaos_parser(sub: Any) -> None:
    from inflight.bench.chaos.defaults import CI_FAULTS, DEFAULT_FAULTS

    ch = sub.add_parser(
        "chaos",
        help="the fault run: `inflight up` under open-loop load, faults injected in turn",
        description=(
            "Start `inflight up` (emulator replicas, 1..--max-replicas), send open-loop "
            "Poisson load, inject each fault of --faults once the stack has settled, and "
            "report per fault: requests sent and failed (on the faulted replica / lost "
            "otherwise), leaked slots, wrong scale-downs, time to recover, orphans. Exit "
            "code 1 when the bar is missed. Durations named *-s are seed seconds "
            "(wall = seed × --time-scale) unless they say wall."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = ch.add_argument
    add("--out-dir", type=Path, required=True, help="new folder for chaos.json and chaos.md")
    add("--faults", default=DEFAULT_FAULTS, help=f"comma-separated, in order (CI: {CI_FAULTS})")
    add("--time-scale", type=positive_float, default=0.2, help="of the whole stack")
    add("--rate", type=positive_float, default=2.0, help="arrivals per seed second (Poisson)")
    add("--max-replicas", type=int, default=4)
    add("--slots", type=int, default=4, help="slots per replica (--max-num-seqs)")
    add("--model", default=None, help="model name (default: the emulator's)")
    add("--prompt-tokens", type=int, default=3000)
    add("--max-tokens", type=int, default=300)
    add("--long-max-tokens", type=int, default=8000, help="the scale-down fault's long streams")
    add("--long-streams", type=int, default=4, help="long streams open at the load drop")
    add("--settle-s", type=positive_float, default=30.0, help="seed s unchanged = settled")
    add(
        "--after-s",
        type=positive_float,
        default=90.0,
        help="seed s of load after "
        "recovery (>= the 60 s scale-down window + a sync: a wrong scale-down shows)",
    )
    add("--hang-s", type=positive_float, default=100.0, help="seed s before SIGCONT (hang)")
    add("--prometheus-down-s", type=positive_float, default=120.0, help="seed s held down")
    add("--router-missing-s", type=positive_float, default=30.0, help="seed s killed router "
        "stays in discovery")  # fmt: skip
    add("--surge-base", type=positive_float, default=0.5, help="× --rate before a surge fault")
    add("--surge-factor", type=positive_float, default=1.5, help="× --rate at a surge fault")
    add("--crashloop-s", type=positive_float, default=60.0, help="seed s of the restart loop")
    add("--crashloop-down-s", type=positive_float, default=10.0, help="seed s down per crash")
    add("--router-stop-s", type=positive_float, default=60.0, help="seed s before SIGCONT")
    add("--settle-timeout-s", type=positive_float, default=180.0, help="wall s")
    add("--recover-timeout-s", type=positive_float, default=120.0, help="wall s")
    add("--drain-timeout-s", type=positive_float, default=180.0, help="wall s")
    add("--leak-timeout-s", type=positive_float, default=20.0, help="wall s")
    add("--request-timeout-s", type=positive_float, default=300.0, help="wall s per request")
    add("--stack-timeout-s", type=positive_float, default=180.0, help="wall s")
    add("--state-dir", type=Path, default=None, help="the stack's state dir "
        "(default state/bench/<out-dir name>-chaos)")  # fmt: skip
    add("--scaler-metadata", type=_overrides, default=(), metavar="KEY=VALUE,…",
        help="trigger metadata over inflight up's own (its --scaler-metadata, seed-time "
        "windows); the scale-down fault's deadline is read from it too")  # fmt: skip
    add("--force", action="store_true", help="write into a non-empty --out-dir")
    ch.set_defaults(func=_chaos)


def _run(args: argparse.Namespace) -> int:
    if (missing := extras.require("bench", "inflight bench run")) is not None:
        return missing
    if is_open_loop(args):
        from inflight.bench.openloop.run import main as open_loop

        return open_loop(args)
    from inflight.bench.closedloop.run import main

    return main(args)


def _token_estimate(args: argparse.Namespace) -> int:
    if (missing := extras.require("bench", "inflight bench token-estimate")) is not None:
        return missing
    from inflight.bench.token_estimate import main

    return main(args)


def _overrides(text: str) -> tuple[tuple[str, str], ...]:
    """``--scaler-metadata``, checked as ``inflight up`` checks its keys (argparse names the
    flag on a ValueError)."""
    from inflight.control.trigger import check_override_key, parse_overrides

    try:
        pairs = parse_overrides(text)
        for key, _ in pairs:
            check_override_key(key)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return pairs


def _chaos(args: argparse.Namespace) -> int:
    from inflight.bench.chaos.run import main

    return main(args)


def _compare(args: argparse.Namespace) -> int:
    if (missing := extras.require("bench", "inflight bench compare")) is not None:
        return missing
    if is_open_loop(args):
        from inflight.bench.openloop.compare import main as open_loop

        return open_loop(args)
    from inflight.bench.closedloop.compare import main

    return main(args)
