"""``inflight.sim.tune``'s search on judges whose answers are known in closed form.

The judge here is a formula, not the simulator: the search is pure and its correctness
(bisection bounds, worst seed, the cheapest meeting candidate) is what is under test. The
simulator's own judge is tested with the simulator.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import parse_metadata
from inflight import names
from inflight.sim.tune import Candidate, SearchSpace, Verdict, tune


def surface(c: Candidate, seed: int) -> Verdict:
    """Attainment falls as the target rises; a longer down window and growth headroom help
    and cost; seed 2 is the hard one."""
    att = 1.0 - 0.4 * max(0.0, c.target_saturation - 0.6)
    att += 0.02 * (c.scale_down_window_s > 60) + 0.03 * (c.growth_horizon_s > 0)
    att -= 0.01 * (seed == 2)
    cost = 0.5 / c.target_saturation + 0.05 * (c.scale_down_window_s / 60 - 1)
    cost += 0.02 * (c.growth_horizon_s > 0)
    return Verdict(min(1.0, att), cost + 0.01 * seed)


def brute_force(space: SearchSpace, goal: float, seeds: list[int]) -> Candidate:
    best: tuple[float, Candidate] | None = None
    for t in space.targets:
        for d in space.down_windows_s:
            for g in space.growth_horizons_s:
                c = Candidate(t, d, g)
                vs = [surface(c, s) for s in seeds]
                if min(v.slo_attainment for v in vs) >= goal:
                    cost = max(v.replica_seconds_ratio for v in vs)
                    if best is None or cost < best[0]:
                        best = (cost, c)
    assert best is not None
    return best[1]


def judged_candidates(space: SearchSpace) -> list[Candidate]:
    """Every candidate a search of ``space`` judges (each meets the goal; cost its target)."""
    seen: list[Candidate] = []

    def judge(c: Candidate, seed: int) -> Verdict:
        seen.append(c)
        return Verdict(1.0, c.target_saturation)

    tune(judge, space, 0.9, [1])
    return seen


@pytest.mark.parametrize("goal", [0.95, 0.97, 0.99])
def test_bisection_finds_what_a_full_grid_finds(goal: float) -> None:
    space = SearchSpace(growth_horizons_s=(0.0, 100.0))
    result = tune(surface, space, goal, seeds=[1, 2, 3])
    assert result.best is not None
    assert result.best.candidate == brute_force(space, goal, [1, 2, 3])
    # Fewer runs than the grid (11 targets x 3 windows x 2 horizons = 66 candidates).
    assert len(result.judged) < 66 / 2


def test_every_candidate_is_scored_by_its_worst_seed() -> None:
    result = tune(surface, SearchSpace(), 0.95, seeds=[1, 2, 3])
    assert result.best is not None
    for judged in result.judged:
        assert len(judged.verdicts) == 3
        assert judged.slo_attainment == min(v.slo_attainment for v in judged.verdicts)
        assert judged.replica_seconds_ratio == max(v.replica_seconds_ratio for v in judged.verdicts)


def test_an_unreachable_goal_gives_no_answer_not_a_made_up_one() -> None:
    def hopeless(c: Candidate, seed: int) -> Verdict:
        return Verdict(0.5, 1.0)

    assert tune(hopeless, SearchSpace(), 0.95, seeds=[1]).best is None


def test_metadata_uses_the_scaled_object_keys() -> None:
    meta = Candidate(0.8, 120.0, 100.0).metadata()
    assert meta == {
        "targetSaturation": "0.8",
        "scaleUpWindowSeconds": "10",
        "scaleDownWindowSeconds": "120",
        "growthHorizonSeconds": "100",
        "activationInflight": "0",
        "floorWindowSeconds": "900",  # a candidate states its floor: the default's
        "floorFraction": "0.6",
    }
    off = Candidate(0.8, 120.0, 100.0, floor_fraction=0.0).metadata()
    assert (off["floorWindowSeconds"], off["floorFraction"]) == ("0", "0")


def test_bad_goals_and_spaces_are_refused() -> None:
    with pytest.raises(ValueError, match="--attainment"):
        tune(surface, SearchSpace(), 1.5, seeds=[1])
    with pytest.raises(ValueError, match="seed"):
        tune(surface, SearchSpace(), 0.9, seeds=[])
    with pytest.raises(ValueError, match="targets"):
        SearchSpace(targets=())


def test_default_space_follows_start_up_and_scale_to_zero() -> None:
    assert SearchSpace.for_startup(100.0, 3).growth_horizons_s == (0.0, 100.0, 160.0)
    assert SearchSpace.for_startup(100.0, 3).activations == (0.0,)
    assert SearchSpace.for_startup(30.0, 0).activations == (0.0, 1.0)


def kv_bound(c: Candidate, seed: int) -> Verdict:
    """Not monotone in the target: 0.95 and 0.9 meet 0.95, 0.85-0.7 miss (replicas that
    start late under a binding cache cost without serving), 0.65 and lower meet again.
    Cost falls as the target rises."""
    t = c.target_saturation
    att = 0.96 if t >= 0.9 or t <= 0.65 else 0.90
    att = 0.80 if t > 0.95 else att
    return Verdict(att, 0.5 / t + 0.05 * (c.scale_down_window_s / 60 - 1))


def test_the_bisection_is_checked_on_the_answers_line_and_says_where_it_was_fooled() -> None:
    space = SearchSpace(down_windows_s=(60.0,))
    # Bisection alone probes the middle (0.75: misses), then ever lower targets: it would
    # settle on 0.65. The line check judges every target and finds the cheaper 0.95.
    result = tune(kv_bound, space, 0.95, seeds=[1])
    assert result.best is not None
    assert result.best.candidate.target_saturation == 0.95
    assert result.search == "bisect"
    pairs = {(hi.target_saturation, lo.target_saturation) for hi, lo in result.crossings}
    assert (0.95, 0.85) in pairs and (0.9, 0.7) in pairs
    assert all(hi.target_saturation > lo.target_saturation for hi, lo in result.crossings)


def test_grid_judges_every_target_of_every_combination() -> None:
    space = SearchSpace(down_windows_s=(60.0, 120.0))
    result = tune(kv_bound, space, 0.95, seeds=[1, 2], search="grid")
    assert len(result.judged) == len(space.targets) * 2
    assert result.best is not None
    assert result.best.candidate == Candidate(0.95, 60.0, 0.0)
    assert result.search == "grid"


def test_a_monotone_surface_reports_no_crossing() -> None:
    result = tune(surface, SearchSpace(), 0.95, seeds=[1, 2])
    assert result.crossings == ()


def test_an_unknown_search_is_named() -> None:
    with pytest.raises(ValueError, match="--search must be one of bisect, grid, got 'newton'"):
        tune(surface, SearchSpace(), 0.95, seeds=[1], search="newton")


def test_the_start_up_is_in_every_candidates_metadata_when_known() -> None:
    """``sim tune --startup-s`` simulates replicas that start that slowly; the metadata it
    prints states it (``startupSeconds``), as the README tells a user to, so the scaler
    holds scale-ups that cannot arrive in time as the search's runs did."""
    space = SearchSpace.for_startup(240.0, min_replicas=1)
    assert space.startup_s == 240.0
    meta = Candidate(0.9, 60.0, 0.0, startup_s=space.startup_s).metadata()
    assert meta[names.META_STARTUP_S] == "240"
    parsed = parse_metadata(meta).policy
    assert parsed.startup_s == 240.0
    assert parsed.anticipate_s == 270.0  # left out: it follows the start-up
    assert names.META_STARTUP_S not in Candidate(0.9, 60.0, 0.0).metadata()

    seen = judged_candidates(replace(space, targets=(1.0, 0.5)))
    assert seen and {c.startup_s for c in seen} == {240.0}


