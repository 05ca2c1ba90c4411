"""The draws of ``inflight sim generalize`` (inflight/sim/draws.py) and its pure parts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from inflight.sim import draws
from inflight.sim.draws import MAX_CONTEXT, MAX_PROMPT, SHAPES, draw
from inflight.sim.generalize import (
    REPORT_SEEDS_FROM,
    best_fixed,
    check_seeds,
    default_peers,
    meetable,
    summarize,
)
from inflight.workload.servegen import load

AZURE_HEAD = Path(__file__).parent.parent / "data" / "azure_llm_2023_code_head.csv"
SEEDS = range(1, 41)


@pytest.fixture(scope="module")
def family() -> list[draws.Draw]:
    return [draw(s, 4, duration_s=300.0) for s in SEEDS]


def test_a_draw_is_a_pure_function_of_its_seed() -> None:
    a, b = draw(11, 8), draw(11, 8)
    assert a == b  # every field, the requests included, bit for bit
    assert [r.t_s for r in a.requests] == [r.t_s for r in b.requests]
    assert draw(12, 8).requests != a.requests


def test_warm_and_cold_share_the_window_and_cold_adds_a_burst_at_once() -> None:
    warm, cold = draw(5, 6), draw(5, 6, cold=True)
    assert warm.warmup and warm.warmup_s == draws.WARMUP_S
    assert not cold.warmup and cold.warmup_s == 0
    extra = Counter(cold.requests) - Counter(warm.requests)
    assert Counter(warm.requests) - Counter(cold.requests) == Counter()  # the same window
    burst = cold.params["cold_burst"]
    assert sum(extra.values()) == burst["requests"] > 0
    assert all(r.t_s < burst["seconds"] for r in extra.elements())  # at once, for a while
    assert (warm.source, warm.shape, warm.startup_s) == (cold.source, cold.shape, cold.startup_s)


def test_the_family_has_every_shape_source_startup_and_slo(family: list[draws.Draw]) -> None:
    assert {d.shape for d in family} == set(SHAPES)
    assert {d.source for d in family} == {f"servegen:{m}" for m in load().models}
    assert len({d.startup_s for d in family}) >= 3
    assert len({(d.slo_ttft_s, d.slo_tpot_s) for d in family}) >= 4


def test_bursts_are_shorter_than_a_startup(family: list[draws.Draw]) -> None:
    bursty = [d for d in family if d.shape == "burst"]
    assert bursty and all(d.params["bursts"] for d in bursty)
    for d in bursty:
        assert all(length < d.startup_s for _, length in d.params["bursts"])


def test_lengths_and_burstiness_lie_within_the_published_ranges(
    family: list[draws.Draw],
) -> None:
    stats = load()
    for d in family:
        by_id = {c.client_id: c for c in stats.models[d.source.split(":")[1]]}
        chosen = [by_id[c["id"]] for c in d.params["clients"]]
        for c, picked in zip(chosen, d.params["clients"], strict=True):
            assert c.cv[0] <= picked["cv"] <= c.cv[2]
        lo_p = min(c.input_tokens[0] for c in chosen)
        hi_p = min(MAX_PROMPT, max(c.input_tokens[-1] for c in chosen))
        lo_o = min(1.0, *(c.output_tokens[0] for c in chosen))
        hi_o = max(c.output_tokens[-1] for c in chosen)
        for r in (*d.warmup, *d.requests):
            assert max(1, lo_p) <= r.prompt_tokens <= hi_p
            assert lo_o <= r.max_tokens <= hi_o
            assert r.prompt_tokens + r.max_tokens <= MAX_CONTEXT
        assert all(0 <= r.t_s < d.duration_s for r in d.requests)
        assert all(0 <= r.t_s < d.warmup_s for r in d.warmup)


def test_the_load_scales_with_the_fleet() -> None:
    small, large = draw(3, 2, duration_s=600.0), draw(3, 8, duration_s=600.0)
    assert small.source == large.source and small.peak_load == large.peak_load
    assert 2.5 < len(large.requests) / len(small.requests) < 6  # about 4x, Poisson noise


def test_a_trace_is_a_source_too() -> None:
    picked = [draw(s, 2, traces=[AZURE_HEAD], duration_s=5.0) for s in range(1, 30)]
    from_trace = [d for d in picked if d.source == f"trace:{AZURE_HEAD.name}"]
    assert from_trace
    lengths = {
        (int(p), int(o))
        for line in AZURE_HEAD.read_text().splitlines()[1:]
        for _, p, o in [line.split(",")]
    }
    for d in from_trace:
        assert d.shape == "trace" and d.params["rate_scale"] > 0
        assert {(r.prompt_tokens, r.max_tokens) for r in d.requests} <= {
            (max(1, p), max(1, o)) for p, o in lengths
        }


def test_choose_and_report_seeds_are_disjoint() -> None:
    check_seeds("choose", [0, REPORT_SEEDS_FROM - 1])
    check_seeds("report", [REPORT_SEEDS_FROM, REPORT_SEEDS_FROM + 49])
    with pytest.raises(ValueError, match="--purpose choose"):
        check_seeds("choose", [REPORT_SEEDS_FROM - 1, REPORT_SEEDS_FROM])
    with pytest.raises(ValueError, match="--purpose report"):
        check_seeds("report", [REPORT_SEEDS_FROM - 1])


def test_default_peers_are_the_open_loop_autoscalers_but_the_policy() -> None:
    peers = default_peers("saturation").split(",")
    assert "saturation" not in peers and "kpa" in peers and "qps" in peers
    assert not any(p.startswith("fixed:") for p in peers)


def test_summarize_gives_the_gap_distribution_and_the_wins() -> None:
    def row(sat: float, kpa: float, dominated: bool) -> dict[str, object]:
        fig = {"frontier_gap_points": sat, "dominated_by_fixed": ["fixed:3"] if dominated else []}
        return {"policies": {"saturation": fig, "kpa": {**fig, "frontier_gap_points": kpa}}}

    rows: list[dict[str, object]] = [
        row(1.0, 0.0, False),
        row(-2.0, -1.0, True),
        row(0.5, -3.0, False),
        {"draw": {}},  # a draw whose comparison failed: not judged
    ]
    s = summarize(rows, ["saturation", "kpa"])
    assert s["saturation"]["draws"] == 3
    assert s["saturation"]["gap_median"] == 0.5
    assert s["saturation"]["gap_worst"] == -2.0
    assert s["saturation"]["gap_p10"] == pytest.approx(-1.5)
    assert s["saturation"]["share_dominated"] == pytest.approx(1 / 3, abs=1e-4)
    assert s["kpa"]["beaten_by_saturation"] == pytest.approx(2 / 3, abs=1e-4)
    assert s["saturation"]["beats_every_peer"] == pytest.approx(2 / 3, abs=1e-4)


def test_a_draw_is_meetable_when_some_fixed_fleet_meets_half_the_requests() -> None:
    def comparison(*attainments: float | None) -> dict[str, object]:
        fleets = {f"fixed:{i + 1}": {"slo_attainment": a} for i, a in enumerate(attainments)}
        return {"frontier": {"fleets": fleets}}

    assert best_fixed(comparison(0.1, 0.62, 0.55)) == 0.62
    assert best_fixed(comparison(None, 0.3)) == 0.3
    assert best_fixed({"runs": {}}) is None  # no frontier: nothing known
    rows = [{"best_fixed_attainment": a} for a in (0.49, 0.5, 0.9, None)]
    assert meetable(rows) == rows[1:3]
