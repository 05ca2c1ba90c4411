"""The simulator against the committed live runs (issue #14, item 2), in CI.

The live side is opt-in (it is slow); its results are committed, and this test simulates
the same workload again and holds the simulator to the issue's bars:

* the closed-loop sweep, ``results/2026-11-29-compare{,-2,-3}`` (``inflight bench compare``,
  time-scale 0.2, three runs of the same code path): per-level throughput within 3 % of
  every live run for ``fixed:1``, ``fixed:2`` and ``saturation`` at every level, and for
  ``qps`` at c=4; the saturation policy's replica changes: the same number as each live
  run, each within one KEDA polling interval (30 s seed).

  ``qps`` beyond c=4 misses the bar at the simulator's default phase, and that is
  reported (``results/2026-12-01-calibration/``), not widened: the seed's rule counts
  requests received in the last 10 s from 5 s scrapes, so whether an HPA sync sees an
  empty window in the 11 s gap between levels (and scales down) depends on the phase of
  Prometheus' scrapes against the HPA syncs and the load. Live runs do not record it
  (Prometheus offsets a target's scrapes by a hash of its labels). With the HPA syncs at
  the live runs' phase (t ≡ 0 mod 15 s) and the scrapes 1.5–3 s later
  (``SimConfig.scrape_offset_s``), the simulator makes the live runs' six changes, each
  within 30 s of every live run, and c=4..16 within 3 %; c=32 stays 3–5 % fast (the live
  router reads its endpoint file about once a wall second, 5 seed s at time-scale 0.2,
  and the new replica passes its health check ~1.3 s late), and c=64 turns on when
  the last scale-down lands (the live runs differ by 18 % among themselves there). The
  saturation policy's answer does not depend on the phase.
* closed forms: ``tests/unit/test_sim_core.py`` (open loop) and
  ``tests/unit/test_sim_closed_loop.py`` (fixed replicas at saturation give slots ÷
  service time; Little's Law per level).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inflight.control.hpa import KEDA_POLLING_INTERVAL_S
from inflight.sim.calibrate import calibrate

RESULTS = Path(__file__).resolve().parents[2] / "results"
SWEEPS = [
    RESULTS / d for d in ("2026-11-29-compare", "2026-11-29-compare-2", "2026-11-29-compare-3")
]
BAR = 0.03


@pytest.fixture(scope="module")
def sweep() -> dict[str, Any]:
    return calibrate(SWEEPS)


def test_the_live_sweeps_are_committed(sweep: dict[str, Any]) -> None:
    assert sweep["kind"] == "sweep" and sweep["mirrors_time_scale"] == 0.2
    assert set(sweep["policies"]) == {"fixed:1", "fixed:2", "qps", "saturation"}
    for row in sweep["policies"].values():
        assert [lv["concurrency"] for lv in row["levels"]] == [4, 8, 16, 32, 64]
        assert all(len(lv["live"]) == 3 for lv in row["levels"])


@pytest.mark.parametrize("policy", ["fixed:1", "fixed:2", "saturation"])
def test_per_level_throughput_within_3_percent_of_every_live_run(
    sweep: dict[str, Any], policy: str
) -> None:
    for lv in sweep["policies"][policy]["levels"]:
        for label, live in lv["live"].items():
            d = live["throughput_diff"]
            assert abs(d) <= BAR, f"{policy} c={lv['concurrency']} vs {label}: {d:+.2%}"
            # p50 latency too (not a bar of the issue; it holds as tightly)
            assert abs(live["p50_diff"]) <= BAR, f"{policy} c={lv['concurrency']} p50 vs {label}"


def test_qps_within_3_percent_at_c4_scales_up_at_the_first_full_window_and_flaps(
    sweep: dict[str, Any],
) -> None:
    row = sweep["policies"]["qps"]
    c4 = row["levels"][0]
    assert c4["concurrency"] == 4
    assert all(abs(x["throughput_diff"]) <= BAR for x in c4["live"].values())
    first = row["sim_changes"][0]
    for label, ch in row["live_changes"].items():
        assert (ch[0][1], ch[0][2]) == (first[1], first[2]) == (1, 2)
        assert abs(ch[0][0] - first[0]) <= KEDA_POLLING_INTERVAL_S, label
        assert len(ch) >= 4
    assert len(row["sim_changes"]) >= 4


# A scrape phase in the band that gives the live runs' qps pattern (1.5-3 s; see above).
LIVE_QPS_SCRAPE_OFFSET_S = 2.0


def test_qps_at_the_live_scrape_phase_changes_replicas_as_the_live_runs_did() -> None:
    body = calibrate(SWEEPS, ["qps"], scrape_offset_s=LIVE_QPS_SCRAPE_OFFSET_S)
    row = body["policies"]["qps"]
    assert len(row["sim_changes"]) == 6
    assert all(row["changes_within"].values()), row
    for lv in row["levels"][:3]:  # c = 4, 8, 16
        assert lv["within"], lv
    # c=32: the simulated replica serves from the instant it is ready; live, 1-5 s later.
    assert all(0 < x["throughput_diff"] < 0.06 for x in row["levels"][3]["live"].values())


@pytest.mark.parametrize("offset_s", [0.0, 2.5, 4.9])
def test_saturation_does_not_depend_on_the_scrape_phase(offset_s: float) -> None:
    body = calibrate(SWEEPS, ["saturation"], scrape_offset_s=offset_s)
    assert body["within"], body["policies"]["saturation"]["sim_changes"]


def test_saturation_changes_replicas_as_often_and_when_the_live_runs_did(
    sweep: dict[str, Any],
) -> None:
    row = sweep["policies"]["saturation"]
    assert len(row["sim_changes"]) == 1  # 1 → 2 during c=8, never back
    for label, ch in row["live_changes"].items():
        assert len(ch) == len(row["sim_changes"]), label
        for (ts, a, b), (tl, la, lb) in zip(row["sim_changes"], ch, strict=True):
            assert (a, b) == (la, lb), label
            assert abs(ts - tl) <= KEDA_POLLING_INTERVAL_S, f"{label}: sim {ts} s, live {tl} s"
        assert row["changes_within"][label]


def test_fixed_runs_never_change(sweep: dict[str, Any]) -> None:
    for policy in ("fixed:1", "fixed:2"):
        row = sweep["policies"][policy]
        assert row["sim_changes"] == [] and all(ch == [] for ch in row["live_changes"].values())


# --- the judging and the command, on small inputs ---------------------------------------
def test_changes_match_needs_the_count_the_directions_and_the_time() -> None:
    from inflight.sim.calibrate import changes_match

    live = [(196.0, 1, 2)]
    assert changes_match([(195.0, 1, 2)], live, 30.0)
    assert changes_match([(225.9, 1, 2)], live, 30.0)
    assert not changes_match([(226.1, 1, 2)], live, 30.0)
    assert not changes_match([(196.0, 2, 1)], live, 30.0)
    assert not changes_match([(196.0, 1, 2), (300.0, 2, 1)], live, 30.0)


def test_openloop_rows_judge_attainment_in_points_and_replica_seconds_relatively() -> None:
    from inflight.sim.calibrate import openloop_rows

    live = {
        "a": {"slo_attainment": 0.95, "replica_seconds": 1000.0, "changes": 4},
        "b": {"slo_attainment": 0.95, "replica_seconds": 1000.0, "changes": 4},
    }
    sim = {
        "a": {"slo_attainment": 0.93, "replica_seconds": 1049.0, "changes": 5},
        "b": {"slo_attainment": 0.91, "replica_seconds": 1051.0, "changes": 4},
    }
    rows = openloop_rows(sim, live)
    assert rows["a"]["attainment_diff_points"] == pytest.approx(-2.0)
    assert rows["a"]["attainment_within"] and rows["a"]["replica_seconds_within"]
    assert not rows["b"]["attainment_within"] and not rows["b"]["replica_seconds_within"]


def test_calibrate_names_a_bad_live_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from inflight.sim.cli import main

    out = tmp_path / "out"
    assert main(["sim", "calibrate", "--live", str(tmp_path / "nope"), "--out-dir", str(out)]) == 2
    assert "nope" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "comparison.json").write_text('{"schema": "other"}')
    assert main(["sim", "calibrate", "--live", str(tmp_path / "bad"), "--out-dir", str(out)]) == 2
    assert "not a comparison" in capsys.readouterr().err
    assert main(["sim", "calibrate", "--out-dir", str(out)]) == 2
    assert "--live" in capsys.readouterr().err
    assert not out.exists()


def test_calibrate_writes_the_table(tmp_path: Path) -> None:
    from inflight.sim.cli import main

    out = tmp_path / "out"
    argv = ["sim", "calibrate", "--live", str(SWEEPS[0]), "--policies", "fixed:1,saturation"]
    assert main([*argv, "--out-dir", str(out)]) == 0  # both within their bars
    text = (out / "calibration.md").read_text()
    assert "| saturation | 64 |" in text and "Every figure within its bar: yes." in text
    assert (out / "calibration.json").stat().st_size > 0


def test_serving_delays_run_from_the_ask_to_the_router_serving() -> None:
    from inflight.sim.calibrate import serving_delays

    timeline = [[-5.0, 3, 3], [10.0, 5, 5], [50.0, 4, 5], [200.0, 6, 6]]
    samples = [[0.0, 0, 0, 3], [115.0, 0, 0, 4], [300.0, 0, 0, 5], [330.0, 0, 0, 6]]
    # 4 asked at 10, served at 115; 5 asked at 10 but withdrawn at 50, asked again at 200
    # (served at 300); 6 asked at 200, served at 330.
    assert serving_delays(timeline, samples) == [105.0, 100.0, 130.0]
    assert serving_delays([[0.0, 2]], [[0.0, 0, 0, 2]]) == []


def test_phase_spread_says_whether_live_lies_within_the_simulated_range() -> None:
    from inflight.sim.calibrate import phase_spread

    runs = [
        {"slo_attainment": 0.62, "replica_seconds": 7300.0},
        {"slo_attainment": 0.80, "replica_seconds": 7100.0},
    ]
    sp = phase_spread(runs, {"slo_attainment": 0.79, "replica_seconds": 7226.0})
    assert sp["slo_attainment"] == [0.62, 0.80] and sp["replica_seconds"] == [7100.0, 7300.0]
    assert sp["live_inside"]
    assert not phase_spread(runs, {"slo_attainment": 0.84, "replica_seconds": 7226.0})[
        "live_inside"
    ]
    assert not phase_spread(runs, {"slo_attainment": 0.7, "replica_seconds": 7700.0})["live_inside"]


# --- the open-loop ramp: results/2026-12-01-ramp (inflight bench compare --scenario ramp,
# time-scale 0.1, seed 1; the lead's live run of 2026-12-01) -------------------------------
RAMP = RESULTS / "2026-12-01-ramp"
GROWTH = "saturation[targetSaturation=0.7;growthHorizonSeconds=200]"
# Within 3 points of SLO attainment at the default scrape phase. Missed (reported in
# results/2026-12-01-calibration/NOTES.md, not widened): saturation (-16.4 points at phase
# 0; inside the phase spread, below), epp-queue (-8.1).
ATTAINMENT_MET = ["fixed:8", GROWTH, "kpa", "ray", "vllm-waiting", "hpa-rps", "qps"]
# Within 5 % of replica-seconds. Missed: vllm-waiting (+17.5 %).
REPLICA_SECONDS_MET = ["fixed:8", "saturation", GROWTH, "kpa", "ray", "epp-queue", "hpa-rps", "qps"]


@pytest.fixture(scope="module")
def ramp() -> dict[str, Any]:
    return calibrate([RAMP])


def test_the_live_ramp_is_committed_and_simulated_on_the_same_requests(
    ramp: dict[str, Any],
) -> None:
    assert ramp["kind"] == "open-loop" and ramp["scenario"] == "ramp" and ramp["seed"] == 1
    assert set(ramp["policies"]) == set(ATTAINMENT_MET) | {"saturation", "epp-queue"}


@pytest.mark.parametrize("policy", ATTAINMENT_MET)
def test_ramp_slo_attainment_within_3_points(ramp: dict[str, Any], policy: str) -> None:
    row = ramp["policies"][policy]
    assert row["attainment_within"], f"{policy}: {row['attainment_diff_points']:+.1f} points"


@pytest.mark.parametrize("policy", REPLICA_SECONDS_MET)
def test_ramp_replica_seconds_within_5_percent(ramp: dict[str, Any], policy: str) -> None:
    row = ramp["policies"][policy]
    assert row["replica_seconds_within"], f"{policy}: {row['replica_seconds_diff']:+.1%}"


def test_ramp_saturation_is_inside_the_simulated_spread_over_scrape_phases() -> None:
    # On the 5 req/s plateau L sits on a replica boundary (ceil(L / 4) is 5 or 6): the
    # scrape phase decides whether it scales down to 5 and queues (62.5 %) or not (80 %).
    body = calibrate([RAMP], ["saturation"], phases=5)
    spread = body["policies"]["saturation"]["phase_spread"]
    assert spread["live_inside"], spread["slo_attainment"]
    assert spread["slo_attainment"][1] - spread["slo_attainment"][0] > 0.1  # bimodal


# --- with the router's hold deadline: results/2026-12-01-ramp-deadline-2 (the lead's live
# run on the code of the merge that added it and kept the HPA/KEDA syncs on their phase;
# inflight's policies with --hold-deadline-s 1.5, the peers FIFO) ------------------------
RAMP_DL = RESULTS / "2026-12-01-ramp-deadline-2"
OURS = ["saturation", GROWTH]
# Missed (results/2026-12-01-calibration-deadline/NOTES.md): epp-queue attainment (+3.8
# points), qps replica-seconds (-5.1 %); both live figures inside the phase spread.
ATTAINMENT_MET_DL = ["fixed:8", *OURS, "kpa", "ray", "vllm-waiting", "hpa-rps", "qps"]
REPLICA_SECONDS_MET_DL = ["fixed:8", *OURS, "kpa", "ray", "vllm-waiting", "epp-queue", "hpa-rps"]


@pytest.fixture(scope="module")
def ramp_dl() -> dict[str, Any]:
    return calibrate([RAMP_DL], phases=5)


def test_the_deadline_ramp_is_simulated_with_the_deadline_for_ours_only(
    ramp_dl: dict[str, Any],
) -> None:
    import json

    live = json.loads((RAMP_DL / "comparison.json").read_text())
    assert live["scenario"]["hold_deadline_s"] == 1.5
    assert set(ramp_dl["policies"]) == set(ATTAINMENT_MET_DL) | {"epp-queue"}


@pytest.mark.parametrize("policy", ATTAINMENT_MET_DL)
def test_deadline_ramp_attainment_within_3_points(ramp_dl: dict[str, Any], policy: str) -> None:
    row = ramp_dl["policies"][policy]
    assert row["attainment_within"], f"{policy}: {row['attainment_diff_points']:+.1f} points"


@pytest.mark.parametrize("policy", REPLICA_SECONDS_MET_DL)
def test_deadline_ramp_replica_seconds_within_5_percent(
    ramp_dl: dict[str, Any], policy: str
) -> None:
    row = ramp_dl["policies"][policy]
    assert row["replica_seconds_within"], f"{policy}: {row['replica_seconds_diff']:+.1%}"


def test_deadline_ramp_every_live_figure_is_inside_the_simulated_phase_spread(
    ramp_dl: dict[str, Any],
) -> None:
    outside = [
        n for n, row in ramp_dl["policies"].items() if not row["phase_spread"]["live_inside"]
    ]
    assert outside == []


@pytest.mark.parametrize("scenario", ["spike", "diurnal"])
def test_our_policies_within_both_bars_on_the_spike_and_diurnal_curve(scenario: str) -> None:
    # With the deadline a late replica costs its shortfall, not a backlog: our outcome is
    # near-linear in the decisions' timing and the simulator predicts it (FIFO did not).
    body = calibrate([RESULTS / f"2026-12-01-{scenario}-deadline"], OURS)
    for policy in OURS:
        row = body["policies"][policy]
        assert row["attainment_within"] and row["replica_seconds_within"], (policy, row)


# --- a trace comparison (issue 40's live confirmation replays generalize's draw.jsonl) ------
def _trace_comparison(tmp_path: Path) -> Path:
    """A comparison of a trace window after a warm-up, made by the simulator: calibrating
    it against the simulator must give every figure back exactly."""
    import random

    from inflight.sim.cli import main
    from inflight.workload.trace import PlannedRequest, write_trace

    rng = random.Random(7)
    t, requests = 0.0, []
    while t < 240.0:
        t += rng.expovariate(1.5 if t < 120 else 4.0)  # 120 s quiet, then 3x busier
        requests.append(PlannedRequest(round(t, 3), rng.randint(100, 2000), rng.randint(20, 200)))
    trace = tmp_path / "draw.jsonl"
    write_trace(trace, requests)
    live = tmp_path / "live"
    argv = ["sim", "compare", "--trace", str(trace), "--trace-start-s", "120",
            "--trace-warmup-s", "60", "--trace-duration-s", "100", "--min-replicas", "1",
            "--max-replicas", "3", "--startup-s", "15", "--policies", "fixed:1,saturation",
            "--seeds", "1", "--no-frontier", "--out-dir", str(live)]  # fmt: skip
    assert main(argv) == 0
    return live


def test_a_trace_comparison_is_simulated_on_the_same_window_and_warmup(tmp_path: Path) -> None:
    live = _trace_comparison(tmp_path)
    body = calibrate([live], phases=1)
    assert body["kind"] == "open-loop" and body["scenario"] == "trace"
    assert set(body["policies"]) == {"fixed:1", "saturation"}
    for name, row in body["policies"].items():
        assert row["attainment_diff_points"] == pytest.approx(0.0), name
        assert row["replica_seconds_diff"] == pytest.approx(0.0), name
    # Without its warm-up the saturation policy would enter the window at one replica.
    sc = json.loads((live / "comparison.json").read_text())["scenario"]
    assert sc["trace_warmup"]["duration_s"] == 60.0


def test_a_trace_moved_beside_the_comparison_is_found_and_a_lost_one_named(
    tmp_path: Path,
) -> None:
    from inflight.sim.calibrate import CalibrationError

    live = _trace_comparison(tmp_path)
    (tmp_path / "draw.jsonl").rename(live / "draw.jsonl")  # as a results folder keeps it
    assert calibrate([live], ["fixed:1"])["policies"]["fixed:1"]["attainment_within"]
    (live / "draw.jsonl").unlink()
    with pytest.raises(CalibrationError, match=r"draw\.jsonl is not there"):
        calibrate([live], ["fixed:1"])


# --- issue 40, item 4: fresh draws replayed live (results/2026-12-07-live-draws) ---------
LIVE_DRAWS = RESULTS / "2026-12-07-live-draws"


@pytest.mark.parametrize(
    ("live", "fleets"),
    [("live-1000900", {"fixed:6", "fixed:7"}), ("live-1000902", {"fixed:7", "fixed:8"})],
)
def test_the_live_replays_of_fresh_draws_agree_with_the_simulator(live: str, fleets: set) -> None:
    # Seed 1000900 warm (DeepSeek-R1, a decline, 30 s start-up) and 1000902 cold (DeepSeek-R1,
    # a step entered at one replica), each replayed through `inflight up` at time-scale 0.1,
    # its draw.jsonl.gz kept beside. 1000900's fixed:7 run is flagged (its sender fell behind,
    # its stack stopped unclean) yet agrees as well.
    body = calibrate([LIVE_DRAWS / live])
    assert body["scenario"] == "trace"
    assert set(body["policies"]) == {"saturation", *fleets}
    for name, row in body["policies"].items():
        assert row["attainment_within"], f"{name}: {row['attainment_diff_points']:+.1f} points"
        assert row["replica_seconds_within"], f"{name}: {row['replica_seconds_diff']:+.1%}"
