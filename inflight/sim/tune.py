"""``inflight sim tune``'s search: the cheapest trigger metadata that meets an SLO attainment.

Pure: the caller passes ``judge(candidate, seed) -> Verdict`` (a simulated run of the
user's traffic with that metadata) and, optionally, ``map`` to spread the runs over
processes. No I/O, no clock.

The search, and why it is not a full grid:

* the knobs are ``targetSaturation``, ``scaleDownWindowSeconds``,
  ``growthHorizonSeconds`` (the start-up-aware headroom), ``scaleUpWindowSeconds``,
  ``floorFraction`` (the floor learned from recent peaks, over ``floorWindowSeconds``
  900; only the default 0.6 unless the space names others, 0 for off) and, where
  ``minReplicaCount`` is 0,
  ``activationInflight``;
* for every combination of the other knobs, attainment falls (and cost falls) as
  ``targetSaturation`` rises, so the cheapest target that meets the attainment is found by
  bisection over the candidate targets (about 4 runs instead of 11);
* every candidate is judged on every seed and scored by its worst seed (lowest
  attainment, highest replica-seconds): a setting must hold on all the traffic samples,
  not on average;
* the answer is the candidate with the lowest worst-seed replica-seconds ratio among
  those whose worst-seed attainment meets the goal; ties go to the higher target (fewer
  replicas at rest), then to the shorter windows.

Monotonicity is an assumption of the bisection, not a fact (a KV cache that binds breaks
it: a lower target can buy replicas that start too late and cost without serving). So the
bisection's answer is checked: every target on the answer's line (its other knobs) is
judged, the cheapest meeting candidate among all judged is the answer, and each pair on a
line where a cheaper target meets and a costlier one misses is reported
(:attr:`TuneResult.crossings`). ``search="grid"`` judges every target of every combination.
Every judged candidate is kept in :attr:`TuneResult.judged`.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from inflight import names

_T = TypeVar("_T")
_R = TypeVar("_R")

#: The targets tried, highest (cheapest) first.
DEFAULT_TARGETS: tuple[float, ...] = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5)
DEFAULT_DOWN_WINDOWS_S: tuple[float, ...] = (60.0, 120.0, 300.0)
DEFAULT_UP_WINDOWS_S: tuple[float, ...] = (10.0,)


@dataclass(frozen=True, order=True)
class Candidate:
    """One setting of the trigger's metadata (seed seconds, as the ScaledObject spells them)."""

    target_saturation: float
    scale_down_window_s: float
    growth_horizon_s: float
    scale_up_window_s: float = 10.0
    activation_inflight: float = 0.0
    floor_fraction: float = names.DEFAULT_FLOOR_FRACTION
    floor_window_s: float = float(names.DEFAULT_FLOOR_WINDOW_S)
    # The replicas' start-up the search simulated (``startupSeconds``; None: left out, the
    # scaler's default): not searched, stated, as the README tells a user to.
    startup_s: float | None = None
    # How much longer or higher than the recent excursions a new one may be and still be
    # held (``excursionMargin``; searched with ``--excursion-margins``): stated with the
    # start-up, the only time it acts.
    excursion_margin: float = names.DEFAULT_EXCURSION_MARGIN
    # The TTFT SLO the search simulated (``sloTtftSeconds``, the SLO stage's; None: left
    # out, the scaler's default): not searched, stated, as the README tells a user to.
    slo_ttft_s: float | None = None

    def metadata(self) -> dict[str, str]:
        """The ScaledObject trigger metadata keys for this candidate (a floor window of 0
        when the floor is off; ``startupSeconds`` and ``excursionMargin`` when the start-up
        is known; ``sloTtftSeconds`` when the SLO is)."""
        window_s = self.floor_window_s if self.floor_fraction > 0 else 0.0
        startup = (
            {}
            if self.startup_s is None
            else {
                names.META_STARTUP_S: f"{self.startup_s:g}",
                names.META_EXCURSION_MARGIN: f"{self.excursion_margin:g}",
            }
        )
        return {
            names.META_FLOOR_WINDOW_S: f"{window_s:g}",
            names.META_FLOOR_FRACTION: f"{self.floor_fraction:g}",
            names.META_TARGET_SATURATION: f"{self.target_saturation:g}",
            names.META_SCALE_UP_WINDOW_S: f"{self.scale_up_window_s:g}",
            names.META_SCALE_DOWN_WINDOW_S: f"{self.scale_down_window_s:g}",
            names.META_GROWTH_HORIZON_S: f"{self.growth_horizon_s:g}",
            names.META_ACTIVATION_INFLIGHT: f"{self.activation_inflight:g}",
            **startup,
            **({} if self.slo_ttft_s is None else {names.META_SLO_TTFT_S: f"{self.slo_ttft_s:g}"}),
        }


