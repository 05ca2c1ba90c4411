"""Prometheus in virtual time: instant and range evaluation, rate(), and the scaler's window."""

from __future__ import annotations

import math

import pytest

from external_scaler.metadata import parse_metadata
from external_scaler.sources.prometheus import window_from_matrix
from external_scaler.sources.promql import range_query
from inflight import names
from inflight.control.policy import Sample
from inflight.control.trigger import scaler_metadata
from inflight.planes.scaler_client import ScalerUnavailable
from inflight.sim import scrapes as S
from inflight.sim.scaler import SimScaler
from tests.unit.policy_pins import PRE_HEADROOM, STAGE_ALONE

# The 70 s window these cases count steps in: the floor (on by default) looks back 910 s.
# No 900 s memory: the floor off, and the late scale-up's excursions (on by default).
NO_FLOOR = {
    names.META_FLOOR_WINDOW_S: "0",
    names.META_STARTUP_S: "0",
    # tests.unit.policy_pins: the settings these figures were written for
    names.META_QUEUE_HEADROOM: "0",
    names.META_SCALE_DOWN_WINDOW_S: "60",
}


def _scrapes(values: list[tuple[float, float]], ready: float | None = 2.0) -> S.Scrapes:
    """Scrapes at the given times with L = value, ready 2 (None: no such series, NaN as a
    sum over nothing reads), received = 10 × t."""
    s = S.Scrapes()
    for t, v in values:
        s.scrape(
            t,
            {
                S.INFLIGHT: v,
                S.QUEUED: 0.0,
                S.RECEIVED: 10.0 * t,
                S.READY: math.nan if ready is None else ready,
                S.VLLM_WAITING: 0.0,
                S.VLLM_RUNNING: v,
            },
        )
    return s


def test_instant_reads_the_newest_sample_within_the_lookback() -> None:
    s = _scrapes([(0.0, 1.0), (5.0, 2.0), (10.0, 3.0)])
    assert s.instant(S.INFLIGHT, 4.999) == 1.0
    assert s.instant(S.INFLIGHT, 5.0) == 2.0  # a sample at T is read at T
    assert s.instant(S.INFLIGHT, -1.0) is None
    assert s.instant(S.INFLIGHT, 10.0 + S.LOOKBACK_DELTA_S + 0.001) is None  # > 5 min: gone
    assert s.instant(S.INFLIGHT, 10.0 + S.LOOKBACK_DELTA_S) == 3.0  # 5 min exactly: read


def test_scrapes_must_move_forward() -> None:
    s = _scrapes([(5.0, 1.0)])
    with pytest.raises(ValueError, match="not after"):
        s.scrape(5.0, dict.fromkeys(S.SERIES, 0.0))


@pytest.mark.parametrize(
    ("at_s", "expected"),
    [
        (60.0, 10.0),  # samples 0..60 every 5 s, +50 each: no extrapolation needed
        (62.0, 10.0),  # samples 5..60: extrapolated by 3 s and 2 s to the range's ends
    ],
)
def test_rate_extrapolates_as_prometheus_does(at_s: float, expected: float) -> None:
    s = _scrapes([(5.0 * i, 0.0) for i in range(13)])
    assert s.rate(S.RECEIVED, at_s, 60.0) == pytest.approx(expected)


def test_rate_does_not_extrapolate_a_counter_below_zero() -> None:
    # Counter 10 × t sampled at 20..60 over a 60 s range ending at 60: the 20 s before the
    # first sample would extrapolate to -100 before 0 requests; Prometheus stops at zero
    # (durationToZero = 40 × 200/400 = 20 s, = the gap, so the full 20 s still counts),
    # then adds at most half an interval where the gap exceeds 1.1 intervals: 2.5 s.
    s = _scrapes([(20.0 + 5.0 * i, 0.0) for i in range(9)])
    # increase 400 over 40 s sampled; start gap 20 > 5.5 → + 2.5 s; end gap 0 → 42.5 s
    assert s.rate(S.RECEIVED, 60.0, 60.0) == pytest.approx(400 * (42.5 / 40.0) / 60.0)
    assert s.rate(S.RECEIVED, 20.0, 60.0) is None  # one sample: no rate


