from __future__ import annotations

import pytest

from inflight import names
from inflight.prom import _duration


def test_promql_templates_fill_selector() -> None:
    assert names.promql(names.PROMQL_L) == "sum(router_inflight_requests{})"
    assert (
        names.promql(names.PROMQL_CAPACITY, 'ns="a"')
        == 'sum(max by (model) (router_slots_per_endpoint{ns="a"})'
        ' * on (model) max by (model) (router_endpoints{state="ready",ns="a"}))'
    )
    assert "{{" not in names.promql(names.PROMQL_W, 'job="r"')


def test_metadata_defaults_match_design() -> None:
    assert names.METADATA_DEFAULTS[names.META_SLOTS_PER_REPLICA] == "4"
    assert names.METADATA_DEFAULTS[names.META_SCALE_DOWN_WINDOW_S] == "60"
    assert names.METADATA_DEFAULTS[names.META_QUEUE_HEADROOM] == "0.0"
    assert names.METADATA_DEFAULTS[names.META_METRIC_NAME] == "inflight"


@pytest.mark.parametrize(("seconds", "text"), [(1.0, "1s"), (0.5, "500ms"), (15, "15s")])
def test_prometheus_duration_text(seconds: float, text: str) -> None:
    assert _duration(seconds) == text


def test_prometheus_duration_rejects_zero() -> None:
    with pytest.raises(ValueError, match="positive"):
        _duration(0)
