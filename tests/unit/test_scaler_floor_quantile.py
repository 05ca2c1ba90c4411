"""The floor's statistic, stepped through time: which level of the remembered peaks it holds
(``floorStatistic``): "peak" (the highest, the default), "quantile" (the level L exceeded for
at most ``floorQuantile`` of the floor window) or "recurrent" (the highest level reached in
``floorRecurrences`` separate peaks). A single surge should not hold capacity for the whole
window; bursts that come back should."""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import (
    PolicySpec,
    Sample,
    Window,
    decide,
    evaluate,
    floor_quantile,
)
from inflight.control.recurrence import floor_recurrent
from tests.unit.policy_pins import PRE_HEADROOM

# 4 slots a replica, at most 8 replicas (the floor's cap: 32), L smoothed over 10 s.
BASE = {
    "queue_headroom": 0.0,  # tests.unit.policy_pins: the settings these figures were written for
    "scale_down_window_s": 60.0,
    "floor_window_s": 600.0,
    "floor_fraction": 0.5,
    "min_replicas": 1,
    "max_replicas": 8,
    "scale_up_window_s": 10.0,
    "floor_statistic": "peak",  # each statistic below is named; no lone peak held unless said
    "floor_single_window_s": 0.0,
    "floor_single_fraction": 0.0,
}
PEAK = PolicySpec(**BASE)  # type: ignore[arg-type]
QUANTILE = replace(PEAK, floor_statistic="quantile", floor_quantile=0.1)
RECURRENT = replace(PEAK, floor_statistic="recurrent")


def series(values: list[float], step_s: float = 10.0) -> list[Sample]:
    return [Sample(step_s * i, v) for i, v in enumerate(values)]


def traffic(end_s: float, bursts: list[tuple[float, float]], high: float = 20.0) -> list[Sample]:
    """L every 5 s from 0 to ``end_s``: ``high`` inside each [start, end) burst, 2 elsewhere."""
    return [
        Sample(t, high if any(a <= t < b for a, b in bursts) else 2.0)
        for t in (5.0 * i for i in range(int(end_s / 5) + 1))
    ]


ONE_SURGE = [(100.0, 400.0)]  # 300 s, like the spike scenario's
BURSTS = [(100.0, 160.0), (300.0, 360.0), (500.0, 560.0)]  # 60 s every 200 s


def test_quantile_worked_example() -> None:
    # The docstring's: window 600 s, values every 10 s, 60 s allowed above the level.
    two = [2.0] * 60
    two[10:16] = two[40:46] = [20.0] * 6
    assert floor_quantile(series(two), 0.1, 600.0) == 20.0  # 120 s above 2
    one = [2.0] * 60
    one[10:16] = [20.0] * 6
    assert floor_quantile(series(one), 0.1, 600.0) == 2.0  # 60 s above 2: allowed
    # A smaller quantile allows less: at 0.05 (30 s) the single burst is held too.
    assert floor_quantile(series(one), 0.05, 600.0) == 20.0
    # The time before the history starts counts as quiet: 60 s of L 20 alone, at 0.1 of
    # 600 s, is allowed (level 0), at 0.05 it is not.
    assert floor_quantile(series([20.0] * 7), 0.1, 600.0) == 0.0
    assert floor_quantile(series([20.0] * 7), 0.05, 600.0) == 20.0
    assert floor_quantile([], 0.1, 600.0) == 0.0


def test_recurrent_worked_example() -> None:
    assert floor_recurrent(series([2, 20, 20, 2, 16, 2]), 2) == 16.0
    # One surge with a shallow dip (to 12, above half of 20) is one peak.
    assert floor_recurrent(series([2, 20, 12, 20, 2]), 2) == 0.0
    # A dip to exactly half separates; three peaks give the third's level at 3.
    assert floor_recurrent(series([20, 10, 20]), 2) == 20.0
    assert floor_recurrent(series([2, 20, 2, 16, 2, 12, 2]), 3) == 12.0
    assert floor_recurrent(series([2, 20, 2, 16, 2, 12, 2]), 1) == 20.0
    assert floor_recurrent([], 2) == 0.0


