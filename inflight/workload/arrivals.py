"""Open-loop arrivals: a piecewise-linear rate schedule and an exact Poisson process on it.

Pure: no I/O, no clock; randomness comes from a ``random.Random`` the caller seeds.

``--arrivals poisson:T:RATE,T:RATE,...`` gives the rate (requests/s, seed time) at seed
times ``T``; between two points the rate is interpolated linearly. Rules:

* ``T`` is ascending; a repeated ``T`` makes a step (the rate jumps at ``T``, and the later
  point's rate holds from ``T`` on);
* the rate is 0 before the first point and the schedule ends at the last point:
  ``duration_s`` is the last ``T`` and no request is sent at or after it;
* at least 2 points, rates ≥ 0 and not all 0, times ≥ 0, all finite.

Worked example: ``poisson:0:1,300:1,600:5`` is 1 req/s for 300 s, then a linear ramp to
5 req/s at 600 s; ``expected(0, 600)`` = 300 × 1 + 300 × (1 + 5) / 2 = 1,200 requests.

``arrival_times`` draws a non-homogeneous Poisson process by thinning (Lewis and Shedler,
1979): within each linear piece, candidates come from a homogeneous process at the piece's
maximum rate and each is kept with probability rate(t) / max. Thinning is exact, and since
the exponential is memoryless, restarting it at each piece's start is exact too.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

FLAG = "--arrivals"
_FORMAT = "poisson:T:RATE,T:RATE,..."


class ArrivalsError(ValueError):
    """A bad ``--arrivals`` value; the message names the flag and the bad item."""


@dataclass(frozen=True)
class RateSchedule:
    """A piecewise-linear rate: ``points`` are ``(t_s, rate_rps)`` in seed time.

    Construct it directly (scenarios) or with :func:`parse_arrivals` (the flag); both check
    the same rules (see the module docstring).
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        problem = _check_points(self.points)
        if problem is not None:
            raise ArrivalsError(f"{FLAG}: {problem}")

    @property
    def duration_s(self) -> float:
        """The last point's time: the schedule sends nothing at or after it."""
        return self.points[-1][0]

    @property
    def max_rate_rps(self) -> float:
        return max(rate for _, rate in self.points)

    def segments(self) -> list[tuple[float, float, float, float]]:
        """The linear pieces ``(t0_s, t1_s, rate0_rps, rate1_rps)`` with ``t1_s > t0_s``."""
        out = []
        for (t0, r0), (t1, r1) in itertools.pairwise(self.points):
            if t1 > t0:
                out.append((t0, t1, r0, r1))
        return out

    def rate(self, t_s: float) -> float:
        """The rate at ``t_s``: 0 outside [first T, last T); right-continuous at steps."""
        for t0, t1, r0, r1 in self.segments():
            if t0 <= t_s < t1:
                return r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)
        return 0.0

    def expected(self, a_s: float, b_s: float) -> float:
        """The expected number of arrivals in [a_s, b_s): the integral of the rate.

        >>> RateSchedule(((0.0, 1.0), (300.0, 1.0), (600.0, 5.0))).expected(0.0, 600.0)
        1200.0
        """
        if b_s < a_s:
            raise ValueError(f"expected(): the window [{a_s}, {b_s}] ends before it starts")
        total = 0.0
        for t0, t1, r0, r1 in self.segments():
            lo, hi = max(a_s, t0), min(b_s, t1)
            if hi <= lo:
                continue
            slope = (r1 - r0) / (t1 - t0)
            r_lo = r0 + slope * (lo - t0)
            r_hi = r0 + slope * (hi - t0)
            total += (r_lo + r_hi) / 2.0 * (hi - lo)
        return total

    @property
    def text(self) -> str:
        """The schedule as an ``--arrivals`` value (parses back to an equal schedule)."""
        return "poisson:" + ",".join(f"{_num(t)}:{_num(r)}" for t, r in self.points)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _check_points(points: tuple[tuple[float, float], ...]) -> str | None:
    if len(points) < 2:
        return f"needs at least 2 points T:RATE, got {len(points)}"
    for i, (t, r) in enumerate(points, start=1):
        item = f"point {i} ({t:g}:{r:g})"
        if not (math.isfinite(t) and math.isfinite(r)):
            return f"{item}: time and rate must be finite numbers"
        if t < 0:
            return f"{item}: time must be >= 0"
        if r < 0:
            return f"{item}: rate must be >= 0"
        if i > 1 and t < points[i - 2][0]:
            return f"{item}: time decreases (the previous point is at {points[i - 2][0]:g})"
    if points[-1][0] <= points[0][0]:
        return "the schedule has no length: the last time equals the first"
    if all(r == 0 for _, r in points):
        return "every rate is 0: the schedule sends nothing"
    return None


def parse_arrivals(text: str) -> RateSchedule:
    """Parse ``poisson:T:RATE,T:RATE,...``; an error names ``--arrivals`` and the bad item.

    >>> parse_arrivals("poisson:0:1,300:1,600:5").duration_s
    600.0
    """
    kind, sep, rest = text.strip().partition(":")
    if not sep or kind != "poisson":
        raise ArrivalsError(f"{FLAG}: expected {_FORMAT}, got {text!r}")
    points: list[tuple[float, float]] = []
    for i, item in enumerate(rest.split(","), start=1):
        parts = item.strip().split(":")
        if len(parts) != 2:
            raise ArrivalsError(f"{FLAG}: item {i} {item!r} is not T:RATE (in {text!r})")
        values = []
        for part in parts:
            try:
                values.append(float(part))
            except ValueError:
                raise ArrivalsError(
                    f"{FLAG}: item {i} {item!r}: {part!r} is not a number"
                ) from None
        points.append((values[0], values[1]))
    return RateSchedule(tuple(points))


def arrival_times(schedule: RateSchedule, rng: random.Random) -> list[float]:
    """Arrival times (seed s, ascending) of a Poisson process with the schedule's rate.

    All lie in [0, duration_s). Deterministic for a given state of ``rng``.
    """
    times: list[float] = []
    for t0, t1, r0, r1 in schedule.segments():
        top = max(r0, r1)
        if top <= 0:
            continue
        slope = (r1 - r0) / (t1 - t0)
        t = t0
        while True:
            t += rng.expovariate(top)
            if t >= t1:
                break
            if rng.random() * top < r0 + slope * (t - t0):
                times.append(t)
    return times