def test_excursion_margins_are_searched_and_stated_with_the_start_up() -> None:
    """``--excursion-margins 1,1.5``: each margin is a knob of its own line of targets; the
    cheapest candidate meeting the goal carries its margin into the metadata, which the
    scaler parses to the margin simulated."""
    space = replace(SearchSpace.for_startup(100.0, min_replicas=1), excursion_margins=(1.0, 1.5))

    def judge(c: Candidate, seed: int) -> Verdict:
        # the wider margin holds more late scale-ups: as good and cheaper
        return Verdict(1.0, c.target_saturation * (0.8 if c.excursion_margin == 1.5 else 1.0))

    result = tune(judge, replace(space, growth_horizons_s=(0.0,)), 0.9, [1])
    assert {j.candidate.excursion_margin for j in result.judged} == {1.0, 1.5}
    assert result.best is not None and result.best.candidate.excursion_margin == 1.5
    meta = result.best.candidate.metadata()
    assert meta[names.META_EXCURSION_MARGIN] == "1.5"
    assert parse_metadata(meta).policy.excursion_margin == 1.5
    assert names.META_EXCURSION_MARGIN not in Candidate(0.9, 60.0, 0.0).metadata()
    with pytest.raises(ValueError, match="excursion margins"):
        SearchSpace(excursion_margins=(0.5,))


def test_the_ttft_slo_searched_is_in_every_candidates_metadata() -> None:
    """With the SLO stage on by default, a candidate's runs size the fleet for a TTFT SLO:
    the one the search simulates (``sim tune --slo-ttft-s``), which the metadata states
    (``sloTtftSeconds``) so the scaler sizes for it too, not for its default 2 s."""
    space = replace(SearchSpace.for_startup(30.0, min_replicas=1), slo_ttft_s=1.0)
    meta = Candidate(0.9, 60.0, 0.0, slo_ttft_s=space.slo_ttft_s).metadata()
    assert meta[names.META_SLO_TTFT_S] == "1"
    assert parse_metadata(meta).policy.slo_ttft_s == 1.0
    assert names.META_SLO_TTFT_S not in Candidate(0.9, 60.0, 0.0).metadata()

    seen = judged_candidates(replace(space, targets=(1.0, 0.5)))
    assert seen and {c.slo_ttft_s for c in seen} == {1.0}
