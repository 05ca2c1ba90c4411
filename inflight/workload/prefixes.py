"""Shared prompt prefixes for the prefix-cache scenarios: which requests share what.

A :class:`PrefixShape` gives each planned request its prompt as block ids
(``PlannedRequest.prefix_ids``, one id per ``unit_tokens`` tokens, each standing for every
token up to its block's end, as Mooncake's ``hash_ids``): the first ``prefix_tokens`` are
its group's, the rest its own. ``groups`` 8 is the issue's shared-prefix workload (8 groups ×
1,500-token prefix + 100-token suffix), 1 one hot group (sglang#21199: where a cache-aware
router may lose to round robin), 0 the negative control (no request shares a block).
Pure: the groups are drawn from their own ``random.Random``, so the arrivals and lengths
stay those of :func:`inflight.workload.scenarios.plan_requests` for the same seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from inflight.workload.trace import PlannedRequest

_GROUP = 10**9  # a group's ids: (group + 1) × _GROUP + block
_OWN = 10**15  # a request's own ids: _OWN + request × _OWN_STRIDE + block
_OWN_STRIDE = 10**5


@dataclass(frozen=True)
class PrefixShape:
    """``groups`` groups (0: none shared) of a ``prefix_tokens``-token prefix."""

    groups: int
    prefix_tokens: int
    unit_tokens: int = 100

    def __post_init__(self) -> None:
        if self.groups < 0 or self.prefix_tokens < 0 or self.unit_tokens < 1:
            raise ValueError(f"a prefix shape needs groups, prefix ≥ 0 and unit ≥ 1: {self}")

    @property
    def text(self) -> str:
        if not self.groups:
            return "no shared prefix"
        return f"{self.groups} group(s) × {self.prefix_tokens}-token shared prefix"

    def assign(self, requests: Sequence[PlannedRequest], seed: int) -> list[PlannedRequest]:
        """``requests`` with their prefix ids (groups drawn uniformly, seeded).

        >>> from inflight.workload.trace import PlannedRequest as P
        >>> a, b = PrefixShape(1, 200).assign([P(0.0, 300, 5), P(1.0, 300, 5)], seed=1)
        >>> a.prefix_ids[:2] == b.prefix_ids[:2], a.prefix_ids[2] == b.prefix_ids[2]
        (True, False)
        """
        rng = random.Random(f"prefix-groups:{seed}")
        shared = self.prefix_tokens // self.unit_tokens
        out: list[PlannedRequest] = []
        for i, r in enumerate(requests):
            units = -(-r.prompt_tokens // self.unit_tokens)
            group = rng.randrange(self.groups) if self.groups else -1
            ids = tuple(
                (group + 1) * _GROUP + u
                if group >= 0 and u < shared
                else _OWN + i * _OWN_STRIDE + u
                for u in range(units)
            )
            out.append(replace(r, prefix_ids=ids, prefix_block_tokens=self.unit_tokens))
        return out