@pytest.mark.parametrize(
    ("now_s", "peak", "recurrent"),
    [
        # During the surge every statistic holds L itself (the 60 s maximum, 20).
        (390.0, 20.0, 20.0),
        # 60 s after it: the 60 s maximum is 2; the peak floor holds 0.5 x 20 = 10 (3
        # replicas) until the surge leaves the 600 s window; one surge is no recurrence.
        (470.0, 10.0, 2.0),
        (900.0, 10.0, 2.0),
        # The surge's last smoothed L above 2 (11 at 400 s: 20 and 2 in its 10 s) has left
        # the 600 s window at 1010 s: gone for both.
        (1010.0, 2.0, 2.0),
    ],
)
def test_a_single_surge_holds_no_recurrent_floor(
    now_s: float, peak: float, recurrent: float
) -> None:
    samples = traffic(now_s, ONE_SURGE)
    assert decide(samples, PEAK, now_s, ready_replicas=5).value == pytest.approx(peak)
    assert decide(samples, RECURRENT, now_s, ready_replicas=5).value == pytest.approx(recurrent)


def test_a_single_surge_holds_no_quantile_floor() -> None:
    # 305 s above 2 (the smoothed L of 100-400 s) in a 600 s window: a quantile of 0.6
    # (360 s allowed) lets it go.
    spec = replace(PEAK, floor_statistic="quantile", floor_quantile=0.6)
    samples = traffic(470.0, ONE_SURGE)
    assert decide(samples, spec, 470.0, ready_replicas=5).value == pytest.approx(2.0)
    # At 0.1 (60 s allowed) a 300 s surge is held, as by the peak.
    assert decide(samples, QUANTILE, 470.0, ready_replicas=5).value == pytest.approx(10.0)


def test_recurring_bursts_hold_the_floor_stepped_through_time() -> None:
    # Bursts of 60 s at 100, 300 and 500 s. Stepping every 20 s from 180 s (the first
    # burst has left the 60 s maximum at 230 s): the peak floor holds 10 from the first
    # burst on; the recurrent floor only once a second burst has come (300 s), then 10 too.
    rows = []
    for now_s in range(180, 1001, 20):
        samples = traffic(float(now_s), BURSTS)
        p = decide(samples, PEAK, float(now_s), ready_replicas=3).value
        r = decide(samples, RECURRENT, float(now_s), ready_replicas=3).value
        rows.append((now_s, p, r))
    quiet_between = [(t, p, r) for t, p, r in rows if 240 <= t < 300]
    assert quiet_between and all(p == 10.0 and r == 2.0 for _, p, r in quiet_between)
    after_second = [(t, p, r) for t, p, r in rows if 440 <= t < 500 or 640 <= t <= 900]
    assert after_second and all(p == r == 10.0 for _, p, r in after_second)
    # The second burst's last smoothed L above 2 (11 at 360 s) leaves the window at 960 s:
    # the third is then alone, so the recurrent floor lets go before the peak floor does.
    assert [r for t, _, r in rows if t == 980] == [2.0]
    assert [p for t, p, _ in rows if t == 980] == [10.0]


def test_a_single_window_holds_a_peak_until_it_could_have_come_back() -> None:
    # floorSingleWindowSeconds 200: the first burst's peak (its last smoothed L above 2: 11
    # at 160 s) is held until 360 s, so the second burst (300 s) finds 3 replicas' worth;
    # a single surge (smoothed L 20 until 395 s, 11 at 400 s) is let go at 605 s, not
    # 1010 s as by the peak floor.
    spec = replace(RECURRENT, floor_single_window_s=200.0)
    bursts = traffic(280.0, BURSTS)
    assert decide(bursts, RECURRENT, 280.0, ready_replicas=3).value == pytest.approx(2.0)
    assert decide(bursts, spec, 280.0, ready_replicas=3).value == pytest.approx(10.0)
    assert "or of one in the last 200 s" in decide(bursts, spec, 280.0, ready_replicas=3).reason
    surge = [
        (t, decide(traffic(t, ONE_SURGE), spec, t, ready_replicas=5).value)
        for t in (560.0, 595.0, 600.0, 605.0, 900.0)
    ]
    assert surge == [(560.0, 10.0), (595.0, 10.0), (600.0, 5.5), (605.0, 2.0), (900.0, 2.0)]


