"""Priority classes in the simulator: the live dispatcher's classes (inflight.sim.router),
each request's class from its priority, attainment a class (inflight.measure.classes)."""

from __future__ import annotations

import pytest

from inflight.measure.slo import DEFAULT_SLO
from inflight.sim import report
from inflight.sim.core import SimConfig, simulate
from inflight.workload.trace import PlannedRequest

# One replica, 40 s of arrivals well above what it serves, every third request of each kind.
PLANNED = [PlannedRequest(0.05 * i, 200, 100, priority=(0, 10, 100)[i % 3]) for i in range(800)]


def _run(classes: tuple[str, ...]) -> dict:
    config = SimConfig(
        policy="fixed:1", min_replicas=1, max_replicas=1, priority_classes=classes,
        warmup_s=0.0, drain_s=600.0,
    )  # fmt: skip
    return report.measures(simulate(config, PLANNED, 40.0), DEFAULT_SLO)


def test_the_high_class_meets_the_slo_more_often_and_the_sheddable_one_gets_429() -> None:
    m = _run(("high:0:1.5", "low:10:1.5", "batch:100:shed"))
    by = m["by_class"]
    assert [by[c]["requests_sent"] for c in ("high", "low", "batch")] == [267, 267, 266]
    assert by["high"]["slo_attainment"] > by["low"]["slo_attainment"] + 0.2
    # Held requests are all served (no bound); the sheddable are refused, never held.
    assert by["high"]["requests_ok"] == 267 and by["low"]["requests_ok"] == 267
    assert by["batch"]["misses"].get("http_429", 0) > 0
    assert m["requests_sent"] == 800


def test_without_classes_there_is_no_split() -> None:
    assert "by_class" not in _run(())


@pytest.mark.parametrize(
    ("classes", "message"),
    [(("high:0",), "--priority-class: 'high:0': expected"), (("a:0:1", "b:0:1"), "must be above")],
)
def test_bad_classes_name_the_flag(classes: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimConfig(policy="fixed:1", priority_classes=classes)
