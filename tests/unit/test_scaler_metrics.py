"""The scaler's own metrics on a fresh registry."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from external_scaler.metrics import ScalerMetrics
from inflight import names
from inflight.control.policy import Decision


def test_every_error_kind_exists_at_zero_from_the_start() -> None:
    """So rate()/increase() see the first error, and the alert's kinds have a series."""
    registry = CollectorRegistry()
    ScalerMetrics(registry)
    for kind in names.SCALER_ERROR_KINDS:
        assert registry.get_sample_value(names.SCALER_ERRORS, {"kind": kind}) == 0.0, kind


def test_a_held_scale_up_shows_in_its_gauge_and_leaves_with_the_trigger() -> None:
    """A hold changes no replica count; the gauge is where a dashboard sees it."""
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    held = Decision(
        policy="saturation", value=12.0, target=4.0, desired_replicas=3, active=True,
        inflight=20.0, ready_replicas=3, saturation=5 / 3, direction="hold",
        reason="late scale-up held: ...", held_scale_up=True,
    )  # fmt: skip
    labels = {"metric_name": "m"}
    counted = names.SCALER_HELD_DECISIONS
    metrics.record("m", replace(held, held_scale_up=False, value=20.0), count=True)
    assert registry.get_sample_value(counted, labels) == 0.0  # there, at 0, before any hold
    metrics.record("m", held, count=True)
    assert registry.get_sample_value(names.SCALER_SCALE_UP_HELD, labels) == 1.0
    metrics.record("m", held, count=False)  # IsActive's answers set gauges, count nothing
    metrics.record("m", held, count=True)
    assert registry.get_sample_value(counted, labels) == 2.0
    metrics.record("m", replace(held, held_scale_up=False, value=20.0), count=True)
    assert registry.get_sample_value(names.SCALER_SCALE_UP_HELD, labels) == 0.0
    assert registry.get_sample_value(counted, labels) == 2.0
    metrics.forget("m")
    assert registry.get_sample_value(names.SCALER_SCALE_UP_HELD, labels) is None
    assert registry.get_sample_value(counted, labels) == 2.0  # counters keep their counts
