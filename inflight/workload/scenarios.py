"""Named open-loop scenarios (seed time) and the one way requests are planned from them.

Pure: no I/O, no clock. :func:`plan_requests` draws the arrival times, then the lengths
(prompt, then output, request by request), from ONE ``random.Random(seed)`` in that fixed
order, so the list is a function of (schedule, distributions, seed) alone: every policy
compared on a scenario sees the same requests.

Lengths in every scenario: prompt ``lognormal:3000:0.6`` and output ``lognormal:300:0.5``,
centred on docs/workload.md's meeting summary (~3,000 tokens in, ~300 out; the emulator's
reference request takes 4.5 s at a full batch). SIGMA 0.6 gives a prompt p10–p90 of about
1,160–5,400 tokens and SIGMA 0.5 an output p10–p90 of about 140–500: transcripts vary more
than summaries, whose length a prompt asks for. Start-up is 100 s in all three (docs/workload.md's
``ramp``; long start-up is where headroom matters). Capacity check for ``ramp``: at the
5 req/s peak, 8 reference replicas (8 × 4 slots / 4.5 s = 7.1 req/s) run at about 70 %.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from inflight.workload.arrivals import RateSchedule, arrival_times
from inflight.workload.lengths import LengthDist, parse_length
from inflight.workload.trace import PlannedRequest

PROMPT_TOKENS = parse_length("lognormal:3000:0.6", "--prompt-tokens")
MAX_TOKENS = parse_length("lognormal:300:0.5", "--max-tokens")
STARTUP_S = 100.0


@dataclass(frozen=True)
class Scenario:
    """An open-loop scenario: arrivals, lengths and the replica bounds it is run with."""

    name: str
    description: str  # one line
    arrivals: RateSchedule
    prompt_tokens: LengthDist
    max_tokens: LengthDist
    min_replicas: int
    max_replicas: int
    startup_s: float

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(
                f"scenario {self.name}: need 0 <= min_replicas <= max_replicas, max >= 1,"
                f" got {self.min_replicas}..{self.max_replicas}"
            )
        if self.startup_s < 0:
            raise ValueError(f"scenario {self.name}: startup_s must be >= 0")

    def plan(self, seed: int) -> list[PlannedRequest]:
        return plan_requests(self.arrivals, self.prompt_tokens, self.max_tokens, seed)


def _diurnal_points(
    period_s: float = 1800.0, step_s: float = 30.0
) -> tuple[tuple[float, float], ...]:
    n = round(period_s / step_s)
    return tuple(
        (i * step_s, 0.5 + 4.5 * (1.0 - math.cos(2.0 * math.pi * i * step_s / period_s)) / 2.0)
        for i in range(n + 1)
    )


def _scenario(
    name: str, description: str, points: tuple[tuple[float, float], ...], lo: int, hi: int
) -> Scenario:
    return Scenario(
        name, description, RateSchedule(points), PROMPT_TOKENS, MAX_TOKENS, lo, hi, STARTUP_S
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _scenario(
            "ramp",
            "1 req/s for 300 s, up to 5 by 600 s, hold to 900 s, down to 0.5 by 1170 s, hold"
            " to 1500 s (llm-d's 2→10→1 ramp scaled to the reference replica); 3-8 replicas",
            ((0.0, 1.0), (300.0, 1.0), (600.0, 5.0), (900.0, 5.0), (1170.0, 0.5), (1500.0, 0.5)),
            3,
            8,
        ),
        _scenario(
            "spike",
            "1.25 req/s, a 4x step to 5 req/s for 300 s from t=300, back to 1.25;"
            " 1200 s; 3-8 replicas",
            ((0.0, 1.25), (300.0, 1.25), (300.0, 5.0), (600.0, 5.0), (600.0, 1.25), (1200.0, 1.25)),
            3,
            8,
        ),
        _scenario(
            "diurnal",
            "a compressed day: 0.5 + 4.5(1 - cos(2πt/1800))/2 req/s, 0.5 → 5 at 900 s → 0.5,"
            " 1800 s; 1-8 replicas",
            _diurnal_points(),
            1,
            8,
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    """The named scenario; an unknown name is a ValueError naming ``--scenario``."""
    try:
        return SCENARIOS[name]
    except KeyError:
        known = ", ".join(sorted(SCENARIOS))
        raise ValueError(f"--scenario: unknown scenario {name!r} (known: {known})") from None


def plan_requests(
    arrivals: RateSchedule, prompt_tokens: LengthDist, max_tokens: LengthDist, seed: int
) -> list[PlannedRequest]:
    """The requests of one run: arrival times first, then each request's two lengths."""
    rng = random.Random(seed)
    times = arrival_times(arrivals, rng)
    return [PlannedRequest(t, prompt_tokens.sample(rng), max_tokens.sample(rng)) for t in times]
