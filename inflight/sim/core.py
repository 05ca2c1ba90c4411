"""One simulated run: planned requests in, outcomes, timeline and decisions out.

The loop is an event queue (``inflight.sim.events``) in seed seconds, ``t = 0`` being the first
instant of the workload. Before it, from ``-warmup_s``, the stack runs idle at its first
replica count, as ``inflight up`` does while the bench waits for it (Prometheus has a
history, the autoscaler has started). A trace window may bring a **warm-up**
(``inflight.workload.trace_formats``: the trace's seconds before the window): its requests
arrive in the ``warmup_traffic_s`` seconds before 0, after that idle stretch, and are served
like any other, but are not among the run's requests (not measured: attainment counts the
window's requests, replica-seconds are counted over [0, end]), so the stack enters the window
in the state that traffic left it in. Events:

* a request arrives at its planned ``t_s`` (router: a slot, or held; ``inflight.sim.router``);
* a replica wakes when its engine's next sequence finishes (``Engine.next_finish_s``);
  finished sequences end their requests and free their slots;
* Prometheus scrapes every ``scrape_interval_s`` (``inflight.sim.scrapes``);
* the control plane ticks when due (KEDA polls, HPA syncs: ``Autoscaler.tick``);
* a starting replica passes its health check ``startup_s`` after it started
  (``inflight.sim.fleet``).

The run ends when every request has ended, or ``drain_s`` after the workload's end; what is
still open then is ``unfinished``, as the live bench counts it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

from inflight.control import hpa
from inflight.control.hold_order import (
    DEFAULT_MAX_LATE_S,
    HOLD_DEADLINE_S,
    HoldClassError,
    HoldPlan,
    plan_from_classes,
    router_hold_deadline_s,
)
from inflight.control.keda import KedaSpec
from inflight.control.trigger import SCRAPE_INTERVAL_S, scaler_metadata
from inflight.emulator.engine import Sequence as EngineSeq
from inflight.emulator.profile import Profile
from inflight.measure.warmup import carried_in_flight_s
from inflight.planes.autoscaler import AutoscaleConfig, Autoscaler, Observation
from inflight.planes.scaler_client import ScalerUnavailable
from inflight.prefix_blocks import rechunk
from inflight.sim import peers
from inflight.sim import scrapes as S
from inflight.sim.events import EventQueue
from inflight.sim.fleet import Fleet, SimReplica
from inflight.sim.router import MAX_QUEUE, QUEUE_TIMEOUT_S, Held, SimRouter, discovered_capacity
from inflight.sim.scaler import ScalerAnswer, SimScaler
from inflight.statedir import DecisionRecord
from router.dispatch import Charge
from router.errors import NoEndpoint, QueueFull, QueueTimeout, Shed
from router.pool import Endpoint

# `inflight up`'s defaults (inflight/up/cli.py UpSettings: Kubernetes' and KEDA's own
# defaults, inflight/control/hpa.py), seed seconds.
HPA_SYNC_S = hpa.HPA_SYNC_PERIOD_S
POLLING_INTERVAL_S = hpa.KEDA_POLLING_INTERVAL_S
COOLDOWN_S = hpa.KEDA_COOLDOWN_PERIOD_S
# How often a peer's loop is ticked at most: finer than any of its own periods but Ray's
# 0.1 s controller (ticked at its own period), which the loops assume they are called at.
PEER_TICK_S = 0.5
# The scaler's StreamIsActive check period at time-scale 1 (inflight/up/stack.py).
STREAM_INTERVAL_S = 1.0

# Event priorities at one instant: requests and replicas first, then the scrape, then
# the control plane (it reads what the scrape just recorded).
_P_WORK, _P_SCRAPE, _P_CONTROL = 0, 1, 2

# Policies the scaler decides (KEDA external trigger + HPA).
SCALER_POLICIES = ("saturation", "qps")


class Planned(Protocol):
    """One planned request (``inflight.workload.trace.PlannedRequest``)."""

    @property
    def t_s(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...


@dataclass(frozen=True)
class SimConfig:
    """A run's stack: policy, replicas, replica profile and the control plane's periods.

    ``policy``: ``saturation``, ``qps`` or ``fixed:N``. ``scaler_metadata``: overrides of
    the trigger metadata ``inflight up`` sends (``inflight.control.trigger.scaler_metadata``).
    Every duration in seed seconds (the simulator runs at time-scale 1).
    """

    policy: str = "saturation"
    min_replicas: int = 1
    max_replicas: int = 2
    startup_s: float = 30.0
    profile: Profile = field(default_factory=Profile)
    scaler_metadata: Mapping[str, str] = field(default_factory=dict)
    scrape_interval_s: float = SCRAPE_INTERVAL_S
    # Prometheus offsets a target's scrapes by a hash of its labels: the first scrape is
    # this long after the run's start (calibration: the phase live runs do not record).
    scrape_offset_s: float = 0.0
    hpa_sync_s: float = HPA_SYNC_S
    polling_interval_s: float = POLLING_INTERVAL_S
    cooldown_s: float = COOLDOWN_S
    stream_interval_s: float = STREAM_INTERVAL_S
    max_queue: int = MAX_QUEUE
    queue_timeout_s: float = QUEUE_TIMEOUT_S
    # inflight up --hold-deadline-s (inflight.control.hold_order: peers hold FIFO); 0 = FIFO.
    hold_deadline_s: float = HOLD_DEADLINE_S
    # --hold-deadline-peers: the peers' runs get the deadline too (the order alone).
    hold_deadline_peers: bool = False
    # inflight router --priority-class (NAME:MAX_PRIORITY:DEADLINE_S, in place of the hold
    # deadline: each class has its own) and --max-late-s (0 = no bound); a planned
    # request's class comes from its ``priority`` (0 if it has none).
    priority_classes: tuple[str, ...] = ()
    max_late_s: float = DEFAULT_MAX_LATE_S
    drain_s: float = 600.0
    warmup_s: float = 120.0
    seed: int = 0  # the router's tie-breaking among equally loaded replicas
    # Prometheus' view of the router: this many targets sharing its load, and spans in
    # which one of them fails its scrapes (inflight.sim.scrapes; --routers, --router-down).
    routers: int = 1
    router_down: tuple[S.RouterDown, ...] = ()
    # inflight up --token-admission (the router's --discover-kv-tokens), inflight's runs only:
    # token admission, inflight.sim.router.
    token_admission: bool = False
    # inflight router's --dispatch prefix --prefix-balance N (None: least-outstanding): the
    # router sends a request where its prompt's prefix is cached (router/prefix_index.py),
    # its index keyed by the engine's own block hashes (the prompt as token ids).
    prefix_balance: int | None = None

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise ValueError(f"--min-replicas must be ≥ 0, got {self.min_replicas}")
        if self.max_replicas < max(1, self.min_replicas):
            raise ValueError(
                f"--max-replicas must be ≥ max(1, --min-replicas), got {self.max_replicas}"
            )
        if self.startup_s < 0:
            raise ValueError(f"--startup-s must be ≥ 0, got {self.startup_s}")
        if not 0 <= self.scrape_offset_s < self.scrape_interval_s:
            raise ValueError(
                f"scrape_offset_s must be in [0, {self.scrape_interval_s:g}), "
                f"got {self.scrape_offset_s:g}"
            )
        S.check_routers(self.routers, self.router_down)
        if self.priority_classes or self.max_late_s:
            _ = self.hold_plan  # --priority-class / --max-late-s errors, named
        fixed = fixed_replicas(self.policy)
        if fixed is None and self.policy not in policy_names():
            raise ValueError(
                f"--policy {self.policy!r}: expected one of {', '.join(policy_names())} or fixed:N"
            )

    @property
    def hold_plan(self) -> HoldPlan | None:
        """The router's priority classes, None without (one class, ``hold_deadline_s``);
        ValueError naming the flag when they cannot be used."""
        if self.max_late_s < 0:
            raise ValueError(f"--max-late-s must be ≥ 0, got {self.max_late_s:g}")
        if not self.priority_classes:
            return None
        try:
            return plan_from_classes(list(self.priority_classes), self.max_late_s or None)
        except HoldClassError as exc:
            raise ValueError(f"--priority-class: {exc}") from None

    @property
    def replica_profile(self) -> Profile:
        """The emulator's profile at time-scale 1 with this run's start-up."""
        return replace(self.profile, time_scale=1.0, startup_s=self.startup_s)

    def metadata(self) -> dict[str, str]:
        """The trigger metadata: ``inflight up``'s at time-scale 1, then the overrides."""
        return scaler_metadata(
            self.profile.max_num_seqs,
            1.0,
            self.policy,
            dict(self.scaler_metadata),
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
        )


