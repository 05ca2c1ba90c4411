"""Priorities for an open-loop workload, and the router's classes a run is given.

``--priority-mix P:SHARE,…`` gives each planned request a priority (vLLM's: lower first;
sent as the body's ``priority``, the router's ``--priority-class`` maps it to a class) by
a seeded draw, so a mixed workload needs no trace of its own: ``0:0.5,10:0.5`` makes about
half the requests priority 0 and half 10. The draw has its own random stream (seeded by
the plan's seed), so adding a mix changes no arrival time or length. A trace's own
``"priority"`` field (inflight JSONL) and a mix are not combined: one or the other.

``--priority-class NAME:MAX_PRIORITY:DEADLINE_S`` (repeatable) and ``--max-late-s`` are
the router's (:mod:`inflight.control.hold_order`, which checks them where they are used:
the workload may not import it), in seed seconds here: ``inflight bench compare`` hands
them to every ``inflight up``, ``inflight sim`` to its simulated router, and both report
SLO attainment a class (:mod:`inflight.measure.classes`). Pure: no I/O.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from inflight.workload.trace import PlannedRequest

#: Shares of a mix must sum to 1 within this.
SHARE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class PriorityMix:
    """Priorities and their shares (each > 0, summing to 1), as given."""

    text: str
    priorities: tuple[int, ...]
    shares: tuple[float, ...]


def parse_mix(text: str, flag: str = "--priority-mix") -> PriorityMix:
    """``P:SHARE,P:SHARE,…`` → PriorityMix; ValueError naming ``flag`` and the bad item.

    >>> parse_mix("0:0.5,10:0.5").priorities
    (0, 10)
    >>> parse_mix("-1:0.2,0:0.8").shares
    (0.2, 0.8)
    """
    priorities: list[int] = []
    shares: list[float] = []
    for item in text.split(","):
        prio, sep, share = item.strip().partition(":")
        if not sep:
            raise ValueError(f"{flag}: expected PRIORITY:SHARE, e.g. 0:0.5, got {item.strip()!r}")
        try:
            p = int(prio)
        except ValueError:
            raise ValueError(f"{flag}: {item.strip()!r}: PRIORITY must be an integer") from None
        try:
            s = float(share)
        except ValueError:
            raise ValueError(f"{flag}: {item.strip()!r}: SHARE must be a number") from None
        if not 0 < s <= 1:
            raise ValueError(f"{flag}: {item.strip()!r}: SHARE must be in (0, 1]")
        if p in priorities:
            raise ValueError(f"{flag}: priority {p} given twice")
        priorities.append(p)
        shares.append(s)
    if abs(sum(shares) - 1) > SHARE_TOLERANCE:
        raise ValueError(f"{flag}: the shares must sum to 1, got {sum(shares):g} in {text!r}")
    return PriorityMix(text, tuple(priorities), tuple(shares))


def assign(
    requests: Sequence[PlannedRequest], mix: PriorityMix, seed: int
) -> tuple[PlannedRequest, ...]:
    """Each request with a priority drawn from ``mix`` (its own stream, seeded by ``seed``).

    >>> reqs = [PlannedRequest(float(t), 10, 5) for t in range(4)]
    >>> [r.priority for r in assign(reqs, parse_mix("7:1"), seed=1)]
    [7, 7, 7, 7]
    """
    rng = random.Random(f"priority-mix:{seed}")
    drawn = rng.choices(mix.priorities, weights=mix.shares, k=len(requests))
    return tuple(replace(r, priority=p) for r, p in zip(requests, drawn, strict=True))


def add_priority_flags(p: argparse.ArgumentParser) -> None:
    """``--priority-mix``, ``--priority-class`` and ``--max-late-s`` (open loop)."""
    p.add_argument(
        "--priority-mix",
        default=None,
        metavar="P:SHARE,…",
        help="open loop: give each request a priority (vLLM's, lower first; sent as the "
        "body's priority) drawn with these shares, e.g. 0:0.5,10:0.5 (seeded by --seed; "
        "a trace's own priorities otherwise)",
    )
    p.add_argument(
        "--priority-class",
        action="append",
        default=None,
        metavar="NAME:MAX_PRIORITY:DEADLINE_S",
        help="open loop: the router's --priority-class (repeatable; DEADLINE_S seed s, fifo "
        "or shed), in place of --hold-deadline-s; SLO attainment is reported a class",
    )
    p.add_argument(
        "--max-late-s",
        type=float,
        default=None,
        help="open loop: the router's --max-late-s, seed s (a held request overtaken this "
        "long past its deadline is refused 503; 0: no bound; default: the router's, 180)",
    )
