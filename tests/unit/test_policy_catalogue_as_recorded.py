"""``inflight sim calibrate`` re-simulates a live run with the policy as it ran: the
saturation policy's defaults changed seven times (the floor, its recurring level, bursts
met ahead, a start-up's lower bound, a late scale-up's evidence, its margin back to 1, the
SLO stage), and a run recorded before runs kept their settings names only "saturation".
Each run here is built as calibrate builds it."""

from __future__ import annotations

from external_scaler.metadata import parse_metadata
from inflight import names
from inflight.control.policy import PolicySpec
from inflight.planes.policy_catalogue import (
    ANTICIPATE_DEFAULT_SINCE,
    EVIDENCE_DEFAULT_SINCE,
    FLOOR_DEFAULT_SINCE,
    MARGIN_DEFAULT_SINCE,
    RECURRENT_FLOOR_DEFAULT_SINCE,
    SLO_DEFAULT_SINCE,
    STARTUP_DEFAULT_SINCE,
    Policy,
    as_recorded,
    parse_policies,
)

# What a run recorded before EVIDENCE_DEFAULT_SINCE read as a late scale-up's evidence.
EVIDENCE_AS_IT_WAS = (
    (names.META_EXCURSION_FLEETS, "same"),
    (names.META_EXCURSION_FLEET_CHANGE, "any"),
    (names.META_EXCURSION_MARGIN, "1"),
)
# Every run that did not record its settings ran without the SLO stage.
NO_SLO = ((names.META_SLO_TTFT_S, "0"),)


def spec_of(text: str, created_at: str | None) -> tuple[Policy, PolicySpec]:
    (policy,) = parse_policies(text, start_replicas=1)
    recorded = as_recorded(policy, created_at)
    return recorded, parse_metadata(dict(recorded.metadata), experimental=True).policy


def test_the_switch_times_are_in_order() -> None:
    assert (
        FLOOR_DEFAULT_SINCE
        < RECURRENT_FLOOR_DEFAULT_SINCE
        < ANTICIPATE_DEFAULT_SINCE
        < STARTUP_DEFAULT_SINCE
        < EVIDENCE_DEFAULT_SINCE
        < MARGIN_DEFAULT_SINCE
        < SLO_DEFAULT_SINCE
    )


def test_a_run_before_the_floor_ran_without_it() -> None:
    _, spec = spec_of("saturation", "2026-12-01T12:00:00+00:00")
    assert not spec.floor_on


def test_a_run_between_the_switches_held_the_highest_peak() -> None:
    recorded, spec = spec_of("saturation", "2026-12-02T12:00:00+00:00")
    assert spec.floor_on and spec.floor_fraction == names.DEFAULT_FLOOR_FRACTION
    assert (spec.floor_statistic, spec.floor_single_window_s) == ("peak", 0.0)
    assert recorded.name == "saturation"  # the run's name is kept


def test_a_run_between_the_second_and_third_held_the_recurring_level_unanticipated() -> None:
    recorded, spec = spec_of("saturation", "2026-12-02T18:00:00+00:00")
    assert recorded.metadata == (
        (names.META_ANTICIPATE_S, "0"),
        (names.META_STARTUP_S, "0"),
        *EVIDENCE_AS_IT_WAS,
        *NO_SLO,
    )
    assert (spec.floor_statistic, spec.floor_single_fraction) == ("recurrent", 0.3)
    assert spec.anticipate_s == 0.0 and spec.startup_s == 0.0


def test_a_run_between_the_third_and_fourth_anticipated_without_a_start_up() -> None:
    recorded, spec = spec_of("saturation", "2026-12-02T23:00:00+00:00")
    assert recorded.metadata == ((names.META_STARTUP_S, "0"), *EVIDENCE_AS_IT_WAS, *NO_SLO)
    assert spec.anticipate_s == names.DEFAULT_ANTICIPATE_S == 130
    assert spec.startup_s == 0.0 and not spec.late_scale_up_on


def test_a_run_between_the_fourth_and_fifth_held_late_scale_ups_on_the_old_evidence() -> None:
    recorded, spec = spec_of("saturation", "2026-12-03T05:00:00+00:00")
    assert recorded.metadata == (*EVIDENCE_AS_IT_WAS, *NO_SLO)
    assert spec.startup_s == names.DEFAULT_STARTUP_S == 30 and spec.late_scale_up_on
    assert (spec.excursion_fleets, spec.excursion_fleet_change) == ("same", "any")
    assert spec.excursion_margin == 1.0


def test_a_run_between_the_fifth_and_sixth_read_the_wider_evidence_at_margin_1_5() -> None:
    recorded, spec = spec_of("saturation", "2026-12-03T22:00:00+00:00")
    assert recorded.metadata == ((names.META_EXCURSION_MARGIN, "1.5"), *NO_SLO)
    assert (spec.excursion_fleets, spec.excursion_fleet_change) == ("any", "own")
    assert spec.excursion_margin == 1.5


def test_a_run_before_both_margin_switches_ran_at_the_first_ones_margin() -> None:
    # Both switches name excursionMargin; the earlier one's value is what the run had.
    recorded, _ = spec_of("saturation", "2026-12-03T05:00:00+00:00")
    margins = [v for k, v in recorded.metadata if k == names.META_EXCURSION_MARGIN]
    assert margins == ["1"]


def test_a_run_since_reads_the_evidence_as_today_without_the_slo_stage() -> None:
    recorded, spec = spec_of("saturation", "2026-12-04T00:00:00+00:00")
    assert recorded.metadata == NO_SLO
    assert (spec.excursion_fleets, spec.excursion_fleet_change) == ("any", "own")
    assert spec.excursion_margin == names.DEFAULT_EXCURSION_MARGIN == 1.0
    assert spec.slo_ttft_s == 0.0
    assert spec_of("saturation", None)[0].metadata == ()


def test_a_run_since_the_slo_stage_reads_as_today() -> None:
    recorded, spec = spec_of("saturation", "2026-12-08T00:00:00+00:00")
    assert recorded.metadata == ()
    assert (spec.slo_ttft_s, spec.slo_goal) == (2.0, 0.99)


def test_a_key_the_run_named_stays_as_named() -> None:
    _, spec = spec_of("saturation[floorStatistic=quantile]", "2026-12-02T12:00:00+00:00")
    assert spec.floor_statistic == "quantile"
    _, named = spec_of("saturation[floorWindowSeconds=600]", "2026-12-01T12:00:00+00:00")
    assert named.floor_window_s == 600.0 and named.floor_statistic == "peak"


def test_fixed_fleets_and_peers_are_untouched() -> None:
    for text in ("fixed:2", "kpa"):
        (policy,) = parse_policies(text, start_replicas=1)
        assert as_recorded(policy, "2026-12-01T12:00:00+00:00") == policy