def policy_names() -> tuple[str, ...]:
    """Every control plane the simulator runs: the scaler's policies, then the peers."""
    return (*SCALER_POLICIES, *peers.catalog())


def fixed_replicas(policy: str) -> int | None:
    """``fixed:N`` → N; None for another policy. ValueError for a bad N."""
    if not policy.startswith("fixed:"):
        return None
    text = policy.split(":", 1)[1]
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"--policy {policy!r}: fixed:N needs an integer N ≥ 1") from None
    if n < 1:
        raise ValueError(f"--policy {policy!r}: fixed:N needs an integer N ≥ 1")
    return n


@dataclass
class RequestResult:
    """One request's fate, seed seconds from the workload's start."""

    sent_s: float
    prompt_tokens: int
    max_tokens: int
    dispatched_s: float | None = None
    first_s: float | None = None
    end_s: float | None = None
    output_tokens: int = 0
    ok: bool = False
    cause: str | None = None  # http_503 (queue full), http_504 (queue timeout), unfinished
    priority: int = 0  # x-request-priority (vLLM's: lower first); its class: SimConfig's


@dataclass
class SimResult:
    config: SimConfig
    requests: list[RequestResult]
    timeline: list[dict[str, float]]  # {"t", "desired", "live", "ready", "inflight"}
    decisions: list[DecisionRecord]
    end_s: float  # the workload's end (replica-seconds are counted over [0, end_s])
    finished_s: float  # when the run stopped
    # ∫ L dt over [0, finished_s] of the measured requests (router L, for Little's Law:
    # the warm-up's requests still open at 0 are taken out)
    l_integral: float
    inflight_samples: list[tuple[float, float]]  # L as Prometheus scraped it, from t = 0
    warmup: list[RequestResult] = field(default_factory=list)  # the warm-up's, unmeasured
    # The scaler's binding dimension per fresh decision (docs/capacity.md; scaler policies)
    capacity_bindings: list[str] = field(default_factory=list)
    # The scaler's own answers, with its reasons (scaler policies; scaler.jsonl)
    scaler_answers: list[ScalerAnswer] = field(default_factory=list)
    # The replicas' prefix caches over the whole run, every replica's (warm-up included):
    # (vllm:prefix_cache_queries, vllm:prefix_cache_hits) in tokens; None with caching off
    prefix_cache: tuple[int, int] | None = None

    def points(self, key: str) -> list[tuple[float, int]]:
        return [(p["t"], int(p[key])) for p in self.timeline]


