"""``inflight sim run|compare --routers N --router-down FROM:TO``: router targets that
Prometheus cannot scrape, and what each policy does meanwhile.

The model is :mod:`inflight.sim.scrapes`' (the router goes on serving; Prometheus sees
``N`` targets sharing its load, and the first fails its scrapes from ``FROM`` to ``TO``,
seed seconds from the workload's start). With ``--routers 1`` no L is scraped at all in
the span: the scaler's window goes stale and partial, a peer's instant query is empty.
With ``--routers 2`` half of L is missing: the scaler's window is partial (its guard may
raise the count, never lower it), a peer reads half the load.

:func:`during` sums up a run's replica count over each span; ``compare`` writes one row per
policy (its first seed) under ``router_down`` in ``comparison.json`` and as a table in
``comparison.md`` (:func:`markdown`).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from inflight.sim.core import SimConfig, SimResult
from inflight.sim.scrapes import RouterDown, check_routers

FLAG = "--router-down"


def add_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Prometheus' view of the router (inflight/sim/outages.py)")
    g.add_argument(
        "--routers",
        type=int,
        default=1,
        help="router targets Prometheus scrapes, sharing the load evenly (default 1)",
    )
    g.add_argument(
        FLAG,
        action="append",
        default=[],
        metavar="FROM:TO",
        help="the first router target fails its scrapes from FROM to TO (seed s from the "
        "workload's start) while it goes on serving; repeatable",
    )


def parse_span(text: str) -> RouterDown:
    """``"600:900"`` → RouterDown(600, 900); ValueError naming the flag.

    >>> parse_span("600:900")
    RouterDown(from_s=600.0, to_s=900.0, router=0)
    """
    start, sep, end = text.partition(":")
    try:
        span = RouterDown(float(start), float(end))
    except ValueError:
        span = None
    if not sep or span is None or not (math.isfinite(span.from_s) and math.isfinite(span.to_s)):
        raise ValueError(f"{FLAG}: expected FROM:TO in seed seconds, got {text!r}")
    check_routers(1, [span], FLAG)
    if span.from_s < 0:
        raise ValueError(
            f"{FLAG}: FROM must be ≥ 0 (seed s from the workload's start), got {text!r}"
        )
    return span


def spans(a: argparse.Namespace) -> tuple[RouterDown, ...]:
    return tuple(parse_span(t) for t in getattr(a, "router_down", None) or ())


def apply(config: SimConfig, a: argparse.Namespace) -> SimConfig:
    """``config`` with the flags' router targets and spans (ValueError naming a flag)."""
    routers = getattr(a, "routers", 1)
    found = spans(a)
    check_routers(routers, found, FLAG)
    if routers == config.routers and not found:
        return config
    return dataclasses.replace(config, routers=routers, router_down=found)


def during(result: SimResult, down: Sequence[RouterDown]) -> list[dict[str, Any]]:
    """Per span: the replica count wanted at its start, its least and most within it, at
    its end, and how often it fell within it."""
    rows = []
    points = [(p["t"], int(p["desired"])) for p in result.timeline]
    for span in down:
        before = [d for t, d in points if t <= span.from_s]
        at_start = before[-1] if before else (points[0][1] if points else 0)
        inside = [d for t, d in points if span.from_s < t < span.to_s]
        seen = [at_start, *inside]
        falls = sum(1 for a, b in itertools.pairwise(seen) if b < a)
        rows.append(
            {
                "from_s": span.from_s,
                "to_s": span.to_s,
                "desired_at_start": at_start,
                "desired_min": min(seen),
                "desired_max": max(seen),
                "desired_at_end": seen[-1],
                "scale_downs": falls,
            }
        )
    return rows


def markdown(rows: Mapping[str, Sequence[Mapping[str, Any]]], routers: int) -> str:
    """The table of :func:`during`'s rows, one line per policy and span."""
    if not rows:
        return ""
    scope = "the only router target" if routers == 1 else f"1 of {routers} router targets"
    lines = [
        "",
        f"## While {scope} was down (first seed)",
        "",
        "| policy | down (seed s) | desired at start | min | max | at end | scale-downs |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for policy, spans_ in rows.items():
        for r in spans_:
            lines.append(
                f"| {policy} | {r['from_s']:g}–{r['to_s']:g} | {r['desired_at_start']} | "
                f"{r['desired_min']} | {r['desired_max']} | {r['desired_at_end']} | "
                f"{r['scale_downs']} |"
            )
    return "\n".join(lines) + "\n"