@dataclass(frozen=True)
class Verdict:
    """One simulated run: its SLO attainment (0–1) and replica-seconds ÷ the static maximum's."""

    slo_attainment: float
    replica_seconds_ratio: float


@dataclass(frozen=True)
class Judged:
    """A candidate over all seeds, scored by its worst seed."""

    candidate: Candidate
    verdicts: tuple[Verdict, ...]

    @property
    def slo_attainment(self) -> float:
        return min(v.slo_attainment for v in self.verdicts)

    @property
    def replica_seconds_ratio(self) -> float:
        return max(v.replica_seconds_ratio for v in self.verdicts)

    def meets(self, attainment: float) -> bool:
        return self.slo_attainment >= attainment


@dataclass(frozen=True)
class SearchSpace:
    """The values tried for each knob."""

    targets: tuple[float, ...] = DEFAULT_TARGETS
    down_windows_s: tuple[float, ...] = DEFAULT_DOWN_WINDOWS_S
    growth_horizons_s: tuple[float, ...] = (0.0,)
    up_windows_s: tuple[float, ...] = DEFAULT_UP_WINDOWS_S
    activations: tuple[float, ...] = (0.0,)
    # the default only; --floor-fractions 0,0.6 also tries it off
    floor_fractions: tuple[float, ...] = (names.DEFAULT_FLOOR_FRACTION,)
    floor_window_s: float = float(names.DEFAULT_FLOOR_WINDOW_S)
    startup_s: float | None = None  # every candidate's (Candidate.startup_s)
    slo_ttft_s: float | None = None  # every candidate's (Candidate.slo_ttft_s)
    # the default only; --excursion-margins 1,1.5 also tries the README's advice
    excursion_margins: tuple[float, ...] = (names.DEFAULT_EXCURSION_MARGIN,)

    def __post_init__(self) -> None:
        for label, values in (
            ("targets", self.targets),
            ("down windows", self.down_windows_s),
            ("growth horizons", self.growth_horizons_s),
            ("up windows", self.up_windows_s),
            ("activations", self.activations),
            ("floor fractions", self.floor_fractions),
            ("excursion margins", self.excursion_margins),
        ):
            if not values:
                raise ValueError(f"tune: no {label} to try")
        if any(t <= 0 for t in self.targets):
            raise ValueError(f"tune: targets must be > 0, got {self.targets}")
        if any(not 0 <= f <= 1 for f in self.floor_fractions):
            raise ValueError(f"tune: floor fractions must be in [0, 1], got {self.floor_fractions}")
        if any(m < 1 for m in self.excursion_margins):
            raise ValueError(f"tune: excursion margins must be >= 1, got {self.excursion_margins}")

    @classmethod
    def for_startup(cls, startup_s: float, min_replicas: int) -> SearchSpace:
        """The default space for a replica start-up of ``startup_s`` seed seconds.

        Growth horizons: off, the start-up, and the start-up plus a minute of the loop's
        lag (scrape, windows, HPA sync). Activation is tried only when scale to zero is
        allowed (``minReplicaCount`` 0), where it is the only thing it changes.
        """
        horizons = tuple(sorted({0.0, float(startup_s), float(startup_s) + 60.0}))
        activations = (0.0, 1.0) if min_replicas == 0 else (0.0,)
        return cls(growth_horizons_s=horizons, activations=activations, startup_s=startup_s)


@dataclass(frozen=True)
class TuneResult:
    """The answer (None when no candidate met the goal) and everything judged on the way."""

    attainment_goal: float
    best: Judged | None
    judged: tuple[Judged, ...] = field(default=())
    # (meets, misses): same knobs but the target, the first's target higher (cheaper)
    crossings: tuple[tuple[Candidate, Candidate], ...] = field(default=())
    search: str = "bisect"


#: ``tune``'s searches: bisection over the targets (checked on the answer's line), or all.
SEARCHES: tuple[str, ...] = ("bisect", "grid")


Judge = Callable[[Candidate, int], Verdict]
Mapper = Callable[
    [Callable[[tuple[Candidate, int]], Verdict], Sequence[tuple[Candidate, int]]], Iterable[Verdict]
]


def _judge_item(judge: Judge, item: tuple[Candidate, int]) -> Verdict:
    """``judge`` on one (candidate, seed) pair; module level so that
    ``functools.partial(_judge_item, judge)`` pickles (a process pool's ``map_fn``) whenever
    ``judge`` does."""
    return judge(item[0], item[1])


