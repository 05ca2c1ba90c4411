"""The replicas in virtual time: each an ``inflight.emulator.engine.Engine``, its life decided by
``inflight.control.lifecycle.reconcile``, the function ``inflight up``'s supervisor calls.

This module is the supervisor's shell with the I/O replaced by virtual probes:

* ``alive``: a replica's process never dies by itself here;
* ``healthy``: ``/health`` answers 200 once ``startup_s`` has passed since the start (the
  emulator's rule); ``listening``: it listens on its own port;
* ``drained``: the router holds no request on it (the pool has forgotten it);
* ``group_alive``: False once it was sent SIGTERM (the emulator exits at once).

Actions: ``Publish`` rewrites the router's endpoints (the ready replicas), ``Terminate``
stops the process, ``Remove`` forgets it. A pass runs when something can change: the
desired count moved, a replica's start-up ended, a draining replica let go of its last
request, a drain deadline passed; passes repeat at that instant until nothing happens
(the live loop's 50 ms ticks, in no time). On a scale-down the ready replica that leaves is
:mod:`inflight.control.scale_down`'s choice, on the figures the live supervisor reads from
the router's status: requests in flight per endpoint, prefix blocks only it holds.
Replica-seconds count every replica the lifecycle calls live: starting, ready, draining,
stopping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from inflight.control import lifecycle as lc
from inflight.control.scale_down import Warmth
from inflight.emulator.engine import Engine
from inflight.emulator.profile import Profile
from inflight.sim import scrapes as S
from inflight.sim.events import EventQueue
from inflight.sim.router import SimRouter
from router.pool import Endpoint

_PASSES = 8  # passes at one instant: drain -> stop -> gone takes three


_CLOCK_SLACK_S = 1e-9  # seed s: float rounding of "start + start-up − start", not time


@dataclass(eq=False)
class SimReplica:
    """A replica's process: its engine and where the router knows it."""

    id: int
    url: str
    engine: Engine
    wake_token: int = 0  # the replica's current wake-up event (older ones are void)
    wake_s: float | None = None
    terminated: bool = False


