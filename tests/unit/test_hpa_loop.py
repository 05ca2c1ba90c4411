"""The local KEDA+HPA loop's cadence and edges, with a scripted scaler and a stepped clock.

The scaler here is a plain object answering from a table (no gRPC: the real client is
exercised in tests/integration/test_up.py); time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inflight.control.hpa import SHIPPED_BEHAVIOR, HpaSpec
from inflight.control.keda import KedaSpec
from inflight.planes.autoscaler import AutoscaleConfig, Autoscaler, Observation
from inflight.planes.scaler_client import MetricSpec, ScalerUnavailable


@dataclass
class ScriptedScaler:
    value: float = 0.0
    active: bool = False
    fail: bool = False
    calls: list[str] = field(default_factory=list)

    def metric_spec(self) -> MetricSpec:
        self.calls.append("GetMetricSpec")
        return MetricSpec("inflight", 4.0)

    def metric_value(self, metric_name: str) -> float:
        self.calls.append("GetMetrics")
        if self.fail:
            raise ScalerUnavailable("GetMetrics failed: UNAVAILABLE: Prometheus down")
        return self.value

    def is_active(self) -> bool:
        self.calls.append("IsActive")
        return self.active


def make_loop(scaler, replicas=1, min_replicas=1, max_replicas=2, cooldown_s=300.0):
    state = {"replicas": replicas}
    records = []
    loop = Autoscaler(
        scaler=scaler,
        config=AutoscaleConfig(
            hpa=HpaSpec(max(1, min_replicas), max_replicas, SHIPPED_BEHAVIOR),
            keda=KedaSpec(min_replicas, cooldown_s),
            hpa_sync_s=15.0,
            polling_interval_s=30.0,
        ),
        get_replicas=lambda: state["replicas"],
        set_replicas=lambda n: state.__setitem__("replicas", n),
        observe=lambda: Observation(scaler.value, state["replicas"], 4),
        record=records.append,
        wall_clock=lambda: 1000.0,
    )
    loop.start(0.0)
    return loop, state, records


def test_calls_follow_keda_and_hpa_cadence():
    scaler = ScriptedScaler(value=2.0)
    loop, _, _ = make_loop(scaler)
    assert not loop.tick(5.0)
    assert scaler.calls == []
    assert loop.tick(15.0)  # HPA sync
    assert scaler.calls == ["GetMetricSpec", "GetMetrics"]
    scaler.calls.clear()
    loop.tick(30.0)  # KEDA poll and HPA sync both due
    keda = ["GetMetricSpec", "GetMetrics", "IsActive"]
    assert scaler.calls == [*keda, "GetMetricSpec", "GetMetrics"]


def test_hpa_scales_up_and_records_the_decision():
    scaler = ScriptedScaler(value=16.0)
    loop, state, records = make_loop(scaler)
    loop.tick(15.0)
    assert state["replicas"] == 2
    r = records[-1]
    assert (r.L, r.capacity, r.saturation, r.value, r.target, r.desired) == (
        16.0,
        4,
        4.0,
        16.0,
        4.0,
        2,
    )
    assert "HPA" in r.reason


def test_metric_error_changes_nothing_and_says_why():
    scaler = ScriptedScaler(value=16.0, fail=True)
    loop, state, records = make_loop(scaler, replicas=2)
    loop.tick(15.0)
    assert state["replicas"] == 2
    assert "Prometheus down" in records[-1].reason and records[-1].value is None


def test_scale_to_zero_after_cooldown_then_push_activates():
    scaler = ScriptedScaler(value=0.0, active=False)
    loop, state, records = make_loop(scaler, min_replicas=0, cooldown_s=100.0)
    loop.tick(90.0)  # KEDA polls at 30, 60, 90: still cooling down
    assert state["replicas"] == 1
    loop.tick(120.0)
    assert state["replicas"] == 0
    assert "cooldown" in records[-1].reason
    loop.tick(135.0)  # the HPA is disabled at zero
    assert state["replicas"] == 0
    loop.activate()  # StreamIsActive pushed true
    loop.tick(136.0)
    assert state["replicas"] == 1
    assert "activated from zero" in records[-1].reason


def test_active_poll_restarts_the_cooldown():
    scaler = ScriptedScaler(value=1.0, active=True)
    loop, state, _ = make_loop(scaler, min_replicas=0, cooldown_s=100.0)
    loop.tick(30.0)
    scaler.active = False
    loop.tick(120.0)  # 90 s idle < 100 s cooldown
    assert state["replicas"] == 1
    loop.tick(150.0)
    assert state["replicas"] == 0