def _serial_map(
    fn: Callable[[tuple[Candidate, int]], Verdict], items: Sequence[tuple[Candidate, int]]
) -> Iterable[Verdict]:
    return [fn(item) for item in items]


def tune(
    judge: Judge,
    space: SearchSpace,
    attainment: float,
    seeds: Sequence[int],
    map_fn: Mapper | None = None,
    search: str = "bisect",
) -> TuneResult:
    """The cheapest candidate of ``space`` whose worst seed meets ``attainment`` (0–1)."""
    if not 0 < attainment <= 1:
        raise ValueError(f"--attainment must be in (0, 1], got {attainment:g}")
    if search not in SEARCHES:
        raise ValueError(f"--search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if len(seeds) < 1:
        raise ValueError("tune: at least one seed is needed")
    run_map = map_fn or _serial_map
    cache: dict[Candidate, Judged] = {}

    def judge_all(candidates: Sequence[Candidate]) -> list[Judged]:
        todo = [c for c in dict.fromkeys(candidates) if c not in cache]
        items = [(c, s) for c in todo for s in seeds]
        verdicts = list(run_map(functools.partial(_judge_item, judge), items))
        for i, c in enumerate(todo):
            cache[c] = Judged(c, tuple(verdicts[i * len(seeds) : (i + 1) * len(seeds)]))
        return [cache[c] for c in candidates]

    targets = sorted(set(space.targets), reverse=True)  # cheapest first
    others = list(
        itertools.product(
            space.down_windows_s,
            space.growth_horizons_s,
            space.up_windows_s,
            space.activations,
            space.floor_fractions,
            space.excursion_margins,
        )
    )
    Combo = tuple[float, float, float, float, float, float]

    # Bisection per combination, all combinations advancing together so each round's runs
    # can go to the mapper at once: lo = highest index known to fail (or -1), hi = lowest
    # index known to meet (or len): the answer lies in (lo, hi].
    def candidate(target: float, combo: Combo) -> Candidate:
        down, growth, up, act, floor, margin = combo
        return Candidate(
            target,
            down,
            growth,
            up,
            act,
            floor,
            space.floor_window_s,
            space.startup_s,
            margin,
            space.slo_ttft_s,
        )

    def line(combo: Combo) -> list[Candidate]:
        return [candidate(t, combo) for t in targets]

    def knobs(c: Candidate) -> Combo:
        return (
            c.scale_down_window_s,
            c.growth_horizon_s,
            c.scale_up_window_s,
            c.activation_inflight,
            c.floor_fraction,
            c.excursion_margin,
        )

    if search == "grid":
        judge_all([c for combo in others for c in line(combo)])
    bounds = {combo: (-1, len(targets)) for combo in others if search == "bisect"}
    while True:
        probes: dict[Combo, int] = {}
        for combo, (lo, hi) in bounds.items():
            if hi - lo > 1:
                probes[combo] = (lo + hi) // 2
        if not probes:
            break
        candidates = [candidate(targets[i], combo) for combo, i in probes.items()]
        for combo, judged in zip(probes, judge_all(candidates), strict=True):
            lo, hi = bounds[combo]
            if judged.meets(attainment):
                bounds[combo] = (lo, probes[combo])
            else:
                bounds[combo] = (probes[combo], hi)

    def cheapest() -> Judged | None:
        return min(
            (j for j in cache.values() if j.meets(attainment)),
            key=lambda j: (
                j.replica_seconds_ratio,
                -j.candidate.target_saturation,
                j.candidate.scale_down_window_s,
                j.candidate.growth_horizon_s,
                j.candidate.floor_fraction,
                j.candidate.excursion_margin,
            ),
            default=None,
        )

    best = cheapest()
    if best is not None and search == "bisect":
        # the check: every target on the answer's line; a better one there is the answer
        judge_all(line(knobs(best.candidate)))
        best = cheapest()
    crossings = []
    for combo in others:
        on_line = [cache[c] for c in line(combo) if c in cache]  # cheapest (highest) first
        for i, hi_t in enumerate(on_line):
            for lo_t in on_line[i + 1 :]:
                if hi_t.meets(attainment) and not lo_t.meets(attainment):
                    crossings.append((hi_t.candidate, lo_t.candidate))
    return TuneResult(
        attainment,
        best,
        tuple(sorted(cache.values(), key=lambda j: j.candidate)),
        tuple(crossings),
        search,
    )
