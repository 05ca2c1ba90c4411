"""The static frontier: what a fixed fleet buys, and how far a policy sits from it.

An autoscaler is worth running only if it beats simply running N replicas. So every
open-loop comparison also measures the fixed fleets ``fixed:1 … fixed:max`` on the same
requests, and judges each policy against them (issue #24). Pure: no I/O, no clock.

A point is (cost, attainment): replica-seconds over the traffic window (lower is better)
and SLO attainment as a share of requests sent (higher is better).

* **The static frontier** is the fixed fleets that no other fixed fleet dominates (with
  monotone data, every one), sorted by cost, joined by straight lines. A point between two
  neighbouring fleets is what running the smaller one for part of the time and the larger
  one for the rest would give, if attainment mixed linearly.
* **Below the smallest fleet's cost** the line runs to ``fixed:0``, (0, 0): no replica
  serves no request. (Only a policy that scales to zero can spend less than ``fixed:1``.)
* **Above the largest fleet's cost** the line is flat at that fleet's attainment: no
  static fleet within the bounds does better, whatever it spends.
* **The frontier gap** of a policy is its attainment minus the frontier's at its cost:
  negative means a static fleet (or a mix of two neighbouring ones) does better for the
  same replica-seconds.
* **A fixed fleet dominates a policy** when it has ≥ the attainment at ≤ the cost, one of
  the two strictly.

Worked example (the unit tests step through it): fleets ``fixed:1`` (100 replica-s,
50 %), ``fixed:2`` (200, 80 %), ``fixed:3`` (300, 95 %), ``fixed:4`` (400, 99 %).

* A policy at (250, 83 %): the frontier at 250 is halfway from 80 % to 95 %, 87.5 %; gap
  83 − 87.5 = −4.5 points; between ``fixed:2`` and ``fixed:3``; no fleet dominates it
  (``fixed:2`` is cheaper but worse, ``fixed:3`` better but dearer).
* A policy at (330, 90 %): frontier 95 + 0.3 × 4 = 96.2 %, gap −6.2 points; ``fixed:3``
  dominates it (95 % ≥ 90 % at 300 ≤ 330).
* A policy at (50, 30 %): below ``fixed:1``; frontier 50 % × 50/100 = 25 %, gap +5 points.
* A policy at (450, 99.5 %): above ``fixed:4``; frontier 99 %, gap +0.5 points.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_FIXED = re.compile(r"^fixed:(?P<n>[1-9][0-9]*)$")


def fleet_size(name: str) -> int | None:
    """``fixed:3`` → 3; anything else (an autoscaler, ``fixed:0``) → None."""
    m = _FIXED.match(name)
    return int(m["n"]) if m else None


def fleet_names(max_replicas: int) -> list[str]:
    """The fleets of the frontier: ``fixed:1`` … ``fixed:<max_replicas>``."""
    if max_replicas < 1:
        raise ValueError(f"max_replicas must be >= 1, got {max_replicas}")
    return [f"fixed:{n}" for n in range(1, max_replicas + 1)]


@dataclass(frozen=True)
class FleetPoint:
    """One fixed fleet as measured: ``replicas`` replicas for the whole run."""

    name: str
    replicas: int
    cost: float  # replica-seconds
    attainment: float  # share of requests sent that met the SLO, 0..1

    def __post_init__(self) -> None:
        if self.cost < 0 or not 0 <= self.attainment <= 1:
            raise ValueError(
                f"{self.name}: need cost >= 0 and 0 <= attainment <= 1, "
                f"got {self.cost}, {self.attainment}"
            )


ORIGIN = FleetPoint("fixed:0", 0, 0.0, 0.0)


def dominates(a_cost: float, a_att: float, b_cost: float, b_att: float) -> bool:
    """(a_cost, a_att) dominates (b_cost, b_att): no worse on both, better on one."""
    return a_cost <= b_cost and a_att >= b_att and (a_cost < b_cost or a_att > b_att)


@dataclass(frozen=True)
class Frontier:
    """The static frontier: :data:`ORIGIN` then the undominated fleets, by cost."""

    points: tuple[FleetPoint, ...]  # ORIGIN first; costs strictly increasing after it

    @property
    def fleets(self) -> tuple[FleetPoint, ...]:
        """The measured fleets on the frontier (without ``fixed:0``)."""
        return self.points[1:]

    def attainment_at(self, cost: float) -> float:
        """The frontier's attainment at ``cost`` replica-seconds (module docstring)."""
        pts = self.points
        if cost >= pts[-1].cost:
            return pts[-1].attainment
        if cost <= pts[0].cost:
            return pts[0].attainment
        i = bisect.bisect_right([p.cost for p in pts], cost)  # pts[i-1].cost <= cost < pts[i]
        lo, hi = pts[i - 1], pts[i]
        return lo.attainment + (hi.attainment - lo.attainment) * (cost - lo.cost) / (
            hi.cost - lo.cost
        )

    def position(self, cost: float) -> str:
        """Where ``cost`` lies on the line: ``"fixed:2–fixed:3"`` (between two fleets),
        ``"at fixed:3"``, ``"below fixed:1"`` (on the segment from ``fixed:0``) or
        ``"above fixed:8"`` (past the dearest fleet on the frontier)."""
        pts = self.points
        for p in pts:
            if cost == p.cost and p is not ORIGIN:
                return f"at {p.name}"
        if cost > pts[-1].cost:
            return f"above {pts[-1].name}"
        i = bisect.bisect_right([p.cost for p in pts], cost)
        if i <= 1 and pts[0] is ORIGIN:
            return f"below {pts[min(1, len(pts) - 1)].name}"
        return f"{pts[max(0, i - 1)].name}–{pts[min(i, len(pts) - 1)].name}"


