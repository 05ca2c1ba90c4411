"""Every peer control plane by name: what it reads, how often it decides, how to build it.

``PEERS[name].build(settings, io)`` returns a loop driven by ``start(now_s)`` and
``tick(now_s)``: the peer's pure decider (:mod:`inflight.control.peers`) inside its loop
(:mod:`inflight.planes.peers`). The live stack (:mod:`inflight.up.peer_loop`) and the
simulator build them the same way, with their own
:class:`~inflight.planes.peers.base.PeerIO`. Every duration is the peer's documented value
in seed seconds, multiplied by ``settings.time_scale``.

``router_hold`` says where requests wait when every slot is busy, as in that peer's own
deployment: at the router (Knative's activator and queue-proxy; Ray's handles; llm-d's
endpoint picker, whose flow-control queue *is* the signal) or in the replica (vLLM's own
queue behind production-stack's router or a Kubernetes Service, which is what
``vllm:num_requests_waiting`` counts: with a holding router it would always read 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from inflight.control import hpa
from inflight.control.keda import KedaSpec
from inflight.control.peers.base import Signal
from inflight.control.peers.kpa import KpaSpec
from inflight.control.peers.prom_trigger import PromTriggerSpec
from inflight.control.peers.ray_serve import RaySpec
from inflight.emulator.profile import Profile
from inflight.planes.autoscaler import AutoscaleConfig, Autoscaler
from inflight.planes.peers.base import ControlLoop, PeerIO
from inflight.planes.peers.kpa import KpaLoop
from inflight.planes.peers.prom_trigger import PromTrigger
from inflight.planes.peers.ray_serve import RayLoop
from inflight.statedir import DecisionRecord

#: Our own policies (the scaler's ``policy`` metadata), then the peers, in report order.
OWN_POLICIES: Final = ("saturation", "qps")

#: The fraction of one replica's saturated throughput a careful user targets (hpa-rps).
RPS_TARGET_FRACTION: Final = 0.8

#: llm-d's ``keda-epp-queue`` ScaledObject behaviour (scale-up: 100 % per 15 s, no window;
#: scale-down: 300 s window, 100 % per 15 s).
LLMD_EPP_BEHAVIOR: Final = hpa.Behavior(
    scale_up=hpa.ScalingRules(0.0, (hpa.ScalingPolicy("Percent", 100, 15.0),)),
    scale_down=hpa.ScalingRules(300.0, (hpa.ScalingPolicy("Percent", 100, 15.0),)),
)


@dataclass(frozen=True)
class PeerSettings:
    """What a peer is configured from: the stack's own settings (seed seconds)."""

    time_scale: float
    slots_per_replica: int
    min_replicas: int
    max_replicas: int
    hpa_sync_s: float = hpa.HPA_SYNC_PERIOD_S

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if self.slots_per_replica < 1:
            raise ValueError(f"slots_per_replica must be >= 1, got {self.slots_per_replica}")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(f"bad replica bounds {self.min_replicas}..{self.max_replicas}")


@dataclass(frozen=True)
class PeerSpec:
    """One peer: ``tick_s`` is its decision period (seed seconds)."""

    name: str
    description: str
    citation: str
    signals: tuple[Signal, ...]
    tick_s: float
    router_hold: bool
    build: Callable[[PeerSettings, PeerIO], ControlLoop]


def _named(io: PeerIO, name: str) -> Callable[[DecisionRecord], None]:
    """``io.record`` with the peer's name in front of each reason."""
    return lambda record: io.record(replace(record, reason=f"{name}: {record.reason}"))


def _keda_hpa(
    name: str,
    trigger: Callable[[PeerSettings], PromTriggerSpec],
    behavior: hpa.Behavior,
    polling_interval_s: float,
    cooldown_s: float,
) -> Callable[[PeerSettings, PeerIO], ControlLoop]:
    """A ScaledObject with one Prometheus trigger, run by the local KEDA + HPA loop."""

    def build(settings: PeerSettings, io: PeerIO) -> ControlLoop:
        ts = settings.time_scale
        return Autoscaler(
            scaler=PromTrigger(trigger(settings), io.read),
            config=AutoscaleConfig(
                hpa=hpa.HpaSpec(
                    min_replicas=max(1, settings.min_replicas),
                    max_replicas=settings.max_replicas,
                    behavior=behavior.scaled(ts),
                ),
                keda=KedaSpec(settings.min_replicas, cooldown_s * ts),
                hpa_sync_s=settings.hpa_sync_s * ts,
                polling_interval_s=polling_interval_s * ts,
            ),
            get_replicas=io.get_replicas,
            set_replicas=io.set_replicas,
            observe=io.observe,
            record=_named(io, name),
            wall_clock=io.wall_clock,
        )

    return build


def _kpa(settings: PeerSettings, io: PeerIO) -> ControlLoop:
    spec = KpaSpec.concurrency(settings.slots_per_replica).scaled(settings.time_scale)
    return KpaLoop(spec, settings.min_replicas, settings.max_replicas, io, name="kpa")


