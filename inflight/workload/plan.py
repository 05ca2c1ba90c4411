"""The open-loop workload flags → one plan: which requests, their SLO, the replica bounds.

Shared by ``inflight bench run`` (``--arrivals`` or ``--trace``) and ``inflight bench
compare`` (``--scenario ramp|spike|diurnal``, ``--arrivals`` or ``--trace``), so both
read the flags the same way; the simulator takes the same flags. The requests come from
:func:`inflight.workload.scenarios.plan_requests` (seeded) or
:func:`inflight.workload.trace.read_trace`. Every
error names the flag (or, for a trace, ``FILE:LINE``).

Defaults: a scenario brings its lengths, replica bounds and start-up; ``--prompt-tokens``,
``--max-tokens``, ``--min-replicas``, ``--max-replicas`` and ``--startup-s`` override
them. With ``--arrivals`` the lengths default to the reference request (3000 in, 300 out).
A trace carries its own lengths (the length flags are refused with it); it may be in the
Azure or Mooncake formats and be windowed and sped up (``--trace-start-s``,
``--trace-duration-s``, ``--trace-rate-scale``: :mod:`inflight.workload.trace_formats`).

**Trace warm-up** (``--trace-warmup-s`` of ``inflight sim`` and ``inflight bench run|compare``:
:func:`add_trace_warmup_flag`): a window that does not start at the trace's beginning comes
with the trace's seconds before it (default :data:`DEFAULT_TRACE_WARMUP_S`, fewer if the
window starts earlier; 0: none), replayed first and not measured (``OpenLoopPlan.warmup``:
the simulator replays it before 0, the live bench sends it to the stack at the run's
time-scale; both measure it out with :mod:`inflight.measure.warmup`), so the stack enters
the window in the state that traffic left it in. The plan's description says what was
replayed (:func:`warmup_words`), or that the window starts cold. A caller without the flag
gets no warm-up.

**Arrivals warm-up** (``--arrivals-warmup-s S`` beside it: :func:`add_arrivals_warmup_flag`,
:func:`split_arrivals_warmup`): the same for a synthetic ``--arrivals`` schedule. The
requests are planned exactly as without the flag (same schedule, lengths, seed and
priorities), then split: those with ``t < S`` are the warm-up (times unchanged: from the
warm-up's start; ``warmup_s`` = S) and the rest the measured window, times shifted by −S
and lasting the schedule's duration − S. Default 0: no warm-up, the plan of old.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from inflight.measure.slo import DEFAULT_SLO, SloSpec
from inflight.workload.arrivals import RateSchedule, parse_arrivals
from inflight.workload.lengths import LengthDist, parse_length
from inflight.workload.priorities import add_priority_flags, assign, parse_mix
from inflight.workload.scenarios import Scenario, get_scenario, plan_requests
from inflight.workload.trace import PlannedRequest
from inflight.workload.trace_formats import TraceWindow, load_trace

CLOSED_LOOP = ("sweep", "slowing")  # --scenario values of the closed-loop comparison
DEFAULT_SEED = 1
DEFAULT_DRAIN_S = 120.0  # seed s: far past any SLO (TTFT 2 s), a finished run's stragglers
DEFAULT_PROMPT_TOKENS = "3000"
DEFAULT_MAX_TOKENS = "300"
# The replica bounds of --arrivals and --trace without --min-replicas/--max-replicas (a
# scenario brings its own), in inflight bench compare and inflight sim alike.
DEFAULT_MIN_REPLICAS = 1
DEFAULT_MAX_REPLICAS = 2
# The trace warm-up of a window that starts past the trace's beginning (seed s of the
# trace): the longest memory of any shipped policy, the floor's floorWindowSeconds (900 s;
# the HPA's scale-down stabilization is 300 s, KPA's stable window 60 s).
DEFAULT_TRACE_WARMUP_S = 900.0
ARRIVALS_WARMUP_FLAG = "--arrivals-warmup-s"


@dataclass(frozen=True)
class OpenLoopPlan:
    """One open-loop workload, resolved: what every policy of a comparison is sent."""

    name: str  # the scenario's, or "arrivals" / "trace"
    description: str
    requests: tuple[PlannedRequest, ...]
    end_s: float  # seed s: the end of the traffic (schedule duration; last t for a trace)
    slo: SloSpec
    drain_s: float
    min_replicas: int | None  # None: not given (bench run: the stack's own)
    max_replicas: int | None
    startup_s: float | None  # None: the replica's default
    meta: dict[str, Any] = field(default_factory=dict)  # arrivals/trace, lengths, seed
    # --hold-deadline-s, seed s (None: inflight up's default, inflight.control.hold_order)
    hold_deadline_s: float | None = None
    # inflight sim --hold-deadline-peers: the peers get the deadline too (sim only)
    hold_deadline_peers: bool = False
    # the router's --priority-class values and --max-late-s, seed s (inflight.workload.priorities)
    priority_classes: tuple[str, ...] = ()
    max_late_s: float | None = None
    # --trace-warmup-s / --arrivals-warmup-s: the requests before the window, replayed first
    # and not measured; times from the warm-up's start, which is ``warmup_s`` seed s before 0.
    warmup: tuple[PlannedRequest, ...] = ()
    warmup_s: float = 0.0

    def scenario_meta(self) -> dict[str, Any]:
        """The scenario part of a comparison's ``scenario_meta``."""
        return {
            "name": self.name,
            "description": self.description,
            **self.meta,
            "requests_planned": len(self.requests),
            "duration_s": self.end_s,
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "startup_s": self.startup_s,
            "hold_deadline_s": self.hold_deadline_s,
            **({"priority_classes": list(self.priority_classes)} if self.priority_classes else {}),
            **({"max_late_s": self.max_late_s} if self.max_late_s is not None else {}),
            "drain_s": self.drain_s,
            "slo": {"ttft_s": self.slo.ttft_s, "tpot_s": self.slo.tpot_s},
        }


