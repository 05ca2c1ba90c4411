"""The HPA's tolerance, defined once (inflight.control.hpa_math) and used by the scaler's
``desired`` prediction, the local HPA loop and the metadata that configures it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

import inflight.control.hpa
from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from external_scaler.metrics import ScalerMetrics
from inflight import names
from inflight.control import hpa_math
from inflight.control.policy import PolicySpec, Sample, decide
from tests.unit.policy_pins import PRE_HEADROOM, PRE_HEADROOM_METADATA

SPEC = PolicySpec(queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0)


def flat(value: float, n: int = 80, end_s: float = 1000.0) -> list[Sample]:
    return [Sample(end_s - (n - 1 - i), value) for i in range(n)]


def test_one_implementation_shared_with_the_local_hpa() -> None:
    assert inflight.control.hpa.replicas_for_average_value is hpa_math.replicas_for_average_value
    assert inflight.control.hpa.HPA_TOLERANCE is hpa_math.HPA_TOLERANCE


@pytest.mark.parametrize(
    ("value", "ready", "up", "down", "expected"),
    [
        (44.0, 10, 0.1, 0.1, 10),  # ratio 1.1 exactly: Kubernetes' isWithin holds
        (45.0, 10, 0.1, 0.1, 12),  # ratio 1.125: ceil(11.25)
        (44.0, 10, 0.0, 0.1, 11),  # behavior.scaleUp.tolerance: 0 scales on one request
        (36.0, 10, 0.1, 0.1, 10),  # ratio 0.9: holds on the way down too
        (35.0, 10, 0.1, 0.1, 9),
        (36.0, 10, 0.1, 0.0, 9),  # scale-down tolerance 0: ceil(9)
        (5.0, 1, 0.1, 0.1, 2),  # on one replica the band is narrower than a request
    ],
)
def test_band_is_one_minus_down_to_one_plus_up(
    value: float, ready: int, up: float, down: float, expected: int
) -> None:
    got = hpa_math.replicas_for_average_value(value, 4.0, ready, up, scale_down_tolerance=down)
    assert got == expected


def test_bad_tolerance_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="scale_down_tolerance"):
        hpa_math.replicas_for_average_value(4.0, 4.0, 1, 0.1, scale_down_tolerance=-0.1)


def test_desired_holds_within_tolerance_at_ten_replicas() -> None:
    """The issue's case: 10 replicas of 4 slots, four requests queued (L = 44)."""
    d = decide(flat(44.0), SPEC, now_s=1000.0, ready_replicas=10)
    assert d.value == 44.0  # the value KEDA gets is unchanged
    assert d.desired_replicas == 10
    assert d.direction == "hold"
    assert "tolerance" in d.reason
    d = decide(flat(45.0), SPEC, now_s=1000.0, ready_replicas=10)
    assert (d.desired_replicas, d.direction) == (12, "up")


def test_desired_uses_the_configured_tolerances() -> None:
    spec = parse_metadata(
        {**PRE_HEADROOM, "hpaScaleUpTolerance": "0", "hpaScaleDownTolerance": "0.05"}
    ).policy
    assert (spec.hpa_scale_up_tolerance, spec.hpa_scale_down_tolerance) == (0.0, 0.05)
    assert decide(flat(44.0), spec, now_s=1000.0, ready_replicas=10).desired_replicas == 11
    assert decide(flat(37.0), spec, now_s=1000.0, ready_replicas=10).desired_replicas == 10
    assert decide(flat(37.0), SPEC, now_s=1000.0, ready_replicas=10).desired_replicas == 10


def test_without_a_ready_count_desired_is_the_plain_ceiling() -> None:
    assert decide(flat(44.0), SPEC, now_s=1000.0).desired_replicas == 11


def test_tolerance_defaults_come_from_names() -> None:
    p = parse_metadata({**PRE_HEADROOM}).policy
    assert p.hpa_scale_up_tolerance == float(
        PRE_HEADROOM_METADATA[names.META_HPA_SCALE_UP_TOLERANCE]
    )
    assert p.hpa_scale_down_tolerance == hpa_math.HPA_TOLERANCE


@pytest.mark.parametrize("value", ["-0.1", "11", "ten", "1e-2"])
def test_bad_tolerance_metadata_names_the_key(value: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_metadata({**PRE_HEADROOM, "hpaScaleUpTolerance": value})
    assert err.value.key == "hpaScaleUpTolerance"


def test_desired_gauge_reports_the_hold() -> None:
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    metrics.record("inflight", decide(flat(44.0), SPEC, 1000.0, ready_replicas=10), count=True)
    labels = {"metric_name": "inflight"}
    assert registry.get_sample_value(names.SCALER_DESIRED_REPLICAS, labels) == 10.0
    hold = {**labels, "direction": "hold"}
    assert registry.get_sample_value(names.SCALER_DECISIONS, hold) == 1.0


def test_a_target_below_one_milli_unit_does_not_fail_the_decision() -> None:
    spec = parse_metadata(
        {**PRE_HEADROOM, "slotsPerReplica": "1", "targetSaturation": "0.0005"}
    ).policy
    assert decide(flat(1.0), spec, now_s=1000.0, ready_replicas=1).desired_replicas == 2000