def test_range_matrix_gives_the_scalers_window() -> None:
    # L stepped every 5 s; the scaler's range query (step 1 s) sees the last sample at
    # every step, and the window it builds is the live one's.
    s = _scrapes([(float(t), float(t // 5)) for t in range(0, 101, 5)])
    spec = parse_metadata(scaler_metadata(4, 1.0, "saturation", NO_FLOOR))
    query = range_query(spec)
    start, end = query.bounds(100.4)
    assert end == 100.0
    window = window_from_matrix(s.matrix(query, start, end), query, start, end)
    assert window.inflight[-1] == Sample(100.0, 20.0)
    assert Sample(99.0, 19.0) in window.inflight  # step 99 reads the sample at 95
    assert window.ready_replicas[-1].value == 2.0
    assert window.arrivals_total[-1].value - window.arrivals_total[0].value == pytest.approx(
        10.0 * (100.0 - 25.0)  # the counter's increase over the steps that have a sample
    )


def test_sim_scaler_holds_on_a_gap_scales_up_on_it_and_refuses_without_a_count() -> None:
    """The live scaler's guard, in virtual time: a window that may understate L raises or
    keeps the count, never lowers it; UNAVAILABLE only when nothing is known to be safe."""
    clock = [0.0]
    s = _scrapes([(float(t), 9.0) for t in range(0, 41, 5)])
    metadata = scaler_metadata(4, 1.0, "saturation", STAGE_ALONE)  # the guard alone
    scaler = SimScaler(metadata, s, lambda: clock[0])
    assert scaler.metric_spec().target == 4.0
    clock[0] = 40.0
    # 70 s window but history only from 0: a gap; 1 in flight would lower 2 ready to 1,
    # so the answer keeps 2 (2 x 4 = 8), active
    s2 = _scrapes([(float(t), 1.0) for t in range(0, 41, 5)])
    held = SimScaler(metadata, s2, lambda: clock[0])
    assert held.metric_value("inflight") == 8.0 and held.is_active()
    assert held.decisions[-1].desired_replicas == 2 and held.decisions[-1].partial
    # 9 in flight on 2 ready at 4 slots: scale up to 3, allowed on a partial window
    assert scaler.metric_value("inflight") == 9.0
    assert scaler.is_active()
    assert scaler.decisions[-1].desired_replicas == 3
    # no ready count: only an answer at maxReplicaCount is known not to lower the count
    s3 = _scrapes([(float(t), 1.0) for t in range(0, 41, 5)], ready=None)
    with pytest.raises(ScalerUnavailable, match=r"UNAVAILABLE.*ready replica count is unknown"):
        SimScaler(metadata, s3, lambda: clock[0]).metric_value("inflight")


def test_sim_scaler_rejects_bad_metadata_naming_the_key() -> None:
    from external_scaler.errors import MetadataError

    bad = {**scaler_metadata(4, 1.0, "saturation"), names.META_TARGET_SATURATION: "x"}
    with pytest.raises(MetadataError, match=names.META_TARGET_SATURATION):
        SimScaler(bad, S.Scrapes(), lambda: 0.0)


# --- router targets down (issue 26, item 6) -------------------------------------------------
def _fleet_scrapes(
    routers: int, down: tuple[S.RouterDown, ...], level: float = 8.0, until_s: int = 300
) -> S.Scrapes:
    """Every 5 s from 0 to ``until_s``: the router holds L = ``level`` (shared by
    ``routers`` targets), 2 ready, received = 10 × t."""
    s = S.Scrapes(routers, down)
    for t in range(0, until_s + 1, 5):
        s.scrape(
            float(t),
            {
                S.INFLIGHT: level,
                S.QUEUED: 0.0,
                S.RECEIVED: 10.0 * t,
                S.READY: 2.0,
                S.VLLM_WAITING: 0.0,
                S.VLLM_RUNNING: level,
            },
        )
    return s


def test_the_only_router_down_leaves_no_l_and_the_replicas_series_as_they_are() -> None:
    s = _fleet_scrapes(1, (S.RouterDown(100.0, 200.0),))
    assert s.instant(S.INFLIGHT, 99.0) == 8.0
    assert s.instant(S.INFLIGHT, 100.0) is None  # the failed scrape marked it stale
    assert s.instant(S.READY, 150.0) is None
    assert s.instant(S.VLLM_RUNNING, 150.0) == 8.0  # the replicas are scraped
    assert s.instant(S.INFLIGHT, 200.0) == 8.0
    # rate() skips the stale points: no sample in [135, 195] → none. The counter went on
    # counting: a range with samples on both sides of the gap has its whole increase, one
    # that starts inside it only what came after (Prometheus' extrapolation: half a step)
    assert s.rate(S.RECEIVED, 195.0, 60.0) is None
    assert s.rate(S.RECEIVED, 260.0, 180.0) == pytest.approx(10.0)
    assert s.rate(S.RECEIVED, 260.0, 120.0) == pytest.approx(600 * (62.5 / 60) / 120)


def test_one_router_of_two_down_halves_l_and_the_arrivals() -> None:
    s = _fleet_scrapes(2, (S.RouterDown(100.0, 200.0),))
    assert s.instant(S.INFLIGHT, 50.0) == 8.0
    assert s.instant(S.INFLIGHT, 150.0) == 4.0  # the other target's share
    assert s.instant(S.READY, 150.0) == 2.0  # every router sees every endpoint
    assert s.rate(S.RECEIVED, 180.0, 60.0) == pytest.approx(5.0)
    assert s.rate(S.RECEIVED, 80.0, 60.0) == pytest.approx(10.0)


def _window(s: S.Scrapes, at_s: float):
    spec = parse_metadata(scaler_metadata(4, 1.0, "saturation", NO_FLOOR))
    query = range_query(spec)
    start, end = query.bounds(at_s)
    return window_from_matrix(s.matrix(query, start, end), query, start, end)


def test_the_scalers_window_names_the_down_target_and_is_partial_until_it_leaves() -> None:
    s = _fleet_scrapes(2, (S.RouterDown(100.0, 200.0),))
    assert not _window(s, 90.0).partial
    during = _window(s, 150.0)
    assert during.inflight[-1].value == 4.0
    (why,) = during.partial
    assert why.kind == names.SCALER_ERROR_SOURCE_PARTIAL and "router/router-0" in why.detail
    assert _window(s, 230.0).partial  # back up, but its down steps are in the window
    assert not _window(s, 290.0).partial  # they left it (70 s window)
    # the arrivals: one series per target, adding up to the router's counter (steps read
    # the newest scrape: 290 reads 290's, the window's first step 220 reads 215's)
    after = _window(s, 290.0)
    assert after.arrivals_total[-1].value - after.arrivals_total[0].value == pytest.approx(750.0)


def test_a_target_down_longer_than_the_target_memory_is_no_longer_known() -> None:
    s = S.Scrapes(1, (S.RouterDown(10.0, 10_000.0),))
    for t in range(0, 3700, 5):
        s.scrape(float(t), dict.fromkeys(S.SERIES, 1.0))
    spec = parse_metadata(scaler_metadata(4, 1.0, "saturation", NO_FLOOR))
    query = range_query(spec)
    down = [
        r for r in s.matrix(query, *query.bounds(300.0))["result"]
        if r["metric"]["signal"] == "down"
    ]  # fmt: skip
    assert down and down[0]["metric"]["instance"] == "router-0"
    late = s.matrix(query, *query.bounds(3690.0))["result"]  # last up at 5 s: 1 h before 3605
    assert not [r for r in late if r["metric"]["signal"] == "down"]


def test_the_sim_scaler_holds_on_half_the_l_and_a_peer_reads_half() -> None:
    """2 ready, the router holds 8 (2 x 4: steady). One target of two down: the window
    reads 4, which alone would lower the count to 1; the guard holds 2. A peer's instant
    query reads 4."""
    s = _fleet_scrapes(2, (S.RouterDown(100.0, 200.0),))
    metadata = scaler_metadata(4, 1.0, "saturation", PRE_HEADROOM)
    clock = [150.0]
    scaler = SimScaler(metadata, s, lambda: clock[0])
    assert scaler.metric_value("inflight") == 8.0
    assert scaler.decisions[-1].desired_replicas == 2 and scaler.decisions[-1].partial
    from inflight.control.peers.base import Signal
    from inflight.sim.peers import reader

    assert reader(s, lambda: clock[0], 5.0)(Signal.INFLIGHT) == 4.0


@pytest.mark.parametrize(
    ("routers", "down", "error"),
    [
        (0, (), "--routers must be ≥ 1"),
        (1, (S.RouterDown(5.0, 5.0),), "FROM must be before TO"),
        (2, (S.RouterDown(0.0, 5.0, router=2),), "router 2 of --routers 2"),
    ],
)
def test_bad_router_targets_are_refused_naming_the_flag(routers, down, error) -> None:
    with pytest.raises(ValueError, match=error):
        S.Scrapes(routers, down)