_WINDOW_FLAGS = (
    ("--trace-start-s", "trace_start_s"),
    ("--trace-duration-s", "trace_duration_s"),
    ("--trace-rate-scale", "trace_rate_scale"),
    ("--trace-warmup-s", "trace_warmup_s"),
)


def _window(args: argparse.Namespace) -> TraceWindow:
    """The ``--trace-*`` window flags (absent attributes: the whole trace, as recorded; no
    ``trace_warmup_s`` attribute: no warm-up, None: :data:`DEFAULT_TRACE_WARMUP_S`)."""
    start = getattr(args, "trace_start_s", None)
    scale = getattr(args, "trace_rate_scale", None)
    warmup = getattr(args, "trace_warmup_s", 0.0)
    return TraceWindow(
        start_s=0.0 if start is None else start,
        duration_s=getattr(args, "trace_duration_s", None),
        rate_scale=1.0 if scale is None else scale,
        warmup_s=DEFAULT_TRACE_WARMUP_S if warmup is None else warmup,
    )


def is_open_loop(args: argparse.Namespace) -> bool:
    """Open-loop mode: ``--arrivals``, ``--trace`` or an open-loop ``--scenario``."""
    scenario = getattr(args, "scenario", None)
    return bool(args.arrivals or args.trace or (scenario and scenario not in CLOSED_LOOP))


def _length(text: str | None, default: LengthDist, flag: str) -> LengthDist:
    return default if text is None else parse_length(text, flag)


def _positive(value: float | None, flag: str) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{flag}: must be > 0, got {value}")


