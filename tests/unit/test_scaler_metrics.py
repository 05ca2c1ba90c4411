"""The scaler's own metrics on a fresh registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from external_scaler.metrics import ScalerMetrics
from inflight import names


def test_every_error_kind_exists_at_zero_from_the_start() -> None:
    """So rate()/increase() see the first error, and the alert's kinds have a series."""
    registry = CollectorRegistry()
    ScalerMetrics(registry)
    for kind in names.SCALER_ERROR_KINDS:
        assert registry.get_sample_value(names.SCALER_ERRORS, {"kind": kind}) == 0.0, kind