class Simulation:
    """Build with a config and the planned requests; :meth:`run` once."""

    def __init__(
        self,
        config: SimConfig,
        planned: Sequence[Planned],
        end_s: float,
        warmup: Sequence[Planned] = (),
        warmup_traffic_s: float = 0.0,
    ) -> None:
        if warmup_traffic_s < 0 or any(not 0 <= p.t_s <= warmup_traffic_s for p in warmup):
            raise ValueError(
                f"the warm-up's requests must lie within its {warmup_traffic_s:g} s, "
                "times counted from its start"
            )
        self.config = config
        self.end_s = end_s
        self.events = EventQueue(-config.warmup_s - warmup_traffic_s)
        self.peer = peers.catalog().get(config.policy)
        deadline_s = router_hold_deadline_s(
            config.hold_deadline_s, peer=self.peer is not None, peers_too=config.hold_deadline_peers
        )
        self.plan = config.hold_plan
        self.router = SimRouter(
            config.profile.max_num_seqs,
            random.Random(config.seed),
            max_queue=config.max_queue,
            queue_timeout_s=config.queue_timeout_s,
            hold_when_full=True if self.peer is None else self.peer.router_hold,
            hold_deadline_s=deadline_s if self.plan is None else None,
            clock=lambda: self.events.now_s,
            max_late_s=config.max_late_s or None,
            plan=self.plan,
            kv_tokens=discovered_capacity(config.profile)
            if config.token_admission and self.peer is None
            else None,
            prefix_balance=config.prefix_balance if self.peer is None else None,
            kv_blocks=config.profile.usable_blocks or None,
        )
        self.scrapes = S.Scrapes(config.routers, config.router_down)
        self.fleet = Fleet(config.replica_profile, self.events, self.router, self._changed)
        # No crash yet, so no back-off from the run's first instant (the clock starts before
        # 0: a Backoff's default "not before 0" would hold every start of a warm-up).
        self.fleet.backoff = replace(self.fleet.backoff, restart_not_before_s=self.events.now_s)
        self.timeline: list[dict[str, float]] = []
        self.decisions: list[DecisionRecord] = []
        self.results = [
            RequestResult(p.t_s, p.prompt_tokens, p.max_tokens, priority=getattr(p, "priority", 0))
            for p in planned
        ]
        # The warm-up's requests, sent before 0 (times moved to end at 0), not measured.
        self.warmup = [
            RequestResult(p.t_s - warmup_traffic_s, p.prompt_tokens, p.max_tokens,
                          priority=getattr(p, "priority", 0))
            for p in warmup
        ]  # fmt: skip
        # Each request's prompt as the engine's block hashes (its PlannedRequest.prefix_ids
        # cut to the replicas' block size), for the replicas' prefix cache and the router's
        # prefix dispatch; computed once, by the result's identity (RequestResult is what
        # requests.jsonl writes).
        self._prefix: dict[int, tuple[int, ...]] = {}
        if config.profile.enable_prefix_caching:
            size = config.profile.block_size
            for p, res in zip((*planned, *warmup), (*self.results, *self.warmup), strict=True):
                ids: tuple[int, ...] = getattr(p, "prefix_ids", ())
                if ids:
                    id_tokens = getattr(p, "prefix_block_tokens", 0)
                    self._prefix[id(res)] = tuple(rechunk(ids, id_tokens, size, res.prompt_tokens))
        self._open = 0  # requests arrived and not ended
        self._pending = len(self.results) + len(self.warmup)  # not ended (arrived or not)
        self._by_seq: dict[EngineSeq, tuple[RequestResult, Endpoint, Charge]] = {}
        self._l_integral = 0.0
        self._l_last_s = 0.0
        self.autoscaler: Autoscaler | None = None
        # Called when a request ends: a closed loop's clients send their next one
        # (inflight.sim.closed_loop); None for a planned (open-loop) run.
        self.on_end: Callable[[RequestResult], None] | None = None
        fixed = fixed_replicas(config.policy)
        first = fixed if fixed is not None else max(1, config.min_replicas)
        self.fleet.start_ready(first)
        if self.peer is not None:
            self._start_peer()
        elif fixed is None:
            self._start_autoscaler()

    # --- control plane -----------------------------------------------------------------
    def _start_autoscaler(self) -> None:
        c = self.config
        scaler = SimScaler(c.metadata(), self.scrapes, lambda: self.events.now_s)
        self.scaler = scaler
        self.autoscaler = Autoscaler(
            scaler=scaler,
            config=AutoscaleConfig(
                hpa=hpa.HpaSpec(
                    min_replicas=max(1, c.min_replicas),
                    max_replicas=c.max_replicas,
                    behavior=hpa.SHIPPED_BEHAVIOR,
                ),
                keda=KedaSpec(c.min_replicas, c.cooldown_s),
                hpa_sync_s=c.hpa_sync_s,
                polling_interval_s=c.polling_interval_s,
            ),
            get_replicas=lambda: self.fleet.desired,
            set_replicas=self.fleet.set_desired,
            observe=self._observe,
            record=self.decisions.append,
            wall_clock=lambda: self.events.now_s,
        )
        self.autoscaler.start(self.events.now_s)
        self._schedule_control()
        if c.min_replicas == 0:
            self._was_active = False
            self.events.at(self.events.now_s, self._stream_is_active, _P_CONTROL)

    def _stream_is_active(self) -> None:
        """The scaler's StreamIsActive: push ``true`` on the idle → active edge.

        As ``ExternalScalerServicer._stream`` does every ``stream_interval_s``: a refused
        decision leaves the state as it was. KEDA scales from zero on the push at once
        (the local loop at its next tick): the push is handled now.
        """
        assert self.autoscaler is not None
        try:
            active = self.scaler.answer().active
        except ScalerUnavailable:
            pass
        else:
            if active and not self._was_active:
                self.autoscaler.activate()
                self.autoscaler.tick(self.events.now_s)
            self._was_active = active
        self.events.at(
            self.events.now_s + self.config.stream_interval_s, self._stream_is_active, _P_CONTROL
        )

    def _start_peer(self) -> None:
        """The peer's loop, built as ``inflight up --policy NAME`` builds it (time-scale 1)."""
        from inflight.planes.peers.base import PeerIO
        from inflight.planes.peers.catalog import PeerSettings

        c = self.config
        assert self.peer is not None
        io = PeerIO(
            read=peers.reader(self.scrapes, lambda: self.events.now_s, c.scrape_interval_s),
            get_replicas=lambda: self.fleet.desired,
            ready_replicas=lambda: self.fleet.ready,
            set_replicas=self.fleet.set_desired,
            observe=self._observe,
            record=self.decisions.append,
            wall_clock=lambda: self.events.now_s,
        )
        settings = PeerSettings(
            time_scale=1.0,
            slots_per_replica=c.profile.max_num_seqs,
            min_replicas=c.min_replicas,
            max_replicas=c.max_replicas,
            hpa_sync_s=c.hpa_sync_s,
        )
        self.peer_loop = self.peer.build(settings, io)
        self.peer_loop.start(self.events.now_s)
        # The live stack ticks its loop every 50 ms wall; a loop keeps its own clocks
        # (Knative's collector scrapes every second, decides every 2 s), so it must be
        # ticked at least as often as its finest period: every PEER_TICK_S, or tick_s.
        self._peer_period_s = min(self.peer.tick_s, PEER_TICK_S)
        self.events.at(self.events.now_s + self._peer_period_s, self._peer_tick, _P_CONTROL)

    def _peer_tick(self) -> None:
        self.peer_loop.tick(self.events.now_s)
        self.events.at(self.events.now_s + self._peer_period_s, self._peer_tick, _P_CONTROL)

    def _schedule_control(self) -> None:
        a = self.autoscaler
        assert a is not None
        self.events.at(min(a.next_hpa_s, a.next_keda_s), self._control, _P_CONTROL)

    def _control(self) -> None:
        assert self.autoscaler is not None
        self.autoscaler.tick(self.events.now_s)
        self._schedule_control()

    def _observe(self) -> Observation:
        return Observation(
            float(self.router.inflight), self.router.ready_endpoints(), self.router.pool.slots
        )

    # --- Prometheus --------------------------------------------------------------------
    def _scrape(self) -> None:
        now = self.events.now_s
        for r in list(self.fleet.replicas.values()):
            self._wake(r, now)
        self.scrapes.scrape(
            now,
            {
                S.INFLIGHT: float(self.router.inflight),
                S.QUEUED: float(self.router.queued),
                S.RECEIVED: float(self.router.received),
                S.READY: float(self.router.ready_endpoints()),
                **self.fleet.vllm_sample(),  # queues and KV cache (docs/capacity.md)
                **S.router_tokens(self.router.dispatcher),  # token demand (docs/capacity.md)
            },
        )
        self.events.at(now + self.config.scrape_interval_s, self._scrape, _P_SCRAPE)

    # --- requests ----------------------------------------------------------------------
    def send(self, prompt_tokens: int, max_tokens: int) -> RequestResult:
        """A request sent now, outside the plan (a closed loop's client,
        ``inflight.sim.closed_loop``):
        it arrives at the router at this instant, after the event that sent it."""
        res = RequestResult(self.events.now_s, prompt_tokens, max_tokens)
        self.results.append(res)
        self._pending += 1
        self.events.at(self.events.now_s, partial(self._arrive, res), _P_WORK)
        return res

    def _arrive(self, res: RequestResult) -> None:
        self._account_l()
        self._open += 1

        def on_slot(ep: Endpoint, charge: Charge) -> None:
            self._dispatch(res, ep, charge)

        def on_refused(exc: BaseException) -> None:  # the lateness bound's 503
            self._account_l()
            self._end(res, ok=False, cause=f"http_{getattr(exc, 'status', 503)}")

        cls = self.plan.class_of(res.priority) if self.plan is not None else 0
        blocks = self._hashes(res) if self.config.prefix_balance is not None else ()
        try:
            held = self.router.arrive(
                on_slot,
                on_refused,
                cls,
                self.router.demand(res.prompt_tokens, res.max_tokens),
                blocks,
            )
        except (QueueFull, NoEndpoint, Shed) as exc:
            self._end(res, ok=False, cause=f"http_{exc.status}")
            return
        if held is not None:
            timeout_s = self.events.now_s + self.config.queue_timeout_s
            self.events.at(timeout_s, lambda: self._queue_timeout(res, held))

    def _queue_timeout(self, res: RequestResult, held: Held) -> None:
        self._account_l()
        if self.router.give_up(held):
            self._end(res, ok=False, cause=f"http_{QueueTimeout.status}")

    def _dispatch(self, res: RequestResult, ep: Endpoint, charge: Charge) -> None:
        """``res`` has a slot on ``ep``, holding ``charge`` there (given back at its end)."""
        now = self.events.now_s
        res.dispatched_s = now
        replica = self.fleet.replica_of(ep)
        if res.prompt_tokens + res.max_tokens > self.config.profile.max_model_len:
            # Longer than the replica's context: vLLM (and the emulator's server) answer
            # HTTP 400 at once; the slot comes back (an event: not inside the router's call).
            self.events.at(now, partial(self._too_long, res, ep, charge), _P_WORK)
            return
        # Bring the replica to now first (its finished requests end, as the emulator's
        # server advances before it submits): submit's own advance would drop them.
        self._wake(replica, now)
        hashes = self._hashes(res)
        seq = EngineSeq(res.prompt_tokens, res.max_tokens, arrival_s=now, block_hashes=hashes)
        self._by_seq[seq] = (res, ep, charge)
        replica.engine.submit(seq, now)
        self._schedule_wake(replica)

    def _hashes(self, res: RequestResult) -> tuple[int, ...]:
        """A request's prompt as the engine's block hashes; () for a prompt with none (no
        prefix cache)."""
        return self._prefix.get(id(res), ())

    def _too_long(self, res: RequestResult, ep: Endpoint, charge: Charge) -> None:
        replica = self.fleet.replica_of(ep)
        self._account_l()
        self.router.finish(ep, charge)
        self._end(res, ok=False, cause="http_400")
        self.fleet.released(replica)

    def _schedule_wake(self, r: SimReplica) -> None:
        at_s = r.engine.next_finish_s()
        if at_s is None or at_s == r.wake_s:
            return
        r.wake_token += 1
        r.wake_s = at_s
        token = r.wake_token
        self.events.at(max(at_s, self.events.now_s), lambda: self._on_wake(r, token))

    def _on_wake(self, r: SimReplica, token: int) -> None:
        if token != r.wake_token:
            return
        r.wake_s = None
        self._wake(r, self.events.now_s)

    def _wake(self, r: SimReplica, now_s: float) -> None:
        finished = r.engine.advance(now_s)
        if finished:
            self._account_l()
        for seq in finished:
            res, ep, charge = self._by_seq.pop(seq)
            res.first_s = seq.first_token_s
            res.output_tokens = seq.tokens
            self.router.finish(ep, charge)
            self._end(res, ok=True, cause=None, end_s=seq.finished_s)
            self.fleet.released(r)
        self._schedule_wake(r)

    def _end(
        self, res: RequestResult, ok: bool, cause: str | None, end_s: float | None = None
    ) -> None:
        res.ok = ok
        res.cause = cause
        res.end_s = self.events.now_s if end_s is None else end_s
        self._open -= 1
        self._pending -= 1
        if self.on_end is not None:
            self.on_end(res)

    # --- bookkeeping -------------------------------------------------------------------
    def _account_l(self) -> None:
        """∫ L dt from 0 to now, updated before every change of L."""
        now = self.events.now_s
        if now > self._l_last_s:
            self._l_integral += self.router.inflight * (now - self._l_last_s)
            self._l_last_s = now

    def _changed(self) -> None:
        point = {
            "t": self.events.now_s,
            "desired": self.fleet.desired,
            "live": self.fleet.live,
            "ready": self.fleet.ready,
        }
        if self.timeline and self.timeline[-1]["t"] == point["t"]:
            self.timeline[-1] = point
        elif not self.timeline or any(self.timeline[-1][k] != point[k] for k in point if k != "t"):
            self.timeline.append(point)

    # --- run ---------------------------------------------------------------------------
    def run(self, done: Callable[[], bool] | None = None) -> SimResult:
        """Run until every request has ended and the workload is over, or ``done()`` turns
        true (a closed loop: its last level ended), or ``drain_s`` past ``end_s``."""
        events = self.events
        self._changed()
        events.at(events.now_s + self.config.scrape_offset_s, self._scrape, _P_SCRAPE)
        for res in (*self.warmup, *self.results):
            events.at(res.sent_s, partial(self._arrive, res))
        stop_s = self.end_s + self.config.drain_s
        events.run_until(
            stop_s,
            stop=done or (lambda: self._pending == 0 and events.now_s >= self.end_s),
        )
        finished_s = events.now_s
        self._account_l()
        for res in (*self.warmup, *self.results):
            if res.end_s is None:
                res.cause = "unfinished"
        # The warm-up's requests open at 0 were in L after it: out of the measured ∫ L dt
        # (inflight.measure.warmup, as the live bench takes them out).
        carried = carried_in_flight_s(((r.sent_s, r.end_s) for r in self.warmup), 0.0, finished_s)
        return SimResult(
            config=self.config,
            requests=self.results,
            timeline=self.timeline,
            decisions=self.decisions,
            end_s=self.end_s,
            finished_s=finished_s,
            l_integral=self._l_integral - carried,
            warmup=self.warmup,
            capacity_bindings=list(self.scaler.bindings) if self.autoscaler is not None else [],
            scaler_answers=list(self.scaler.answers) if self.autoscaler is not None else [],
            prefix_cache=self.fleet.prefix_cache_totals()
            if self.config.profile.enable_prefix_caching
            else None,
            inflight_samples=[
                (t, v)
                for t, v in zip(self.scrapes.times_s, self.scrapes.values[S.INFLIGHT], strict=True)
                if t >= 0.0
            ],
        )


def simulate(
    config: SimConfig,
    planned: Sequence[Planned],
    end_s: float | None = None,
    warmup: Sequence[Planned] = (),
    warmup_traffic_s: float = 0.0,
) -> SimResult:
    """Run ``planned`` through the stack ``config`` describes; ``end_s`` defaults to the
    last send time. ``warmup``: requests replayed, unmeasured, over the ``warmup_traffic_s``
    seconds before 0 (times from the warm-up's start; the module docstring)."""
    if end_s is None:
        end_s = max((p.t_s for p in planned), default=0.0)
    return Simulation(config, planned, end_s, warmup, warmup_traffic_s).run()
