"""The closed-loop sweep: its flags → its levels and configuration.

What ``inflight bench run`` and ``inflight bench compare --scenario sweep`` send (warm-up,
then closed-loop levels with idle gaps; :func:`inflight.bench.closedloop.sweep.run_sweep`
runs it against a router) and what ``inflight sim`` mirrors in virtual time
(``inflight.sim.closed_loop.SweepPlan.from_bench``): one reading of the flags for both.
The open-loop counterpart is :mod:`inflight.workload.plan`. Every duration is in seed
seconds unless its name says wall; every error names the flag (``ValueError``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from inflight.workload.flags import concurrency_list, positive_float
from inflight.workload.meeting import DEFAULT_MAX_TOKENS, DEFAULT_PROMPT_TOKENS, Workload

DEFAULT_CONCURRENCY = "4,8,16,32,64"
# The live closed-loop comparison's time-scale (chosen so the whole comparison takes ≤ 15
# minutes on a 2-core machine while it stays unsaturated; see docs/benchmark.md), and its
# replica bound; the simulator mirrors the sweep's wall periods at this time-scale.
DEFAULT_TIME_SCALE = 0.2
DEFAULT_MAX_REPLICAS = 2


@dataclass(frozen=True)
class Level:
    """A level: ``requests`` requests (or ``duration_s`` seed seconds) at ``concurrency``."""

    concurrency: int
    requests: int | None
    max_tokens: int
    duration_s: float | None = None  # seed seconds, for time-bounded phases
    # (seed seconds after the level starts, max_tokens): answers get longer over time
    schedule: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True)
class SweepConfig:
    """What to run. Durations in seed seconds unless the name says wall."""

    router_url: str
    workload: Workload
    levels: tuple[Level, ...]
    time_scale: float
    warmup_requests: int = 8
    warmup_concurrency: int = 4
    gap_s: float = 10.0  # idle seed seconds between levels, as in the seed's sweep
    request_timeout_s: float = 900.0  # seed seconds, connect to last byte
    sample_interval_wall_s: float = 0.1

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"--time-scale must be > 0, got {self.time_scale}")
        if self.warmup_requests < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup_requests}")
        if self.gap_s < 0:
            raise ValueError(f"--gap-s must be >= 0, got {self.gap_s}")
        if not self.levels:
            raise ValueError("--concurrency needs at least one level")

    def wall(self, seed_s: float) -> float:
        return seed_s * self.time_scale


def sweep_levels(concurrencies: Sequence[int], requests: int, max_tokens: int) -> tuple[Level, ...]:
    return tuple(Level(c, requests, max_tokens) for c in concurrencies)


def closed_loop_args(args: argparse.Namespace) -> argparse.Namespace:
    """The closed-loop sweep's view of the flags: ``--prompt-tokens``/``--max-tokens`` are
    one number each there (the open loop also takes distributions); the open-loop-only
    flags are refused."""
    out = argparse.Namespace(**vars(args))
    for flag, attr, default in (("--prompt-tokens", "prompt_tokens", DEFAULT_PROMPT_TOKENS),
                                ("--max-tokens", "max_tokens", DEFAULT_MAX_TOKENS)):  # fmt: skip
        text = getattr(args, attr)
        if text is None:
            setattr(out, attr, default)
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(
                f"{flag}: the closed-loop sweep takes one number, got {text!r} "
                "(distributions need open-loop mode: --arrivals or --trace)"
            ) from None
        if value < 1:
            raise ValueError(f"{flag}: must be >= 1, got {value}")
        setattr(out, attr, value)
    for flag, attr in (("--seed", "seed"), ("--slo-ttft-s", "slo_ttft_s"),
                       ("--slo-tpot-s", "slo_tpot_s"), ("--drain-s", "drain_s")):  # fmt: skip
        if getattr(args, attr, None) is not None:
            raise ValueError(f"{flag}: open-loop only (give --arrivals or --trace)")
    return out


def sweep_config(
    args: argparse.Namespace,
    router_url: str,
    model: str,
    levels: Sequence[Level],
    time_scale: float,
    gap_s: float | None = None,
) -> SweepConfig:
    """The sweep the closed-loop flags ``args`` (resolved by :func:`closed_loop_args`) ask
    for: the live bench's and ``inflight sim``'s (``inflight.sim.closed_loop.SweepPlan``) one
    reading. ``gap_s``: an override of ``--gap-s`` (the slowing runs pass 0)."""
    return SweepConfig(
        router_url=router_url,
        workload=Workload(
            model=model,
            endpoint=args.endpoint,
            prompt_tokens=args.prompt_tokens,
            max_tokens=args.max_tokens,
        ),
        levels=tuple(levels),
        time_scale=time_scale,
        warmup_requests=args.warmup,
        warmup_concurrency=args.warmup_concurrency,
        gap_s=args.gap_s if gap_s is None else gap_s,
        sample_interval_wall_s=args.sample_interval_s,
    )


def add_closed_loop_flags(p: argparse.ArgumentParser) -> None:
    """The sweep's flags, on ``inflight bench run`` and ``bench compare`` (the length flags
    serve the open loop too: :func:`inflight.workload.plan.add_open_loop_flags`)."""
    p.add_argument(
        "--concurrency",
        type=concurrency_list,
        default=concurrency_list(DEFAULT_CONCURRENCY),
        help=f"closed-loop workers per level (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument("--requests", type=int, default=128, help="requests per level (default 128)")
    p.add_argument(
        "--warmup",
        type=int,
        default=8,
        help="unmeasured warm-up requests before the first level (default 8)",
    )
    p.add_argument("--warmup-concurrency", type=int, default=4)
    p.add_argument(
        "--gap-s",
        type=float,
        default=10.0,
        help="idle seed seconds between levels (default 10, as in the seed)",
    )
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--model", default=None, help="model name (default: the router's /v1/models)")
    p.add_argument(
        "--prompt-tokens",
        default=None,
        help="prompt length: N (closed loop: only N; default 3000), or in open loop "
        "lognormal:MEAN:SIGMA or uniform:A:B (default: the scenario's, else 3000)",
    )
    p.add_argument(
        "--max-tokens",
        default=None,
        help="answer length, as --prompt-tokens (default 300, or the scenario's)",
    )
    p.add_argument(
        "--sample-interval-s",
        type=positive_float,
        default=0.1,
        help="wall seconds between polls of the router's /router/status (default 0.1)",
    )
