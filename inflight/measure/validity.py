"""Is a run trustworthy? Pure checks that name what went wrong.

From the seed's measurement traps (docs/workload.md): the autoscaler changed the replica count
during a "fixed" run (timeline ``[1, 2]``), cold-start requests were measured, and a leaked
slot made the router's L wrong. A run is invalid, with every reason listed, when:

* it was meant to be frozen and the replica count took more than one value;
* the warm-up did not finish;
* in some level the router's L and the client's λ·W differ by more than 10%;
* some request failed (throughput would count only the survivors).

Invalid runs are reported, never averaged away.
"""

from __future__ import annotations

from collections.abc import Sequence

from inflight.measure.records import WarmupResult
from inflight.measure.stats import MAX_LITTLES_LAW_ERROR, LevelStats


def level_reasons(
    level: LevelStats, *, frozen: bool, max_error: float = MAX_LITTLES_LAW_ERROR
) -> list[str]:
    """Reasons one level is invalid (empty when it is valid)."""
    reasons: list[str] = []
    c = level.concurrency
    if frozen and len(level.replicas) > 1:
        reasons.append(
            f"c={c}: replica count changed during a frozen level: {list(level.replicas)}"
        )
    if level.l_router is None:
        reasons.append(f"c={c}: no router sample of L during the level")
    elif level.littles_law_error is not None and level.littles_law_error > max_error:
        implied = level.lambda_rps * (level.w_s or 0.0)
        reasons.append(
            f"c={c}: Little's Law error {level.littles_law_error:.1%} > {max_error:.0%}"
            f" (router L={level.l_router:.2f}, client λ·W={implied:.2f})"
        )
    if level.errors:
        reasons.append(f"c={c}: {level.errors} of {level.requests} requests failed")
    return reasons


def run_reasons(
    levels: Sequence[LevelStats],
    warmup: WarmupResult | None,
    *,
    frozen: bool,
    max_error: float = MAX_LITTLES_LAW_ERROR,
) -> list[str]:
    """Every reason the whole run is invalid; a frozen run must show one replica count overall."""
    reasons: list[str] = []
    if warmup is not None and (why := warmup.reason) is not None:
        reasons.append(why)
    if frozen:
        seen = sorted({r for lv in levels for r in lv.replicas})
        if len(seen) > 1:
            reasons.append(f"frozen run saw more than one replica count: {seen}")
    for level in levels:
        reasons.extend(level_reasons(level, frozen=frozen, max_error=max_error))
    return reasons