def plan_from_args(args: argparse.Namespace) -> OpenLoopPlan:
    """Resolve the open-loop flags; ValueError (incl. ``TraceError``) names the flag or line.

    Reads ``scenario`` (optional attribute), ``arrivals``, ``trace``, ``prompt_tokens``,
    ``max_tokens`` (text or None), ``seed``, ``slo_ttft_s``, ``slo_tpot_s``, ``drain_s`` and
    the optional ``min_replicas``, ``max_replicas``, ``startup_s``.
    """
    scenario_name = getattr(args, "scenario", None)
    if scenario_name in CLOSED_LOOP:
        raise ValueError(
            f"--scenario {scenario_name}: a closed-loop scenario; not with --arrivals or --trace"
        )
    sources = [
        f
        for f, v in (
            ("--scenario", scenario_name),
            ("--arrivals", args.arrivals),
            ("--trace", args.trace),
        )
        if v
    ]
    if len(sources) != 1:
        raise ValueError(
            f"give one of --scenario, --arrivals or --trace, got {' and '.join(sources) or 'none'}"
        )
    _positive(args.slo_ttft_s, "--slo-ttft-s")
    _positive(args.slo_tpot_s, "--slo-tpot-s")
    slo = SloSpec(
        ttft_s=DEFAULT_SLO.ttft_s if args.slo_ttft_s is None else args.slo_ttft_s,
        tpot_s=DEFAULT_SLO.tpot_s if args.slo_tpot_s is None else args.slo_tpot_s,
    )
    drain_s = DEFAULT_DRAIN_S if args.drain_s is None else args.drain_s
    if drain_s < 0:
        raise ValueError(f"--drain-s: must be >= 0, got {drain_s}")
    seed = DEFAULT_SEED if args.seed is None else args.seed
    min_r: int | None = getattr(args, "min_replicas", None)
    max_r: int | None = getattr(args, "max_replicas", None)
    startup: float | None = getattr(args, "startup_s", None)
    if startup is not None and startup < 0:
        raise ValueError(f"--startup-s: must be >= 0, got {startup}")
    deadline: float | None = getattr(args, "hold_deadline_s", None)
    if deadline is not None and deadline < 0:
        raise ValueError(f"--hold-deadline-s: must be >= 0 (0: FIFO), got {deadline}")
    meta: dict[str, Any]
    warmup: tuple[PlannedRequest, ...] = ()
    warmup_s = 0.0
    if not args.trace:
        for flag, attr in _WINDOW_FLAGS:
            if getattr(args, attr, None) is not None:
                raise ValueError(f"{flag}: only with --trace")
    arrivals_warmup_s: float | None = getattr(args, "arrivals_warmup_s", None)
    if arrivals_warmup_s is not None and not args.arrivals:
        raise ValueError(f"{ARRIVALS_WARMUP_FLAG}: only with --arrivals")
    if args.trace:
        for flag, value in (("--prompt-tokens", args.prompt_tokens),
                            ("--max-tokens", args.max_tokens), ("--seed", args.seed)):  # fmt: skip
            if value is not None:
                raise ValueError(f"{flag}: not with --trace (the trace gives every request)")
        loaded = load_trace(Path(args.trace), _window(args))
        requests = list(loaded.requests)
        warmup, warmup_s = loaded.warmup, loaded.warmup_s
        name = "trace"
        description = f"replay of {args.trace} ({loaded.meta['trace_format']} format)"
        if "trace_window" in loaded.meta:
            w = loaded.meta["trace_window"]
            span = "to the end" if w["duration_s"] is None else f"{w['duration_s']:g} s"
            description += f", {span} from {w['start_s']:g} s, rate × {w['rate_scale']:g}"
        description += warmup_words(loaded.meta)
        end_s = loaded.end_s
        meta = {**loaded.meta, **({"trace_warmup_s": warmup_s} if warmup_s else {})}
    else:
        scenario: Scenario | None = None
        if scenario_name:
            scenario = get_scenario(scenario_name)
            schedule: RateSchedule = scenario.arrivals
            prompt_default, max_default = scenario.prompt_tokens, scenario.max_tokens
            name, description = scenario.name, scenario.description
            min_r = scenario.min_replicas if min_r is None else min_r
            max_r = scenario.max_replicas if max_r is None else max_r
            startup = scenario.startup_s if startup is None else startup
        else:
            schedule = parse_arrivals(args.arrivals)
            prompt_default = parse_length(DEFAULT_PROMPT_TOKENS, "--prompt-tokens")
            max_default = parse_length(DEFAULT_MAX_TOKENS, "--max-tokens")
            name, description = "arrivals", f"Poisson arrivals {schedule.text}"
        prompt = _length(args.prompt_tokens, prompt_default, "--prompt-tokens")
        out = _length(args.max_tokens, max_default, "--max-tokens")
        requests = plan_requests(schedule, prompt, out, seed)
        if scenario is not None:
            requests = scenario.with_prefixes(requests, seed)
        if not requests:
            raise ValueError(
                f"--arrivals: the schedule {schedule.text} drew no request with --seed {seed}"
            )
        end_s = schedule.duration_s
        meta = {
            "arrivals": schedule.text,
            "prompt_tokens": prompt.text,
            "max_tokens": out.text,
            "seed": seed,
            **({"prefix": scenario.prefix.text} if scenario and scenario.prefix else {}),
        }
    mix_text: str | None = getattr(args, "priority_mix", None)
    if mix_text is not None:
        if any(r.priority for r in requests):
            raise ValueError("--priority-mix: the trace gives its requests' priorities already")
        requests = list(assign(requests, parse_mix(mix_text), seed))
        meta = {**meta, "priority_mix": mix_text}
    if arrivals_warmup_s is not None:  # after the mix: the same requests, only split
        warmup, requests, warmup_s = split_arrivals_warmup(requests, end_s, arrivals_warmup_s)
        if warmup_s:
            end_s -= warmup_s
            meta = {
                **meta,
                "arrivals_warmup": {
                    "start_s": 0.0,
                    "duration_s": warmup_s,
                    "requests": len(warmup),
                },
                "arrivals_warmup_s": warmup_s,
            }
            description += warmup_words(meta)
    classes = tuple(getattr(args, "priority_class", None) or ())
    max_late_s: float | None = getattr(args, "max_late_s", None)
    if max_late_s is not None and max_late_s < 0:
        raise ValueError(f"--max-late-s: must be >= 0 (0: no bound), got {max_late_s:g}")
    if classes and deadline is not None:
        raise ValueError("--hold-deadline-s: each --priority-class has its own deadline")
    if min_r is not None and min_r < 0:
        raise ValueError(f"--min-replicas: must be >= 0, got {min_r}")
    if max_r is not None and (max_r < 1 or (min_r is not None and max_r < min_r)):
        raise ValueError(f"--max-replicas: must be >= 1 and >= --min-replicas, got {max_r}")
    return OpenLoopPlan(
        name=name,
        description=description,
        requests=tuple(requests),
        end_s=end_s,
        slo=slo,
        drain_s=drain_s,
        min_replicas=min_r,
        max_replicas=max_r,
        startup_s=startup,
        meta=meta,
        hold_deadline_s=deadline,
        hold_deadline_peers=bool(getattr(args, "hold_deadline_peers", False)),
        priority_classes=classes,
        max_late_s=max_late_s,
        warmup=warmup,
        warmup_s=warmup_s,
    )