@dataclass
class Fleet:
    """The supervisor: ``desired``, the replicas' states, their engines."""

    profile: Profile
    events: EventQueue
    router: SimRouter
    on_change: Callable[[], None]
    config: lc.LifecycleConfig = field(default_factory=lc.LifecycleConfig)
    desired: int = 0
    states: list[lc.ReplicaState] = field(default_factory=list)
    replicas: dict[int, SimReplica] = field(default_factory=dict)
    by_url: dict[str, SimReplica] = field(default_factory=dict)
    backoff: lc.Backoff = field(default_factory=lc.Backoff)
    _next_id: int = 0
    # vllm:prefix_cache_{queries,hits} (tokens) of the replicas removed so far
    _gone_prefix: tuple[int, int] = (0, 0)

    # --- counts ------------------------------------------------------------------------
    @property
    def live(self) -> int:
        return lc.count(self.states, lc.LIVE_PHASES)

    @property
    def ready(self) -> int:
        return lc.count(self.states, frozenset({lc.ReplicaPhase.READY}))

    def phase(self, replica_id: int) -> lc.ReplicaPhase | None:
        for s in self.states:
            if s.id == replica_id:
                return s.phase
        return None

    # --- the supervisor ------------------------------------------------------------------
    def start_ready(self, n: int) -> None:
        """``inflight up`` waits for its first replicas before the load begins."""
        self.desired = n
        now_s = self.events.now_s
        for _ in range(n):
            state = self._start(now_s)
            self.states.append(
                lc.ReplicaState(
                    state.id,
                    lc.ReplicaPhase.READY,
                    state.port,
                    started_at_s=now_s - self.profile.startup_wall_s,
                    ready_at_s=now_s,
                    next_health_s=now_s + self.config.health_interval_s,
                )
            )
        self._publish()

    def set_desired(self, n: int) -> None:
        """The autoscaler's ``set_replicas``."""
        self.desired = n
        self.tick()

    def tick(self) -> None:
        """Passes of probe → ``reconcile`` → act at this instant, until nothing happens."""
        now_s = self.events.now_s
        for _ in range(_PASSES):
            probes = {s.id: self._probe(s, lc.needed(s, now_s, self.config)) for s in self.states}
            result = lc.reconcile(
                self.states, probes, self.backoff, self.desired, now_s, self.config, self._warmth()
            )
            self.states = list(result.replicas)
            self.backoff = result.backoff
            for action in result.actions:
                self._perform(action, now_s)
            for _ in range(result.start):
                self.states.append(self._start(now_s))
            if not result.actions and not result.start:
                break
        self.on_change()

    def _warmth(self) -> dict[int, Warmth] | None:
        """What each ready replica's loss would cost (:mod:`inflight.control.scale_down`), as
        the live supervisor reads it from the router: its requests in flight, the prefix
        blocks only it holds. Only when one may leave, and only with prefix dispatch (the
        rule is that feature's, off by default with it: without, None, newest first)."""
        if lc.count(self.states, lc.ACTIVE_PHASES) <= self.desired:
            return None
        pool, index = self.router.pool, self.router.dispatcher.prefix
        if index is None:  # without prefix dispatch: newest first, as before the rule
            return None
        warmth: dict[int, Warmth] = {}
        for s in self.states:
            if s.phase is lc.ReplicaPhase.READY:
                url = self.replicas[s.id].url
                ep = pool.get(url)
                unique = index.unique_blocks(url) if index is not None else 0
                warmth[s.id] = Warmth(ep.inflight if ep is not None else 0, unique)
        return warmth

    def _probe(self, state: lc.ReplicaState, kinds: frozenset[lc.ProbeKind]) -> lc.Probes:
        r = self.replicas[state.id]
        K = lc.ProbeKind
        healthy = None
        if K.HEALTH in kinds:
            # The pass at start + start-up (``_start``) must see it healthy: (t + 30) − t
            # can round to 29.999999999999993 (t = 50.0999999999979), and a replica then
            # stays starting until some other pass, forever under a policy that never
            # changes its count again. A nanosecond of slack absorbs the rounding.
            up_s = self.events.now_s - state.started_at_s
            healthy = up_s >= self.profile.startup_wall_s - _CLOCK_SLACK_S
        return lc.Probes(
            alive=not r.terminated if K.ALIVE in kinds else None,
            group_alive=not r.terminated if K.GROUP_ALIVE in kinds else None,
            healthy=healthy,
            listening=frozenset({state.port}) if K.LISTENING in kinds and healthy else None,
            drained=self.router.pool.get(r.url) is None if K.DRAINED in kinds else None,
        )

    def _perform(self, action: lc.Action, now_s: float) -> None:
        if isinstance(action, lc.Publish):
            self._publish()
        elif isinstance(action, lc.Terminate):
            self.replicas[action.replica_id].terminated = True
        elif isinstance(action, lc.Remove):
            r = self.replicas.pop(action.replica_id)
            del self.by_url[r.url]
            q, h = self._gone_prefix
            self._gone_prefix = (q + r.engine.prefix_queries_total, h + r.engine.prefix_hits_total)
            r.wake_token += 1
        elif isinstance(action, lc.Draining):
            # The drain deadline: a pass then, whatever the router holds.
            self.events.at(now_s + self.config.drain_timeout_s, self.tick)

    def _start(self, now_s: float) -> lc.ReplicaState:
        rid = self._next_id
        self._next_id += 1
        port = 10_000 + rid
        r = SimReplica(rid, f"http://replica-{rid}:{port}", Engine(self.profile))
        self.replicas[rid] = r
        self.by_url[r.url] = r
        # Its health check passes start-up after it started: a pass then.
        self.events.at(now_s + self.profile.startup_wall_s, self.tick)
        return lc.new_replica(rid, port, now_s)

    def _publish(self) -> None:
        ready = [s for s in self.states if s.phase is lc.ReplicaPhase.READY]
        self.router.set_endpoints([self.replicas[s.id].url for s in ready])

    def released(self, r: SimReplica) -> None:
        """The router gave back a slot on ``r``: a draining replica may be drained now."""
        if self.phase(r.id) is lc.ReplicaPhase.DRAINING and self.router.pool.get(r.url) is None:
            self.tick()

    def scraped(self) -> list[SimReplica]:
        """The replicas Prometheus scrapes: ready and draining ones (they serve)."""
        serving = (lc.ReplicaPhase.READY, lc.ReplicaPhase.DRAINING)
        return [self.replicas[s.id] for s in self.states if s.phase in serving]

    def vllm_sample(self) -> dict[str, float]:
        """What Prometheus reads from the scraped replicas' vLLM series, summed as the
        queries sum them (``inflight.sim.scrapes``): waiting, running, KV usage (each
        engine's ``vllm:kv_cache_usage_perc``), waiting for capacity (the emulator's:
        every waiting request) and the cache size ``vllm:cache_config_info`` states. A sum
        over no replica is no series: NaN (running reads 0 then, as it always has)."""
        serving = self.scraped()
        if not serving:
            nan = math.nan
            return {
                S.VLLM_WAITING: nan,
                S.VLLM_RUNNING: 0.0,
                S.KV_USAGE: nan,
                S.KV_WAITING: nan,
                S.KV_CACHE_TOKENS: nan,
            }
        waiting = float(sum(r.engine.num_waiting for r in serving))
        sample = {
            S.VLLM_WAITING: waiting,
            S.VLLM_RUNNING: float(sum(r.engine.num_running for r in serving)),
            S.KV_USAGE: sum(r.engine.kv_cache_usage() for r in serving),
            S.KV_WAITING: waiting,
            S.KV_CACHE_TOKENS: float(self.profile.kv_cache_size_tokens),
        }
        if self.profile.enable_prefix_caching:  # vLLM's counters, as the scrape sums them
            sample[S.PREFIX_QUERIES] = float(sum(r.engine.prefix_queries_total for r in serving))
            sample[S.PREFIX_HITS] = float(sum(r.engine.prefix_hits_total for r in serving))
        return sample

    def prefix_cache_totals(self) -> tuple[int, int]:
        """Every replica's prefix-cache queries and hits (tokens), the removed ones too."""
        q, h = self._gone_prefix
        for r in self.replicas.values():
            q += r.engine.prefix_queries_total
            h += r.engine.prefix_hits_total
        return q, h

    def replica_of(self, ep: Endpoint) -> SimReplica:
        return self.by_url[ep.url]
