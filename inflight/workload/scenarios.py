"""Named open-loop scenarios (seed time) and the one way requests are planned from them.

Pure: no I/O, no clock. :func:`plan_requests` draws the arrival times, then the lengths
(prompt, then output, request by request), from ONE ``random.Random(seed)`` in that fixed
order, so the list is a function of (schedule, distributions, seed) alone: every policy
compared on a scenario sees the same requests.

Lengths in ``ramp``, ``spike`` and ``diurnal``: prompt ``lognormal:3000:0.6`` and output
``lognormal:300:0.5``, centred on docs/workload.md's meeting summary (~3,000 tokens in, ~300
out; the emulator's reference request takes 4.5 s at a full batch). SIGMA 0.6 gives a prompt
p10–p90 of about 1,160–5,400 tokens and SIGMA 0.5 an output p10–p90 of about 140–500:
transcripts vary more than summaries, whose length a prompt asks for. Start-up is 100 s in
all three (docs/workload.md's ``ramp``; long start-up is where headroom matters). Capacity
check for ``ramp``: at the 5 req/s peak, 8 reference replicas (8 × 4 slots / 4.5 s =
7.1 req/s) run at about 70 %.

The prefix-cache scenarios (issue 38; :mod:`inflight.workload.prefixes`) send 1,600-token
prompts whose first 1,500 tokens are a group's (``shared-prefix``: 8 groups;
``hot-prefix``: one; ``no-prefix``: none, the negative control) and ~100-token answers, on
one schedule: 2 req/s for 300 s, up to 8 by 600 s, held to 900 s, back to 2 by 1200 s;
1-8 replicas. Their requests carry block ids (``PlannedRequest.prefix_ids``): the
simulator's replicas cache them (``inflight sim``). They are :data:`PREFIX_SCENARIOS`, apart
from :data:`SCENARIOS`: ``inflight bench`` sends its own prompts, which would not share
these prefixes, so it does not offer them. With the default KV cache every replica
holds every group's prefix; ``--kv-blocks`` makes it smaller (8 prefixes are 88 blocks of
128 tokens).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from inflight.workload.arrivals import RateSchedule, arrival_times
from inflight.workload.lengths import LengthDist, parse_length
from inflight.workload.prefixes import PrefixShape
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
    prefix: PrefixShape | None = None  # prompts share prefixes (block ids): which

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(
                f"scenario {self.name}: need 0 <= min_replicas <= max_replicas, max >= 1,"
                f" got {self.min_replicas}..{self.max_replicas}"
            )
        if self.startup_s < 0:
            raise ValueError(f"scenario {self.name}: startup_s must be >= 0")

    def plan(self, seed: int) -> list[PlannedRequest]:
        return self.with_prefixes(
            plan_requests(self.arrivals, self.prompt_tokens, self.max_tokens, seed), seed
        )

    def with_prefixes(self, requests: list[PlannedRequest], seed: int) -> list[PlannedRequest]:
        """``requests`` with this scenario's prefix ids (unchanged without a shape)."""
        return requests if self.prefix is None else self.prefix.assign(requests, seed)


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


PREFIX_POINTS = ((0.0, 2.0), (300.0, 2.0), (600.0, 8.0), (900.0, 8.0), (1200.0, 2.0))


def _prefix_scenario(name: str, description: str, groups: int) -> Scenario:
    return Scenario(
        name,
        description + "; 1,600-token prompts, ~100-token answers, 2 → 8 → 2 req/s, 1200 s;"
        " 1-8 replicas",
        RateSchedule(PREFIX_POINTS),
        parse_length("1600", "--prompt-tokens"),
        parse_length("lognormal:100:0.5", "--max-tokens"),
        1,
        8,
        STARTUP_S,
        PrefixShape(groups, 1500),
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
# The prefix-cache scenarios: the simulator's only (the module docstring).
PREFIX_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _prefix_scenario("shared-prefix", "8 groups, each request a group's 1,500-token prefix", 8),
        _prefix_scenario("hot-prefix", "one group: every request the same 1,500-token prefix", 1),
        _prefix_scenario("no-prefix", "the negative control: no prompt shares a block", 0),
    )
}


def get_scenario(name: str) -> Scenario:
    """The named scenario; an unknown name is a ValueError naming ``--scenario``."""
    try:
        return SCENARIOS[name] if name in SCENARIOS else PREFIX_SCENARIOS[name]
    except KeyError:
        known = ", ".join(sorted({*SCENARIOS, *PREFIX_SCENARIOS}))
        raise ValueError(f"--scenario: unknown scenario {name!r} (known: {known})") from None


def plan_requests(
    arrivals: RateSchedule, prompt_tokens: LengthDist, max_tokens: LengthDist, seed: int
) -> list[PlannedRequest]:
    """The requests of one run: arrival times first, then each request's two lengths."""
    rng = random.Random(seed)
    times = arrival_times(arrivals, rng)
    return [PlannedRequest(t, prompt_tokens.sample(rng), max_tokens.sample(rng)) for t in times]