def split_arrivals_warmup(
    requests: list[PlannedRequest], duration_s: float, warmup_s: float
) -> tuple[tuple[PlannedRequest, ...], list[PlannedRequest], float]:
    """``--arrivals-warmup-s``: ``(warm-up, window, warmup_s)`` of an ``--arrivals`` plan
    lasting ``duration_s``: the requests with ``t < warmup_s`` as they are, the others with
    ``t − warmup_s``. ValueError naming the flag: ``warmup_s`` negative or not finite, not
    shorter than the schedule, or leaving no request in the window."""
    flag = ARRIVALS_WARMUP_FLAG
    if not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise ValueError(f"{flag}: must be a finite number >= 0, got {warmup_s:g}")
    if warmup_s >= duration_s:
        raise ValueError(
            f"{flag}: {warmup_s:g} s leaves no window: the schedule lasts {duration_s:g} s"
        )
    if warmup_s == 0:
        return (), requests, 0.0
    warmup = tuple(r for r in requests if r.t_s < warmup_s)
    window = [replace(r, t_s=r.t_s - warmup_s) for r in requests if r.t_s >= warmup_s]
    if not window:
        raise ValueError(
            f"{flag}: no request left in the window {warmup_s:g}–{duration_s:g} s of the "
            f"schedule (all {len(warmup)} arrive in the warm-up)"
        )
    return warmup, window, warmup_s


