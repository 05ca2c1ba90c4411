"""The floor tests' worked numbers, shared: 4 slots a replica (target 4), at most 8 replicas,
L every 5 s, a 10 s scale-up and 60 s scale-down window, the default recurrent floor (0.6 of
the level two separate peaks reached), no anticipation and no late scale-up."""

from __future__ import annotations

from inflight.control.policy import PolicySpec, Sample

SPEC = PolicySpec(
    queue_headroom=0.0,
    scale_up_window_s=10.0,
    scale_down_window_s=60.0,
    min_replicas=1,
    max_replicas=8,
    anticipate_s=0.0,
    startup_s=0.0,
)


def blips() -> list[Sample]:
    """L 2 every 5 s to 600 s, and one scrape of 22 at 100 s and at 400 s: each reads 12
    over the 10 s scale-up window (two samples), 22 as scraped."""
    return [Sample(5.0 * i, 22.0 if 5.0 * i in (100.0, 400.0) else 2.0) for i in range(121)]
