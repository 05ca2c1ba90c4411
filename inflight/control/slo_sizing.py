"""The fleet an SLO needs for the traffic measured: Erlang C over the replicas' slots.

A fleet of ``n`` replicas with ``slots`` each is, to a request, ``c = n x slots`` servers.
With arrivals at rate λ and a mean service time S (a slot held from admission to the last
token), the offered load is ``a = λS`` slots (Little's Law), and in the M/M/c queue the
chance a request waits at all is Erlang's C formula; the chance it waits longer than
``t`` is ``C(c, a) x exp(-(c - a) t / S)`` (Kleinrock, *Queueing Systems* vol. 1, §3.4;
Gross and Harris, *Fundamentals of Queueing Theory*, §2.3). A request that waits longer
than the TTFT SLO before its first step misses the SLO whatever its prefill, so the
smallest fleet whose chance of that is at most ``1 - goal`` is the least the SLO allows.

Only the operator's SLO and two measured rates go in: the arrivals, and the service time
the engines gave over the same span (:func:`inflight.control.policy.service_time`). The
stage never reads low while requests wait: the policy takes the larger of this fleet and
the one L asks for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Most servers the search goes to (a fleet of 100 replicas of 100 slots); beyond, the
# largest fleet asked for is the maximum the spec allows anyway.
_MAX_SERVERS = 10_000


def _erlang_b_next(servers: int, load: float, blocked: float) -> float:
    """Erlang B at ``servers`` from its value at ``servers - 1`` (1 at 0 servers): the
    recurrence B(k) = aB(k-1) / (k + aB(k-1)), which stays in [0, 1]."""
    return load * blocked / (servers + load * blocked)


def _late_share(
    servers: int, load: float, blocked: float, service_s: float, wait_s: float
) -> float:
    """The chance of a wait over ``wait_s`` in M/M/``servers`` with Erlang B ``blocked``
    there: Erlang C = c·B ÷ (c − a(1 − B)), × exp(−(c − a) wait_s ÷ service_s); 1 at or
    above ``servers``, 0 at no load."""
    if load <= 0:
        return 0.0
    if load >= servers:
        return 1.0
    waits = servers * blocked / (servers - load * (1.0 - blocked))
    return waits * math.exp(-(servers - load) * wait_s / service_s)


def erlang_c(servers: int, load: float) -> float:
    """The chance an arrival waits in M/M/``servers`` at offered ``load`` (Erlang C); 1 at
    or above ``servers`` (the queue grows without bound), 0 at no load. Computed through
    Erlang B's recurrence, which stays in [0, 1].

    >>> round(erlang_c(1, 0.5), 6), round(erlang_c(2, 1.0), 6), erlang_c(4, 4.0)
    (0.5, 0.333333, 1.0)
    """
    return wait_beyond(servers, load, 1.0, 0.0)


def wait_beyond(servers: int, load: float, service_s: float, wait_s: float) -> float:
    """The chance an arrival waits longer than ``wait_s`` in M/M/``servers`` with mean
    service ``service_s`` at offered ``load``: ``C x exp(-(servers - load) wait_s /
    service_s)``.

    >>> round(wait_beyond(1, 0.5, 1.0, 0.0), 6), round(wait_beyond(1, 0.5, 1.0, 2.0), 6)
    (0.5, 0.18394)
    """
    blocked = 1.0
    if 0 < load < servers:
        for k in range(1, servers + 1):
            blocked = _erlang_b_next(k, load, blocked)
    return _late_share(servers, load, blocked, service_s, wait_s)


@dataclass(frozen=True)
class SloFleet:
    """The stage's answer: ``replicas`` (the fewest, up to the most allowed, whose chance of
    a wait longer than ``wait_s`` is ``late``, at most ``1 - goal`` unless capped), from
    ``rate`` (arrivals/s) and ``service_s``; ``load`` = rate x service_s, in slots."""

    replicas: int
    rate: float
    service_s: float
    load: float
    wait_s: float
    late: float
    # Set where the fleet was capped at the one that holds the most requests ever in
    # flight at once (``most_inflight``, over the last ``over_s``): none of them waited.
    most_inflight: float | None = None
    over_s: float = 0.0
    # The rise in the rate planned for over the start-up (req/s, in ``rate``) and that
    # start-up (s): :func:`inflight.control.policy.planned_rise`.
    rise: float = 0.0
    horizon_s: float = 0.0

    def why(self, slots: int, goal: float) -> str:
        """One line for the decision's reason."""
        planned = (
            f" (+{self.rise:.3g}, the rise seen over a {self.horizon_s:g} s start-up)"
            if self.rise > 0
            else ""
        )
        offered = (
            f"slo: {self.rate:.3g} req/s{planned} x {self.service_s:.3g} s = {self.load:.3g} "
            f"slots offered; {self.replicas} x {slots} slots"
        )
        if self.most_inflight is not None:
            return (
                f"{offered} hold the most ever in flight over the last {self.over_s:g} s "
                f"({self.most_inflight:g}), so none waits"
            )
        return (
            f"{offered} keep the share waiting over {self.wait_s:g} s at {self.late:.2g} "
            f"(goal {goal:g})"
        )


