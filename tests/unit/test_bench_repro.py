"""The reproduction checks (docs/workload.md) and compare's plan parsing, on synthetic documents."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from inflight.measure.repro import pooled, replica_changes, reproduced, reproduction_checks
from inflight.measure.table import checks_list
from inflight.planes.policy_catalogue import parse_policies
from inflight.workload.flags import concurrency_list
from inflight.workload.slowing import slowing_level

CONCS = (4, 16, 32)


def _doc(
    rate_per_replica: float,
    replicas_by_level: dict[int, int],
    *,
    timeline: list[list[float]] | None = None,
    ll_error: float = 0.01,
    valid: bool = True,
) -> dict[str, Any]:
    """A closed-loop run: each level has 64 requests at a throughput set by its replicas."""
    levels, requests, samples = [], [], []
    t = 0.0
    for c in CONCS:
        n = replicas_by_level[c]
        thr = rate_per_replica * n
        duration = 64 / thr
        latency = c / thr  # Little: W = L / λ
        levels.append({
            "concurrency": c, "requests": 64, "errors": 0, "duration_s": duration,
            "throughput_rps": thr, "e2e_p50_s": latency, "littles_law_error": ll_error,
            "start_t": 1000.0 + t, "end_t": 1000.0 + t + duration,
        })  # fmt: skip
        requests += [[c, t, t + latency, 0.1, 300, True, ""] for _ in range(64)]
        samples += [[t + k, c, 0, n] for k in range(int(duration))]
        t += duration + 10
    return {
        "levels": levels, "requests": requests, "router_samples": samples,
        "timeline": timeline or [], "t0_unix": 1000.0, "time_scale": 1.0,
        "valid": valid, "invalid_reasons": [] if valid else ["x"],
    }  # fmt: skip


ONE = {4: 1, 16: 1, 32: 1}
TWO = {4: 2, 16: 2, 32: 2}


def _by_name(checks: list[dict[str, Any]]) -> dict[str, bool | None]:
    return {c["name"]: c["passed"] for c in checks}


def test_pooled_throughput_and_p50_over_high_concurrency() -> None:
    thr, p50 = pooled(_doc(0.9, ONE))
    assert thr == pytest.approx(0.9)
    assert p50 == pytest.approx((16 / 0.9 + 32 / 0.9) / 2)


def test_the_seed_reproduction_passes() -> None:
    sat_timeline = [[0.0, 1, 1], [100.0, 1, 1], [110.0, 2, 1], [140.0, 2, 2]]
    qps_timeline = [[0.0, 1, 1], [10.0, 2, 2], [90.0, 1, 1], [100.0, 2, 2], [150.0, 1, 1]]
    runs = {
        "fixed:1": _doc(0.89, ONE),
        "fixed:2": _doc(0.89, TWO),
        "qps": _doc(0.89, {4: 2, 16: 2, 32: 1}, timeline=qps_timeline),
        "saturation": _doc(0.89, {4: 1, 16: 2, 32: 2}, timeline=sat_timeline),
    }
    checks = reproduction_checks(runs)
    assert reproduced(checks), [c for c in checks if c["status"] == "FAIL"]
    assert {c["status"] for c in checks} == {"PASS", "INFO"}
    assert len(replica_changes(runs["qps"], 0, 1e9)) == 4


def test_the_informative_qps_figure_is_info_never_pass() -> None:
    """The qps baseline's replica changes have no bar in docs/workload.md: reported as INFO
    (with the count), neither PASS nor FAIL, and they do not decide ``reproduced``."""
    flaps = [[0.0, 1, 1], [10.0, 2, 2], [90.0, 1, 1], [100.0, 2, 2]]
    for timeline in (flaps, [[0.0, 1, 1]]):
        checks = reproduction_checks({"qps": _doc(0.89, TWO, timeline=timeline)})
        (info,) = [c for c in checks if c["name"].startswith("qps baseline: replica changes")]
        assert info["status"] == "INFO"
        assert info["passed"] is None
        assert "change(s)" in info["detail"]
        assert f"- **INFO** {info['name']}" in checks_list(checks)
        assert "**PASS** qps baseline: replica changes" not in checks_list(checks)
    fail = {"name": "x", "status": "FAIL", "passed": False, "detail": ""}
    assert reproduced([info]) and not reproduced([info, fail])


def test_saturation_like_fixed1_fails_the_gain_checks() -> None:
    runs = {"fixed:1": _doc(0.89, ONE), "saturation": _doc(0.89, ONE)}
    got = _by_name(reproduction_checks(runs))
    assert got["c≥16: saturation throughput ≥ 1.9× fixed:1"] is False
    assert got["c≥16: saturation p50 ≤ 0.55× fixed:1"] is False


def test_scaling_up_at_c4_and_flapping_fail() -> None:
    flaps = [[0.0, 1, 1], [5.0, 2, 2], [50.0, 1, 1], [80.0, 2, 2]]
    runs = {"saturation": _doc(0.89, {4: 2, 16: 2, 32: 2}, timeline=flaps)}
    got = _by_name(reproduction_checks(runs))
    assert got["c=4: saturation does not scale up"] is False
    assert got["saturation: at most one replica change in the sweep"] is False


def test_littles_law_and_frozen_validity_are_checked() -> None:
    runs = {"fixed:1": _doc(0.89, ONE, ll_error=0.15, valid=False)}
    got = _by_name(reproduction_checks(runs))
    assert got["Little's Law within 10% per level (every policy)"] is False
    assert got["fixed:1: frozen run valid"] is False


def test_slowing_checks() -> None:
    down = _doc(0.89, TWO, timeline=[[0.0, 1, 1], [10.0, 2, 2], [100.0, 1, 1]])
    hold = _doc(0.89, TWO, timeline=[[0.0, 1, 1], [10.0, 2, 2]])
    got = _by_name(reproduction_checks({}, {"qps": down, "saturation": hold}))
    assert got["slowing model: the qps baseline scales down"] is True
    assert got["slowing model: saturation holds (never scales down)"] is True
    got = _by_name(reproduction_checks({}, {"qps": hold, "saturation": down}))
    assert got["slowing model: the qps baseline scales down"] is False
    assert got["slowing model: saturation holds (never scales down)"] is False


def test_parse_policies() -> None:
    ps = parse_policies("fixed:1,fixed:2,qps,saturation")
    assert [(p.name, p.frozen, p.replicas) for p in ps] == [
        ("fixed:1", True, 1), ("fixed:2", True, 2), ("qps", False, 1), ("saturation", False, 1)
    ]  # fmt: skip
    assert ps[1].up_args(2) == ["--replicas", "2", "--no-autoscale"]
    assert ps[3].up_args(2) == [
        "--policy", "saturation", "--replicas", "1", "--max-replicas", "2"
    ]  # fmt: skip
    for bad in ("fixed:0", "hpa", "fixed:x", "qps,qps", ""):
        with pytest.raises(ValueError, match="--policies"):
            parse_policies(bad)


def test_slowing_level_schedule() -> None:
    level = slowing_level(8, [300, 600, 1200], 75.0)
    assert level.duration_s == 225.0 and level.requests is None
    assert level.schedule == ((0.0, 300), (75.0, 600), (150.0, 1200))
    with pytest.raises(ValueError, match="--slowing-max-tokens"):
        slowing_level(8, [300, 0], 75.0)


def test_concurrency_flag() -> None:
    assert concurrency_list("4,8,16") == [4, 8, 16]
    for bad in ("4,x", "0", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="--concurrency"):
            concurrency_list(bad)