def static_frontier(fleets: Iterable[FleetPoint]) -> Frontier:
    """The frontier of these fleets: the undominated ones by cost, ``fixed:0`` first.

    Two fleets at the same cost and attainment are one point (the smaller is kept).
    """
    items = sorted(fleets, key=lambda f: (f.cost, f.replicas))
    if not items:
        raise ValueError("the static frontier needs at least one fixed fleet")
    on: list[FleetPoint] = []
    for f in items:
        if any(dominates(g.cost, g.attainment, f.cost, f.attainment) for g in items if g != f):
            continue
        if on and on[-1].cost == f.cost:  # same cost, same attainment: one point
            continue
        on.append(f)
    if on[0].cost == 0:  # a free fleet (no traffic window): nothing to join to the origin
        return Frontier(tuple(on))
    return Frontier((ORIGIN, *on))


@dataclass(frozen=True)
class Verdict:
    """A policy against the static frontier."""

    frontier_attainment: float  # the frontier's attainment at the policy's cost
    gap: float  # attainment − frontier_attainment (share, not points)
    position: str  # Frontier.position(cost): "fixed:2–fixed:3", "at fixed:3", …
    dominated_by: tuple[str, ...]  # fixed fleets that dominate it, smallest first


def judge(
    fleets: Iterable[FleetPoint], cost: float, attainment: float, frontier: Frontier | None = None
) -> Verdict:
    """The policy at (``cost``, ``attainment``) against ``fleets`` (module docstring)."""
    items = list(fleets)
    front = frontier if frontier is not None else static_frontier(items)
    at = front.attainment_at(cost)
    by = tuple(
        f.name
        for f in sorted(items, key=lambda f: f.replicas)
        if dominates(f.cost, f.attainment, cost, attainment)
    )
    return Verdict(at, attainment - at, front.position(cost), by)


def fleet_points(runs: Mapping[str, Mapping[str, Any]]) -> list[FleetPoint]:
    """The ``fixed:N`` entries of a comparison's runs (``slo_attainment``,
    ``replica_seconds``) as points; entries without both figures are left out."""
    out = []
    for name, run in runs.items():
        n = fleet_size(name)
        att, cost = run.get("slo_attainment"), run.get("replica_seconds")
        if n is None or not isinstance(att, int | float) or not isinstance(cost, int | float):
            continue
        out.append(FleetPoint(name, n, float(cost), float(att)))
    return out