def slo_fleet(
    rate: float,
    service_s: float,
    slots: int,
    wait_s: float,
    goal: float,
    max_replicas: int,
) -> SloFleet:
    """The fewest replicas (at least 1, at most ``max_replicas``) of ``slots`` each whose
    chance of a wait over ``wait_s`` is at most ``1 - goal`` at ``rate`` x ``service_s``.

    Erlang B's recurrence is carried from one server to the next, so the search costs
    one step per slot of the fleet found.

    Worked example: 3.5 req/s of 4.5 s each (15.75 slots offered), 4 slots a replica, a
    2 s TTFT and a goal of 0.95: 4 replicas (16 slots) leave 0.83 of the requests waiting
    over 2 s, 5 replicas 0.035, so 5 (at a goal of 0.99, 6: 0.0009).

    >>> f = slo_fleet(3.5, 4.5, 4, 2.0, 0.95, 8)
    >>> f.replicas, round(f.late, 3)
    (5, 0.035)
    """
    if slots < 1 or max_replicas < 1:
        raise ValueError(f"slots and max_replicas must be ≥ 1, got {slots}, {max_replicas}")
    load = max(0.0, rate * service_s)
    allowed = 1.0 - goal
    top = min(max_replicas * slots, _MAX_SERVERS)
    blocked, late = 1.0, 1.0
    for servers in range(1, top + 1):
        blocked = _erlang_b_next(servers, load, blocked)
        if servers % slots:
            continue
        late = _late_share(servers, load, blocked, service_s, wait_s)
        if late <= allowed:
            return SloFleet(servers // slots, rate, service_s, load, wait_s, late)
    return SloFleet(max(1, top // slots), rate, service_s, load, wait_s, late)


def undrained_share(service_s: float, ttft_s: float) -> float:
    """The share of the requests in flight that need a slot of their own for the TTFT to
    hold: ``S ÷ (S + TTFT)``. With c slots busy, a queue drains at c ÷ S requests a second
    (S: the mean service time), so the last of the L − c requests waiting starts after
    (L − c) S ÷ c, within the TTFT where c ≥ L S ÷ (S + TTFT). A queue the fleet clears
    within the TTFT misses nothing for want of a replica; one of requests that hold a slot
    far longer than the TTFT needs nearly a slot a request.

    Worked example: 100 requests in flight of 0.12 s each, a 1 s TTFT: 10.7 slots (3
    replicas of 4) drain them in time; of 60 s each, 98.4 slots.

    >>> round(undrained_share(0.12, 1.0), 3), round(undrained_share(60.0, 1.0), 3)
    (0.107, 0.984)
    """
    if not (service_s > 0 and ttft_s > 0):
        raise ValueError(f"service_s and ttft_s must be > 0, got {service_s!r}, {ttft_s!r}")
    return service_s / (service_s + ttft_s)