def test_a_single_fraction_holds_a_lone_surge_lower_for_the_whole_single_window() -> None:
    # floorSingleFraction 0.25 with a 600 s single window: one surge (smoothed L 20 until
    # 395 s, 11 at 400 s) holds 0.25 x 20 = 5 (2 replicas) until its last L 20 leaves the
    # window, not 0.5 x 20 = 10 as the peak floor would, and not nothing as the recurrent
    # floor alone; then 0.25 x 11 at 1000 s, and L itself from 1005 s.
    spec = replace(RECURRENT, floor_single_window_s=600.0, floor_single_fraction=0.25)
    surge = [
        (t, decide(traffic(t, ONE_SURGE), spec, t, ready_replicas=5).value)
        for t in (560.0, 995.0, 1000.0, 1005.0)
    ]
    assert surge == [(560.0, 5.0), (995.0, 5.0), (1000.0, 2.75), (1005.0, 2.0)]
    assert decide(traffic(560.0, ONE_SURGE), PEAK, 560.0, ready_replicas=5).value == 10.0
    assert decide(traffic(560.0, ONE_SURGE), RECURRENT, 560.0, ready_replicas=5).value == 2.0
    reason = decide(traffic(560.0, ONE_SURGE), spec, 560.0, ready_replicas=5).reason
    assert "or at 0.25 x of one in the last 600 s" in reason
    # Bursts that come back hold the floor's own fraction: 0.5 x 20 once the second has come,
    # the single fraction's 0.25 x 20 before it.
    assert decide(traffic(280.0, BURSTS), spec, 280.0, ready_replicas=3).value == 5.0
    assert decide(traffic(640.0, BURSTS), spec, 640.0, ready_replicas=3).value == 10.0
    # 0 is the floor's fraction (floorSingleWindowSeconds as before the key).
    same = replace(spec, floor_single_fraction=0.0)
    assert decide(traffic(560.0, ONE_SURGE), same, 560.0, ready_replicas=5).value == 10.0


def test_the_default_holds_recurring_bursts_at_its_fraction_and_a_lone_surge_lower() -> None:
    # The shipped metadata's floor (results/2026-12-02-single-fraction): 900 s, 0.6 of the
    # level that recurs, 0.3 of a peak that has not (yet) come back.
    spec = replace(parse_metadata(PRE_HEADROOM).policy, min_replicas=1, max_replicas=8)
    assert (spec.floor_window_s, spec.floor_fraction) == (900.0, 0.6)
    assert decide(traffic(560.0, ONE_SURGE), spec, 560.0, ready_replicas=5).value == 6.0
    assert decide(traffic(280.0, BURSTS), spec, 280.0, ready_replicas=3).value == 6.0
    assert decide(traffic(640.0, BURSTS), spec, 640.0, ready_replicas=3).value == 12.0
    # The highest peak's floor, the default before: 0.6 x 20 for the surge too.
    peak = replace(spec, floor_statistic="peak")
    assert decide(traffic(560.0, ONE_SURGE), peak, 560.0, ready_replicas=5).value == 12.0


def test_recurring_bursts_hold_the_quantile_floor() -> None:
    # Three bursts: 180 s above 2, over the 60 s a quantile of 0.1 allows: held at 20 x 0.5.
    samples = traffic(640.0, BURSTS)
    assert decide(samples, QUANTILE, 640.0, ready_replicas=3).value == pytest.approx(10.0)


