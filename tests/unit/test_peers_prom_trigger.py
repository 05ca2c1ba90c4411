"""KEDA's Prometheus trigger (the pure inflight/control/peers/prom_trigger.py and its shell
inflight/planes/peers/prom_trigger.py) and the peers' catalog.

The query cases are kedacore/keda@8b4f083c ``pkg/scalers/prometheus_scaler_test.go``
(``testPromQueryResult``): the answer parsed as the live reader parses it
(:func:`inflight.up.peer_loop.parse_instant`), then the trigger's ``ignoreNullValues``.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field

import pytest

from inflight.control.peers.base import Signal
from inflight.control.peers.prom_trigger import (
    PromTriggerSpec,
    TriggerError,
    TriggerResult,
    in_milli,
    metric_and_activity,
)
from inflight.planes.autoscaler import Observation
from inflight.planes.peers.base import PeerIO
from inflight.planes.peers.catalog import PEERS, POLICY_NAMES, PeerSettings, rps_target
from inflight.planes.peers.prom_trigger import PromTrigger
from inflight.planes.peers.signals import promql, rate_window_s
from inflight.planes.scaler_client import ScalerUnavailable
from inflight.statedir import DecisionRecord
from inflight.up.peer_loop import parse_instant

ERROR = object()

KEDA_CASES = [
    # (name, body, status, ignoreNullValues, expected value or ERROR)
    ("no results", "{}", 200, True, 0.0),
    ("no values", '{"data":{"result":[]}}', 200, True, 0.0),
    ("no values but shouldn't ignore", '{"data":{"result":[]}}', 200, False, ERROR),
    ("value is empty list", '{"data":{"result":[{"value": []}]}}', 200, True, 0.0),
    ("value is empty list but shouldn't ignore", '{"data":{"result":[{"value": []}]}}', 200,
     False, ERROR),
    ("valid value", '{"data":{"result":[{"value": ["1", "2"]}]}}', 200, True, 2.0),
    ("not enough values", '{"data":{"result":[{"value": ["1"]}]}}', 200, True, ERROR),
    ("multiple results", '{"data":{"result":[{},{}]}}', 200, True, ERROR),
    ("error status response", "{}", 400, True, ERROR),
    ("+Inf", '{"data":{"result":[{"value": ["1", "+Inf"]}]}}', 200, True, 0.0),
    ("+Inf but shouldn't ignore", '{"data":{"result":[{"value": ["1", "+Inf"]}]}}', 200,
     False, ERROR),
    ("-Inf", '{"data":{"result":[{"value": ["1", "-Inf"]}]}}', 200, True, 0.0),
    ("NaN", '{"data":{"result":[{"value": ["1", "NaN"]}]}}', 200, True, 0.0),
    ("NaN but shouldn't ignore", '{"data":{"result":[{"value": ["1", "NaN"]}]}}', 200, False,
     ERROR),
]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "ignore", "expected"),
    [
        (2.0, True, TriggerResult(2.0, 2.0, True)),
        (2.0, False, TriggerResult(2.0, 2.0, True)),
        (0.0004, True, TriggerResult(0.0004, 0.0, True)),  # active on the value, not milli
        (None, True, TriggerResult(0.0, 0.0, False)),
        (None, False, TriggerError("prometheus trigger m: the result is empty (why)")),
        (math.inf, True, TriggerResult(0.0, 0.0, False)),
        (-math.inf, False, TriggerError("prometheus trigger m: query returns -inf")),
        (math.nan, True, TriggerResult(0.0, 0.0, False)),
        (math.nan, False, TriggerError("prometheus trigger m: query returns nan")),
    ],
)
def test_decide_on_an_answer(
    answer: float | None, ignore: bool, expected: TriggerResult | TriggerError
) -> None:
    spec = PromTriggerSpec("m", Signal.VLLM_WAITING, threshold=5, ignore_null_values=ignore)
    assert metric_and_activity(spec, answer, "why") == expected


@pytest.mark.parametrize(("name", "body", "status", "ignore", "expected"), KEDA_CASES)
def test_keda_query_results(
    name: str, body: str, status: int, ignore: bool, expected: object
) -> None:
    def read(signal: Signal) -> float:
        return parse_instant(status, body, promql(signal))

    trigger = PromTrigger(
        PromTriggerSpec("m", Signal.VLLM_WAITING, threshold=5, ignore_null_values=ignore), read
    )
    if expected is ERROR:
        with pytest.raises(ScalerUnavailable):
            trigger.metric_value("m")
    else:
        assert trigger.metric_value("m") == expected, name


def test_metric_spec_is_the_threshold_and_values_are_milli_units() -> None:
    trigger = PromTrigger(
        PromTriggerSpec("epp-queue", Signal.ROUTER_QUEUED, threshold=1), lambda s: 2.71828
    )
    spec = trigger.metric_spec()
    assert (spec.metric_name, spec.target) == ("epp-queue", 1)
    assert trigger.metric_value("epp-queue") == 2.718
    assert in_milli(0.0009) == 0.0
    with pytest.raises(ScalerUnavailable, match="no metric 'other'"):
        trigger.metric_value("other")


@pytest.mark.parametrize(
    ("value", "activation", "active"),
    [(0.0, 0.0, False), (0.5, 0.0, True), (3.0, 3.0, False), (3.5, 3.0, True)],
)
def test_active_above_the_activation_threshold(
    value: float, activation: float, active: bool
) -> None:
    spec = PromTriggerSpec("m", Signal.INFLIGHT, threshold=1, activation_threshold=activation)
    assert PromTrigger(spec, lambda s: value).is_active() is active


def test_a_failed_read_is_unavailable_even_when_ignoring_nulls() -> None:
    def down(signal: Signal) -> float:
        raise ScalerUnavailable("prometheus at http://127.0.0.1:1 unreachable")

    trigger = PromTrigger(PromTriggerSpec("m", Signal.INFLIGHT, threshold=1), down)
    with pytest.raises(ScalerUnavailable, match="unreachable"):
        trigger.metric_value("m")
    with pytest.raises(ScalerUnavailable):
        trigger.is_active()


@pytest.mark.parametrize(("threshold", "activation"), [(0.0, 0.0), (1.0, -1.0)])
def test_bad_triggers_are_refused(threshold: float, activation: float) -> None:
    with pytest.raises(ValueError, match=r"(?i)threshold"):
        PromTriggerSpec("m", Signal.INFLIGHT, threshold, activation_threshold=activation)


# --- signals --------------------------------------------------------------------------------


def test_signals_promql() -> None:
    assert promql(Signal.INFLIGHT) == "sum(router_inflight_requests)"
    assert promql(Signal.ROUTER_QUEUED) == "sum(router_queued_requests)"
    assert promql(Signal.VLLM_WAITING) == "sum(vllm:num_requests_waiting)"
    assert promql(Signal.ARRIVAL_RATE) == "sum(rate(router_requests_received_total[60s]))"
    assert promql(Signal.ARRIVAL_RATE, 0.05, 0.25) == (
        "sum(rate(router_requests_received_total[3s]))"
    )
    # Never fewer than two scrapes in the window.
    assert rate_window_s(0.01, 0.5) == 1.0
    assert promql(Signal.ARRIVAL_RATE, 0.004, 0.02) == (
        "sum(rate(router_requests_received_total[240ms]))"
    )


# --- the catalog ----------------------------------------------------------------------------


def test_policy_names_match_the_cli() -> None:
    from inflight.up.cli import Policy

    assert typing.get_args(Policy) == POLICY_NAMES
    assert set(PEERS) == {"kpa", "ray", "vllm-waiting", "epp-queue", "hpa-rps"}


def test_hpa_rps_targets_80_percent_of_a_replicas_throughput() -> None:
    seed = PeerSettings(time_scale=1.0, slots_per_replica=4, min_replicas=1, max_replicas=2)
    assert rps_target(seed) == pytest.approx(0.8 * 4 / 4.5)
    fast = PeerSettings(time_scale=0.05, slots_per_replica=4, min_replicas=1, max_replicas=2)
    assert rps_target(fast) == pytest.approx(0.8 * 4 / 4.5 / 0.05)


def test_where_each_peer_holds_requests() -> None:
    holds = {name: spec.router_hold for name, spec in PEERS.items()}
    assert holds == {
        "kpa": True,
        "ray": True,
        "vllm-waiting": False,  # vLLM's own queue is the signal
        "epp-queue": True,  # the router's held requests are the signal
        "hpa-rps": False,
    }


@dataclass
class World:
    values: dict[Signal, float]
    desired: int = 1
    ready: int = 1
    records: list[DecisionRecord] = field(default_factory=list)

    def set(self, n: int) -> None:
        self.desired = n
        self.ready = n

    def io(self) -> PeerIO:
        return PeerIO(
            read=lambda s: self.values[s],
            get_replicas=lambda: self.desired,
            ready_replicas=lambda: self.ready,
            set_replicas=self.set,
            observe=lambda: Observation(self.values.get(Signal.INFLIGHT), self.ready, 4),
            record=self.records.append,
            wall_clock=lambda: 0.0,
        )


def drive(name: str, world: World, until_s: float, time_scale: float = 1.0) -> None:
    settings = PeerSettings(
        time_scale=time_scale, slots_per_replica=4, min_replicas=1, max_replicas=8
    )
    loop = PEERS[name].build(settings, world.io())
    loop.start(0.0)
    t = 0.0
    while t <= until_s:
        loop.tick(t)
        t = round(t + 0.5 * time_scale, 9)


def test_epp_queue_adds_a_replica_per_held_request_at_llmds_rate() -> None:
    """3 requests held on 1 replica: AverageValue 1 asks for 3; llm-d's scale-up policy
    (100 % per 15 s) allows 2 at the first HPA sync, 3 at the next."""
    world = World({Signal.ROUTER_QUEUED: 3.0, Signal.INFLIGHT: 7.0})
    drive("epp-queue", world, until_s=15.0)
    assert world.desired == 2
    drive_more = World({Signal.ROUTER_QUEUED: 3.0}, desired=2, ready=2)
    drive("epp-queue", drive_more, until_s=15.0)
    assert drive_more.desired == 3  # ceil(3 / 1) = 3 (the value is the sum, not per pod)
    assert all(r.reason.startswith("epp-queue: ") for r in world.records)


def test_vllm_waiting_scales_on_waiting_requests_over_5() -> None:
    world = World({Signal.VLLM_WAITING: 12.0})
    drive("vllm-waiting", world, until_s=15.0, time_scale=0.1)
    assert world.desired == 3  # ceil(12 / 5), within the default +4 pods per 15 s
    quiet = World({Signal.VLLM_WAITING: 4.0})
    drive("vllm-waiting", quiet, until_s=60.0)
    assert quiet.desired == 1  # 4 / 1 = 4 < 5: within target


def test_hpa_rps_reads_the_arrival_rate() -> None:
    rate = 2.0  # seed requests/s; 2 / 0.711 -> 3 replicas
    world = World({Signal.ARRIVAL_RATE: rate / 0.05})
    drive("hpa-rps", world, until_s=15.0, time_scale=0.05)
    assert world.desired == math.ceil(rate / (0.8 * 4 / 4.5))
    assert world.records[-1].target == pytest.approx(0.8 * 4 / 4.5 / 0.05)


def test_every_peer_builds_and_ticks() -> None:
    for name in PEERS:
        world = World(dict.fromkeys(Signal, 0.0))
        drive(name, world, until_s=20.0)
        assert world.desired == 1, name
