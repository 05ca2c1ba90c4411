"""``inflight sim generalize``'s summaries on hand-made draws (pure: no simulation): the
mean gap the choose draws are judged by, and the policy's figures by shape."""

from __future__ import annotations

from typing import Any

import pytest

from inflight.sim.generalize import by_shape, markdown, meetable, summarize


def _row(seed: int, shape: str, gap: float, dominated: list[str], best: float) -> dict[str, Any]:
    figures = {"slo_attainment": 0.9, "replica_seconds": 100.0, "replica_seconds_ratio": 0.5}
    return {
        "draw": {"seed": seed, "source": "servegen:m-small", "shape": shape, "duration_s": 600.0,
                 "startup_s": 60.0, "slo": {"ttft_s": 1.0, "tpot_s": 0.05}, "requests": 10},
        "dir": f"draws/seed-{seed}",
        "best_fixed_attainment": best,
        "policies": {"saturation": {**figures, "frontier_gap_points": gap,
                                    "dominated_by_fixed": dominated}},
    }  # fmt: skip


ROWS = [
    _row(1, "burst", -9.0, ["fixed:5"], 1.0),
    _row(2, "burst", -1.0, ["fixed:4"], 1.0),
    _row(3, "ramp", 2.0, [], 1.0),
    _row(4, "step", 4.0, [], 0.3),  # no fixed fleet meets half: not meetable
    _row(5, "trace", 0.5, [], 0.9),  # a trace window keeps its own shape
]


def test_the_summary_has_the_mean_gap_the_choose_draws_are_judged_by() -> None:
    s = summarize(meetable(ROWS), ["saturation"])["saturation"]
    assert s["draws"] == 4 and s["gap_mean"] == pytest.approx((-9.0 - 1.0 + 2.0 + 0.5) / 4)
    assert s["gap_median"] == pytest.approx(-0.25) and s["share_dominated"] == 0.5


def test_by_shape_splits_the_meetable_draws_in_the_draws_order_of_shapes() -> None:
    shapes = by_shape(meetable(ROWS), "saturation")
    assert list(shapes) == ["ramp", "burst", "trace"]  # SHAPES' order, then the others
    assert shapes["burst"]["draws"] == 2 and shapes["burst"]["share_dominated"] == 1.0
    assert shapes["burst"]["gap_mean"] == pytest.approx(-5.0)
    assert shapes["ramp"]["share_dominated"] == 0.0 and "step" not in shapes
    doc = {
        "meta": {"policy": "saturation", "seeds": [1, 5], "command": ["inflight"],
                 "purpose": "choose", "seed_rule": "r", "mode": "warm", "max_replicas": 8,
                 "meetable_attainment": 0.5},
        "summary": summarize(ROWS, ["saturation"]),
        "summary_meetable": summarize(meetable(ROWS), ["saturation"]),
        "meetable_by_shape": shapes,
        "draws": ROWS,
    }  # fmt: skip
    md = markdown(doc)
    assert "### `saturation` on the meetable draws, by shape" in md
    assert "| burst | 2 | -5.00 | -5.0 | " in md and "| ramp | 1 | +2.00 |" in md
