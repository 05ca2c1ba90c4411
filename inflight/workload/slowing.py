"""The slowing-model scenario of the closed-loop comparison, as decisions and values.

Constant concurrency while the answers get longer (``max_tokens`` grows every phase), so
requests get slower: λ falls while L stays at the client count. A rule on λ (the seed's
QPS rule) reads that as less load and scales down; a rule on L (saturation) holds.

One implementation of each decision, read by the live comparison
(``inflight.bench.closedloop.compare``) and the simulated one (``inflight.sim.sweep_compare``):
its flags (:func:`add_slowing_flags`, on both commands), the level and its phase schedule,
which policies run it, whether a ``--scenario`` runs it, the gap after its warm-up, and the
``slowing_phases`` field of its run documents. Pure: no I/O, no clock.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from inflight.workload.flags import positive_float
from inflight.workload.sweep import Level


class PolicyLike(Protocol):
    """What the scenario reads of a policy (:class:`inflight.planes.policy_catalogue.Policy`)."""

    @property
    def kind(self) -> str: ...

    @property
    def slug(self) -> str: ...


P = TypeVar("P", bound=PolicyLike)

# The policies the scenario runs: the rule on λ and the rule on L.
POLICY_KINDS = ("qps", "saturation")
# The slowing level follows its warm-up without the sweep's idle gap.
GAP_S = 0.0
PLOT_TITLE = "slowing model: constant concurrency, answers lengthen"


def add_slowing_flags(p: argparse.ArgumentParser) -> None:
    """The slowing-model scenario's flags, on ``inflight bench compare`` and ``inflight sim
    compare`` alike."""
    p.add_argument("--no-slowing", action="store_true", help="skip the slowing-model scenario")
    p.add_argument("--slowing-concurrency", type=int, default=8)
    p.add_argument(
        "--slowing-max-tokens",
        default="300,600,1200,2400",
        help="answer length per phase of the slowing-model scenario",
    )
    p.add_argument(
        "--slowing-phase-s",
        type=positive_float,
        default=75.0,
        help="seed seconds per phase of the slowing-model scenario",
    )


def slowing_level(concurrency: int, max_tokens: list[int], phase_s: float) -> Level:
    """One continuous closed-loop level whose answers lengthen every ``phase_s`` seed seconds."""
    if concurrency < 1:
        raise ValueError(f"--slowing-concurrency must be >= 1, got {concurrency}")
    if not max_tokens or any(m < 1 for m in max_tokens):
        raise ValueError(f"--slowing-max-tokens: positive integers needed, got {max_tokens}")
    if not phase_s > 0:
        raise ValueError(f"--slowing-phase-s must be > 0, got {phase_s}")
    return Level(
        concurrency=concurrency,
        requests=None,
        max_tokens=max_tokens[0],
        duration_s=phase_s * len(max_tokens),
        schedule=tuple((i * phase_s, m) for i, m in enumerate(max_tokens)),
    )


def level_from_args(args: argparse.Namespace) -> Level:
    """The level :func:`add_slowing_flags`'s flags describe (ValueError names the flag)."""
    text = args.slowing_max_tokens
    try:
        max_tokens = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(
            f"--slowing-max-tokens: comma-separated integers needed, got {text!r}"
        ) from None
    return slowing_level(args.slowing_concurrency, max_tokens, args.slowing_phase_s)


def scenario_runs(scenario: str | None, no_slowing: bool) -> tuple[bool, bool]:
    """(run the sweep, run the slowing model) for ``--scenario`` and ``--no-slowing``:
    ``sweep`` (the default) runs both unless ``--no-slowing``; ``slowing`` only the
    slowing model (``--no-slowing`` does not empty it)."""
    sweep = (scenario or "sweep") != "slowing"
    return sweep, not no_slowing or not sweep


def slowing_policies(policies: Iterable[P]) -> list[P]:
    """The policies of a comparison that run the slowing model, in their order."""
    return [p for p in policies if p.kind in POLICY_KINDS]


def file_name(policy: PolicyLike) -> str:
    """A slowing run's document: ``slowing-<policy>.json``."""
    return f"slowing-{policy.slug}.json"


def phases_field(level: Level) -> list[list[Any]]:
    """The run document's ``slowing_phases``: [seed s after the level's start, max_tokens]."""
    return [[t, m] for t, m in level.schedule]


def plot_phases(level: Level) -> list[tuple[float, str]]:
    """The phase marks ``inflight.measure.plots.timeseries_plot`` draws on ``slowing.png``."""
    return [(t, f"max_tokens {m}") for t, m in level.schedule]