def warmup_words(meta: dict[str, Any]) -> str:
    """The description's words for the warm-up (a loaded trace's or an ``--arrivals``
    plan's meta): what was replayed before the window, or that a window past the trace's
    start begins cold."""
    for source, key in (("trace", "trace_warmup"), ("schedule", "arrivals_warmup")):
        w = meta.get(key)
        if w is not None:
            return (
                f"; warm-up: the {source}'s {w['start_s']:g}–{w['start_s'] + w['duration_s']:g}"
                f" s ({w['requests']} requests) replayed first, not measured"
            )
    window = meta.get("trace_window")
    if window is not None and window["start_s"] > 0:
        return "; no warm-up: the stack starts idle at its minimum"
    return ""


def add_trace_warmup_flag(p: argparse.ArgumentParser) -> None:
    """``--trace-warmup-s``: for the callers that replay a warm-up (``inflight sim`` and the
    live ``inflight bench run|compare``)."""
    p.add_argument(
        "--trace-warmup-s",
        type=float,
        default=None,
        help="with --trace and --trace-start-s: first replay this many seconds of the trace "
        "before the window, not measured, so every policy and fixed fleet enters the window "
        f"as that traffic left it (default {DEFAULT_TRACE_WARMUP_S:g}, at most "
        "--trace-start-s; 0: start idle at the minimum)",
    )


def add_arrivals_warmup_flag(p: argparse.ArgumentParser) -> None:
    """``--arrivals-warmup-s``: beside :func:`add_trace_warmup_flag`, for the same callers."""
    p.add_argument(
        ARRIVALS_WARMUP_FLAG,
        type=float,
        default=None,
        help="with --arrivals: the schedule's first this many seconds are a warm-up, sent "
        "first and not measured (the measured window is the rest, its times from 0), so "
        "every policy and fixed fleet enters it as that traffic left it; the same requests "
        "as without the flag, only split (default 0: none, the stack starts idle at its "
        "minimum)",
    )


def add_open_loop_flags(p: argparse.ArgumentParser) -> None:
    """The open-loop flags both ``bench run`` and ``bench compare`` take (the length flags
    are shared with the closed-loop sweep and added by its flag set)."""
    p.add_argument(
        "--arrivals",
        default=None,
        help="open loop: Poisson arrivals poisson:T:RATE,T:RATE,... (req/s at seed time T, "
        "linear in between; a repeated T is a step)",
    )
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help='open loop: replay a trace: inflight JSONL ({"t": seed_s, "prompt_tokens": n, '
        '"max_tokens": n} a line), the Azure LLM inference CSV (TIMESTAMP,ContextTokens,'
        "GeneratedTokens) or Mooncake JSONL (timestamp ms, input_length, output_length); "
        "the format is detected, .gz is read (inflight/workload/trace_formats.py)",
    )
    p.add_argument(
        "--trace-start-s",
        type=float,
        default=None,
        help="with --trace: replay from this many seconds after the trace's first request "
        "(default 0)",
    )
    p.add_argument(
        "--trace-duration-s",
        type=float,
        default=None,
        help="with --trace: replay this many seconds of the trace from --trace-start-s "
        "(default: to its end); the traffic lasts duration ÷ --trace-rate-scale",
    )
    p.add_argument(
        "--trace-rate-scale",
        type=float,
        default=None,
        help="with --trace: send the window's requests this many times faster (2: twice "
        "the rate, half the time; lengths unchanged; default 1)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"open loop: seed of arrivals and lengths (default {DEFAULT_SEED})",
    )
    p.add_argument(
        "--slo-ttft-s",
        type=float,
        default=None,
        help=f"open loop: time-to-first-token target, seed s (default {DEFAULT_SLO.ttft_s})",
    )
    p.add_argument(
        "--slo-tpot-s",
        type=float,
        default=None,
        help=f"open loop: time-per-output-token target, seed s (default {DEFAULT_SLO.tpot_s})",
    )
    p.add_argument(
        "--drain-s",
        type=float,
        default=None,
        help="open loop: seed s a request still open at the end of the traffic may take "
        f"before it is cancelled and counted unfinished (default {DEFAULT_DRAIN_S:g})",
    )
    add_priority_flags(p)
