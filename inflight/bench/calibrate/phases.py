"""calibrate-emulator's schedule and its judging by phase: pure, the engine passed in.

A shared machine's speed moves (issue 41: a lone stream's time per token went from 3.7 to
5.6 ms in one run), so a profile fitted at the start and checked on levels measured later
judges the machine, not the emulator. As the router's A/B does, the run interleaves:

    probe, phase 1, probe, phase 2, probe, …

A *probe* (:class:`Probe`) measures what the fit needs (time per token against the batch,
TTFT against the prompt); a *phase* is one closed-loop level or one KV-bound case on the
real engine. Each phase is judged on a profile fitted to the two probes around it (their
mean, :func:`bracket`): the fit is made on the period it is checked on, and the emulated
figures it gives sit side by side with the real ones of that period. A phase whose
probes differ by more than the tolerance (:func:`drift`: the engine's speed moved during
it), or whose own measure of something moving does (``inner``: a level's clients waited
longer than the engine says it took), is run again, with the probe after it as its new
first probe, up to ``max_repeats`` times (:func:`interleave`); the last attempt is judged,
and one still drifting says so.
:func:`spread` reports how far the probes and the per-phase ratios moved across the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Probe:
    """The fit's inputs measured once: seconds per output token by batch, TTFT by prompt."""

    tpot: dict[int, float]
    ttft: dict[int, float]

    @property
    def lone_tpot_s(self) -> float:
        """A lone stream's time per token (the smallest batch measured): the speed."""
        return self.tpot[min(self.tpot)]


def drift(before: Probe, after: Probe) -> float:
    """How far the engine's speed moved between two probes (relative, lone stream).

    >>> drift(Probe({1: 0.004}, {}), Probe({1: 0.005}, {}))
    0.25
    """
    return after.lone_tpot_s / before.lone_tpot_s - 1.0


def bracket(*probes: Probe) -> Probe:
    """The mean of ``probes``, key by key: those around a phase are the fit's inputs for
    its period (every probe of the run: the profile written for the emulator).

    >>> bracket(Probe({1: 0.004}, {16: 0.1}), Probe({1: 0.006}, {16: 0.3})).tpot
    {1: 0.005}
    """
    first = probes[0]
    return Probe(
        {n: sum(p.tpot[n] for p in probes) / len(probes) for n in first.tpot},
        {k: sum(p.ttft[k] for p in probes) / len(probes) for k in first.ttft},
    )


@dataclass(frozen=True)
class PhaseRun(Generic[T]):
    """One attempt at a phase: the probes around it and what the real engine did."""

    name: str
    attempt: int  # 1: the first
    before: Probe
    after: Probe
    measured: T
    #: what the phase itself showed moving (0: nothing), relative: a closed-loop level's
    #: time off the engine (``model.ClosedPhase.off_engine``)
    inner: float = 0.0

    @property
    def drift(self) -> float:
        return drift(self.before, self.after)

    def steady(self, tolerance: float) -> bool:
        """Neither the probes around it nor the phase itself moved beyond ``tolerance``."""
        return abs(self.drift) <= tolerance and abs(self.inner) <= tolerance


def interleave(
    phases: Sequence[str],
    probe: Callable[[], Probe],
    run: Callable[[str], T],
    tolerance: float,
    max_repeats: int,
    inner: Callable[[T], float] = lambda _: 0.0,
) -> list[PhaseRun[T]]:
    """Probe, then each phase followed by a probe; a phase whose probes drift beyond
    ``tolerance``, or whose own measure ``inner`` does, is run again (at most
    ``max_repeats`` more times). Every attempt is returned, in order; :func:`judged` picks
    the one each phase is judged on."""
    out: list[PhaseRun[T]] = []
    before = probe()
    for name in phases:
        for attempt in range(1, max_repeats + 2):
            measured = run(name)
            after = probe()
            out.append(PhaseRun(name, attempt, before, after, measured, inner(measured)))
            before = after
            if out[-1].steady(tolerance):
                break
    return out


def phase_names(levels: Sequence[int], kv_cases: Sequence[str], prefix: bool = False) -> list[str]:
    """The phases of a run: each closed-loop level, then each KV-bound case, then the
    prefix check (``prefix``).

    >>> phase_names([1, 4], ["preemption"], prefix=True)
    ['c=1', 'c=4', 'kv preemption', 'prefix']
    """
    return [f"c={c}" for c in levels] + [f"kv {k}" for k in kv_cases] + ["prefix"] * prefix


def judged(runs: Sequence[PhaseRun[T]]) -> dict[str, PhaseRun[T]]:
    """Each phase's last attempt (the steady one, or the last allowed), in phase order."""
    out: dict[str, PhaseRun[T]] = {}
    for r in runs:
        out[r.name] = r
    return out


@dataclass(frozen=True)
class Spread:
    """How far things moved across the run: the lone stream's time per token over every
    probe, and each judged ratio (emulated ÷ real) over the phases."""

    lone_tpot_s: tuple[float, float]  # (lowest, highest) over the probes
    ratios: dict[str, tuple[float, float]]  # figure → (lowest, highest) over the phases
    repeats: int  # attempts beyond the first, over every phase
    unsteady: tuple[str, ...]  # phases judged although their probes still drifted

    @property
    def speed_moved(self) -> float:
        """Highest ÷ lowest lone-stream time per token, less 1."""
        low, high = self.lone_tpot_s
        return high / low - 1.0


def spread(
    runs: Sequence[PhaseRun[T]], ratios: Mapping[str, Sequence[float]], tolerance: float
) -> Spread:
    """:class:`Spread` of ``runs`` (every attempt's probes) and the judged ``ratios``.

    >>> a, b = Probe({1: 0.004}, {}), Probe({1: 0.006}, {})
    >>> runs = [PhaseRun("c=1", 1, a, b, None), PhaseRun("c=1", 2, b, b, None)]
    >>> s = spread(runs, {"c=1 throughput": [0.98]}, 0.1)
    >>> s.lone_tpot_s, s.repeats, s.unsteady, round(s.speed_moved, 3)
    ((0.004, 0.006), 1, (), 0.5)
    """
    probes = [p.lone_tpot_s for r in runs for p in (r.before, r.after)]
    last = judged(runs)
    return Spread(
        lone_tpot_s=(min(probes), max(probes)),
        ratios={k: (min(v), max(v)) for k, v in ratios.items() if v},
        repeats=sum(1 for r in runs if r.attempt > 1),
        unsteady=tuple(n for n, r in last.items() if not r.steady(tolerance)),
    )
