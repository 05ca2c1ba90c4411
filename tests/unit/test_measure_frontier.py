"""The static frontier and the frontier gap (``inflight.measure.frontier``), on the module
docstring's worked example and on the edges it defines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inflight.measure.frontier import (
    ORIGIN,
    FleetPoint,
    dominates,
    fleet_names,
    fleet_points,
    fleet_size,
    judge,
    static_frontier,
)
from inflight.measure.openloop_report import build_comparison, comparison_markdown

# The docstring's fleets: fixed:N at 100·N replica-seconds.
FLEETS = [
    FleetPoint("fixed:1", 1, 100.0, 0.50),
    FleetPoint("fixed:2", 2, 200.0, 0.80),
    FleetPoint("fixed:3", 3, 300.0, 0.95),
    FleetPoint("fixed:4", 4, 400.0, 0.99),
]


def test_names_and_sizes() -> None:
    assert fleet_names(3) == ["fixed:1", "fixed:2", "fixed:3"]
    assert [fleet_size(n) for n in ("fixed:8", "fixed:0", "saturation", "fixed:x")] == [
        8, None, None, None,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="max_replicas"):
        fleet_names(0)


def test_dominance_needs_one_strict_side() -> None:
    assert dominates(100, 0.9, 200, 0.9)  # cheaper, as good
    assert dominates(200, 0.95, 200, 0.9)  # as cheap, better
    assert not dominates(200, 0.9, 200, 0.9)  # equal: neither
    assert not dominates(100, 0.8, 200, 0.9)  # cheaper but worse


@pytest.mark.parametrize(
    ("cost", "expected"),
    [
        (250.0, 0.875),  # halfway between fixed:2 and fixed:3
        (330.0, 0.962),  # 0.95 + 0.3 × 0.04
        (200.0, 0.80),  # at a fleet
        (50.0, 0.25),  # below fixed:1: the line from fixed:0 = (0, 0)
        (0.0, 0.0),
        (450.0, 0.99),  # above fixed:4: flat
    ],
)
def test_the_frontier_interpolates_between_neighbouring_fleets(
    cost: float, expected: float
) -> None:
    assert static_frontier(FLEETS).attainment_at(cost) == pytest.approx(expected)


def test_the_worked_example() -> None:
    a = judge(FLEETS, 250.0, 0.83)
    assert a.frontier_attainment == pytest.approx(0.875)
    assert a.gap == pytest.approx(-0.045)
    assert a.position == "fixed:2–fixed:3" and a.dominated_by == ()

    b = judge(FLEETS, 330.0, 0.90)
    assert b.gap == pytest.approx(-0.062)
    assert b.dominated_by == ("fixed:3",)

    below = judge(FLEETS, 50.0, 0.30)
    assert below.gap == pytest.approx(0.05) and below.position == "below fixed:1"

    above = judge(FLEETS, 450.0, 0.995)
    assert above.gap == pytest.approx(0.005) and above.position == "above fixed:4"
    assert above.dominated_by == ()


def test_every_cheaper_better_fleet_is_named() -> None:
    # 60 % at 250: fixed:2 (80 % at 200) dominates, fixed:1 (50 %) does not
    assert judge(FLEETS, 250.0, 0.60).dominated_by == ("fixed:2",)
    # 50 % at 400: fixed:1, 2 and 3 all do; fixed:4 (99 % at the same cost) too
    assert judge(FLEETS, 400.0, 0.50).dominated_by == ("fixed:1", "fixed:2", "fixed:3", "fixed:4")
    # exactly a fleet's point: not dominated by it (neither side strict)
    assert judge(FLEETS, 300.0, 0.95).dominated_by == ()
    assert judge(FLEETS, 300.0, 0.95).gap == pytest.approx(0.0)
    assert judge(FLEETS, 300.0, 0.95).position == "at fixed:3"


def test_a_dominated_fleet_is_left_off_the_line() -> None:
    # fixed:3 worse than fixed:2 (noise): the line goes fixed:2 → fixed:4
    fleets = [*FLEETS[:2], FleetPoint("fixed:3", 3, 300.0, 0.70), FLEETS[3]]
    front = static_frontier(fleets)
    assert [p.name for p in front.points] == ["fixed:0", "fixed:1", "fixed:2", "fixed:4"]
    assert front.attainment_at(300.0) == pytest.approx(0.895)  # halfway 0.80 → 0.99
    # a policy dominated by a fleet is never above the frontier
    v = judge(fleets, 320.0, 0.75)
    assert v.dominated_by == ("fixed:2",) and v.gap < 0


def test_the_origin_and_the_order() -> None:
    front = static_frontier(reversed(FLEETS))
    assert front.points[0] == ORIGIN
    assert [p.cost for p in front.fleets] == [100.0, 200.0, 300.0, 400.0]
    with pytest.raises(ValueError, match="at least one"):
        static_frontier([])
    with pytest.raises(ValueError, match="attainment"):
        FleetPoint("fixed:1", 1, 10.0, 1.5)


def test_fleet_points_reads_the_fixed_runs_only() -> None:
    runs: dict[str, dict[str, Any]] = {
        "fixed:2": {"slo_attainment": 0.8, "replica_seconds": 200},
        "saturation": {"slo_attainment": 0.9, "replica_seconds": 150},
        "fixed:1": {"slo_attainment": None, "replica_seconds": 100},
    }
    assert fleet_points(runs) == [FleetPoint("fixed:2", 2, 200.0, 0.8)]


# --- in the comparison (inflight.measure.openloop_report) ---------------------------------


def _run(rs: float, att: float, **kw: Any) -> dict[str, Any]:
    q = {"p50": 1.0, "p95": 2.0, "p99": 3.0}
    return {"requests_sent": 100, "slo_attainment": att, "ttft_s": q, "tpot_s": q, "e2e_s": q,
            "misses": {}, "replica_seconds": rs, "changes": 0, "reversals": 0, **kw}  # fmt: skip


META = {"created_at": None, "command": ["inflight", "x"], "time_scale": 1.0,
        "max_replicas": 4, "name": "bursty", "source": "sim"}  # fmt: skip
FLEET_RUNS = {f.name: _run(f.cost, f.attainment) for f in FLEETS}


def test_the_comparison_carries_each_policys_gap_and_dominators() -> None:
    runs = {"fixed:4": _run(400.0, 0.99), "saturation": _run(250.0, 0.83),
            "kpa": _run(330.0, 0.90)}  # fmt: skip
    doc = build_comparison(META, runs, frontier={"source": "sim", "fleets": FLEET_RUNS})
    r = doc["runs"]
    assert r["saturation"]["frontier_gap"] == pytest.approx(-0.045)
    assert r["saturation"]["frontier_attainment"] == pytest.approx(0.875)
    assert r["saturation"]["frontier_position"] == "fixed:2–fixed:3"
    assert r["saturation"]["dominated_by_fixed"] == []
    assert r["kpa"]["dominated_by_fixed"] == ["fixed:3"]
    assert r["fixed:4"]["frontier_gap"] == pytest.approx(0.0)
    fr = doc["frontier"]
    assert fr["source"] == "sim" and fr["missing"] == [] and "fixed:0" in fr["definition"]
    assert list(fr["fleets"]) == ["fixed:1", "fixed:2", "fixed:3", "fixed:4"]
    assert fr["fleets"]["fixed:2"]["replica_seconds_ratio"] == pytest.approx(0.5)
    assert all(f["on_frontier"] for f in fr["fleets"].values())
    md = comparison_markdown(doc)
    assert "## Against the static frontier" in md
    assert "| saturation | 83.0 % | 0.62 | 87.5 % | −4.5 | fixed:2–fixed:3 | none |" in md
    assert "| kpa | 90.0 % | 0.82 | 96.2 % | −6.2 | fixed:3–fixed:4 | fixed:3 |" in md
    assert "| fixed:2 | 80.0 % | 200 | 0.50 | ✓ |" in md


def test_an_invalid_or_missing_fleet_is_named_and_not_used() -> None:
    fleets = {**FLEET_RUNS, "fixed:3": _run(300.0, 0.95, valid=False, invalid_reasons=["x"])}
    del fleets["fixed:1"]
    doc = build_comparison(META, {"saturation": _run(250.0, 0.83)},
                           frontier={"source": "live", "fleets": fleets})  # fmt: skip
    fr = doc["frontier"]
    assert fr["missing"] == ["fixed:1", "fixed:3"]
    assert fr["fleets"]["fixed:3"]["on_frontier"] is False
    # the line now runs fixed:2 (200, 80 %) → fixed:4 (400, 99 %): 84.75 % at 250
    assert doc["runs"]["saturation"]["frontier_gap"] == pytest.approx(0.83 - 0.8475)
    # no fixed:4 among the runs: the frontier's is the baseline of the ratios
    assert doc["baseline"] == "fixed:4" and doc["baseline_from"] == "frontier"
    assert doc["runs"]["saturation"]["replica_seconds_ratio"] == pytest.approx(0.625)
    assert "fixed:3 (INVALID, not used)" in comparison_markdown(doc)


def test_without_a_frontier_the_gap_keys_are_none() -> None:
    doc = build_comparison(META, {"fixed:4": _run(400.0, 0.99), "saturation": _run(250.0, 0.83)})
    assert doc["frontier"] is None and doc["baseline_from"] == "runs"
    assert doc["runs"]["saturation"]["frontier_gap"] is None
    assert doc["runs"]["saturation"]["dominated_by_fixed"] is None
    assert "static frontier" not in comparison_markdown(doc)


def test_the_pareto_plot_draws_the_frontier(tmp_path: Path) -> None:
    from inflight.measure.plots import pareto_plot

    runs = {"fixed:4": _run(400.0, 0.99), "saturation": _run(250.0, 0.83)}
    doc = build_comparison(META, runs, frontier={"source": "sim", "fleets": FLEET_RUNS})
    path = pareto_plot(doc, tmp_path / "p.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fleet_past_the_frontiers_top_is_above_it_and_dominated() -> None:
    # fixed:4 buys nothing over fixed:3 (95 % both): off the line, dominated by fixed:3
    fleets = [*FLEETS[:3], FleetPoint("fixed:4", 4, 400.0, 0.95)]
    v = judge(fleets, 400.0, 0.95)
    assert v.position == "above fixed:3" and v.dominated_by == ("fixed:3",)
    assert v.gap == pytest.approx(0.0)