def _ray(settings: PeerSettings, io: PeerIO) -> ControlLoop:
    spec = RaySpec(min_replicas=settings.min_replicas, max_replicas=settings.max_replicas)
    return RayLoop(spec.scaled(settings.time_scale), io, name="ray")


def rps_target(settings: PeerSettings, service_s: float | None = None) -> float:
    """hpa-rps' AverageValue target in wall requests/s per replica: 80 % of one replica's
    saturated throughput (slots ÷ full-batch service time, the emulator's reference
    profile: 4 / 4.5 = 0.889 req/s seed, so 0.711), ÷ time-scale.

    >>> round(rps_target(PeerSettings(1.0, 4, 1, 2)), 4)
    0.7111
    """
    service = Profile().service_s if service_s is None else service_s
    seed_rps = RPS_TARGET_FRACTION * settings.slots_per_replica / service
    return seed_rps / settings.time_scale


PEERS: Final[dict[str, PeerSpec]] = {
    "kpa": PeerSpec(
        name="kpa",
        description="Knative KPA, concurrency mode: containerConcurrency = slots, 70 % "
        "target, 60 s stable / 6 s panic windows, panic at 200 %, 2 s tick",
        citation="knative/serving@98e5ef90 pkg/autoscaler/scaling/autoscaler.go, "
        "aggregation/bucketing.go, config/config.go",
        signals=(Signal.INFLIGHT,),
        tick_s=2.0,
        router_hold=True,
        build=_kpa,
    ),
    "ray": PeerSpec(
        name="ray",
        description="Ray Serve default policy: target_ongoing_requests 2, upscale delay "
        "30 s, downscale delay 600 s, 30 s look-back, factors 1",
        citation="ray-project/ray python/ray/serve/autoscaling_policy.py (wall-clock delay "
        "version), _private/autoscaling_state.py@00215194, _private/constants.py@0016b72b",
        signals=(Signal.INFLIGHT,),
        tick_s=0.1,
        router_hold=True,
        build=_ray,
    ),
    "vllm-waiting": PeerSpec(
        name="vllm-waiting",
        description="vLLM production-stack: KEDA Prometheus trigger on "
        "sum(vllm:num_requests_waiting), threshold 5, polling 15 s, HPA default behaviour",
        citation="vllm-project/production-stack@9d296458 tutorials/assets/values-20-keda.yaml; "
        "kedacore/keda@8b4f083c pkg/scalers/prometheus_scaler.go",
        signals=(Signal.VLLM_WAITING,),
        tick_s=hpa.HPA_SYNC_PERIOD_S,
        router_hold=False,
        build=_keda_hpa(
            "vllm-waiting",
            lambda s: PromTriggerSpec("vllm-waiting", Signal.VLLM_WAITING, threshold=5.0),
            hpa.KUBERNETES_DEFAULT_BEHAVIOR,
            polling_interval_s=15.0,
            cooldown_s=360.0,
        ),
    ),
    "epp-queue": PeerSpec(
        name="epp-queue",
        description="llm-d KEDA + EPP: requests held at the router (flow-control queue), "
        "threshold 1 per replica, polling 15 s, 300 s scale-down window",
        citation="llm-d/llm-d@903da90e guides/workload-autoscaling/keda-epp-queue/"
        "optimized-baseline/base/scaledobject.yaml",
        signals=(Signal.ROUTER_QUEUED,),
        tick_s=hpa.HPA_SYNC_PERIOD_S,
        router_hold=True,
        build=_keda_hpa(
            "epp-queue",
            lambda s: PromTriggerSpec("epp-queue", Signal.ROUTER_QUEUED, threshold=1.0),
            LLMD_EPP_BEHAVIOR,
            polling_interval_s=15.0,
            cooldown_s=300.0,
        ),
    ),
    "hpa-rps": PeerSpec(
        name="hpa-rps",
        description="HPA on request rate per replica (rate over 1 min), target 80 % of one "
        "replica's saturated throughput, HPA default behaviour",
        citation="kubernetes HPA defaults (inflight/control/hpa.py); "
        "kedacore/keda@8b4f083c pkg/scalers/prometheus_scaler.go",
        signals=(Signal.ARRIVAL_RATE,),
        tick_s=hpa.HPA_SYNC_PERIOD_S,
        router_hold=False,
        build=_keda_hpa(
            "hpa-rps",
            lambda s: PromTriggerSpec("hpa-rps", Signal.ARRIVAL_RATE, threshold=rps_target(s)),
            hpa.KUBERNETES_DEFAULT_BEHAVIOR,
            polling_interval_s=hpa.KEDA_POLLING_INTERVAL_S,
            cooldown_s=hpa.KEDA_COOLDOWN_PERIOD_S,
        ),
    ),
}

#: Every ``inflight up --policy`` name (``fixed:N`` is the bench's, not the stack's).
POLICY_NAMES: Final = (*OWN_POLICIES, *PEERS)