def test_the_statistic_reads_the_capped_peak() -> None:
    # L 100 is beyond 8 replicas x 4 slots: remembered as 32 by every statistic.
    samples = traffic(640.0, BURSTS, high=100.0)
    assert decide(samples, RECURRENT, 640.0, ready_replicas=3).value == pytest.approx(16.0)
    assert decide(samples, QUANTILE, 640.0, ready_replicas=3).value == pytest.approx(16.0)


def test_the_reason_names_the_statistic() -> None:
    samples = traffic(640.0, BURSTS)
    r = decide(samples, RECURRENT, 640.0, ready_replicas=3).reason
    assert r.startswith("floor: 0.5 x the peak of L over the last 600 s, the level of 2 separate")
    q = decide(samples, QUANTILE, 640.0, ready_replicas=3).reason
    assert "the level exceeded 0.1 of the time" in q


def test_evaluate_passes_the_statistic_through() -> None:
    samples = traffic(470.0, ONE_SURGE)
    window = Window(tuple(samples), (), (Sample(0.0, 5.0),))
    assert evaluate(window, RECURRENT, 470.0).value == pytest.approx(2.0)
    assert evaluate(window, PEAK, 470.0).value == pytest.approx(10.0)


def test_metadata_keys_are_parsed_defaulted_and_checked() -> None:
    default = parse_metadata({}).policy
    assert (default.floor_statistic, default.floor_quantile, default.floor_recurrences) == (
        names.DEFAULT_FLOOR_STATISTIC,
        names.DEFAULT_FLOOR_QUANTILE,
        names.DEFAULT_FLOOR_RECURRENCES,
    )
    given = {
        names.META_FLOOR_STATISTIC: "quantile",
        names.META_FLOOR_QUANTILE: "0.25",
        names.META_FLOOR_RECURRENCES: "3",
        names.META_FLOOR_SINGLE_WINDOW_S: "300",
        names.META_FLOOR_SINGLE_FRACTION: "0.3",
        names.META_TIME_SCALE: "0.1",
    }
    spec = parse_metadata(given, experimental=True).policy
    # The scaler's own reading: the quantile statistic and its key were tried, not adopted.
    with pytest.raises(MetadataError, match=r"floorStatistic.*refused by the scaler"):
        parse_metadata(given)
    with pytest.raises(MetadataError, match=r"floorQuantile.*refused by the scaler"):
        parse_metadata({names.META_FLOOR_QUANTILE: "0.25"})
    assert (spec.floor_statistic, spec.floor_quantile, spec.floor_recurrences) == (
        "quantile",
        0.25,
        3,
    )
    assert spec.floor_single_window_s == pytest.approx(30.0)  # time-scaled as every window
    assert parse_metadata({}).policy.floor_single_window_s == names.DEFAULT_FLOOR_SINGLE_WINDOW_S
    assert spec.floor_single_fraction == pytest.approx(0.3)  # a fraction: not time-scaled
    assert parse_metadata({}).policy.floor_single_fraction == names.DEFAULT_FLOOR_SINGLE_FRACTION
    for key, bad in (
        (names.META_FLOOR_STATISTIC, "max"),
        (names.META_FLOOR_QUANTILE, "0"),
        (names.META_FLOOR_QUANTILE, "1"),
        (names.META_FLOOR_QUANTILE, "-0.1"),
        (names.META_FLOOR_QUANTILE, "nan"),
        (names.META_FLOOR_RECURRENCES, "0"),
        (names.META_FLOOR_RECURRENCES, "1.5"),
        (names.META_FLOOR_RECURRENCES, "101"),
        (names.META_FLOOR_SINGLE_WINDOW_S, "-1"),
        (names.META_FLOOR_SINGLE_WINDOW_S, "90000"),
        (names.META_FLOOR_SINGLE_FRACTION, "1.5"),
        (names.META_FLOOR_SINGLE_FRACTION, "-0.1"),
        (names.META_FLOOR_SINGLE_FRACTION, "half"),
    ):
        with pytest.raises(MetadataError, match=key):
            parse_metadata({key: bad}, experimental=True)
