"""How the router orders the requests it holds, per control plane: one rule for
``inflight up`` (``inflight.up.stack``) and ``inflight sim`` (``inflight.sim.core``).

The router's ``--hold-deadline-s`` (``router.dispatch``) serves held requests that can
still meet their time-to-first-token target before those already past it. inflight's own
policies (saturation, qps, fixed replicas) run with it. A peer's run models that system
as deployed, and each of those holds or queues first come, first served: Knative's
activator and queue-proxy, Ray Serve's router, llm-d's flow control (FCFS within a
priority band) and vLLM's own scheduler (``--scheduling-policy fcfs`` by default). So a
peer's run keeps the router's FIFO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: ``inflight up --hold-deadline-s``'s default, seed seconds: the open-loop benchmark's
#: time-to-first-token target (2 s, ``inflight.measure.slo.DEFAULT_SLO``) less 0.5 s for the
#: prefill and the first token. Chosen with ``inflight sim``: SLO attainment is flat from
#: 1.25 to 1.9 s on the ramp, spike and diurnal scenarios (docs/benchmark-openloop.md).
HOLD_DEADLINE_S: Final = 1.5


def router_hold_deadline_s(
    deadline_s: float, *, peer: bool, peers_too: bool = False
) -> float | None:
    """The router's ``--hold-deadline-s`` (in ``deadline_s``'s unit) for a run, or None
    (FIFO): None when ``deadline_s`` is 0 or the run is a peer's control plane, unless
    ``peers_too`` (``inflight sim --hold-deadline-peers``: what the order alone is worth,
    each peer's autoscaler behind inflight's router instead of its own system's queue)."""
    if deadline_s < 0:
        raise ValueError(f"--hold-deadline-s must be ≥ 0, got {deadline_s:g}")
    if deadline_s == 0 or (peer and not peers_too):
        return None
    return deadline_s


def hold_order_note(deadline_s: float, peers_too: bool = False) -> str:
    """A comparison's note on how the router ordered held requests (seed seconds)."""
    if deadline_s == 0:
        return "The router held requests first come, first served under every policy."
    if peers_too:
        return (
            f"Under every policy, the peers' too (--hold-deadline-peers), the router served "
            f"held requests still within --hold-deadline-s {deadline_s:g} s before those "
            "past it: the peers' autoscalers behind inflight's router, not their own systems."
        )
    return (
        f"Under inflight's own policies the router served held requests still within "
        f"--hold-deadline-s {deadline_s:g} s before those past it; under the peers' it held "
        "them first come, first served, as their own systems do (inflight/control/hold_order.py)."
    )


# --- The held requests' order, and the bound on lateness --------------------------------
#
# The router holds requests in lanes: each priority class has an on-time lane and a late
# lane (a request held past its class's deadline), oldest first in each. A freed slot goes
# to the head of the first lane that holds a request, in this order: class 0 on time,
# class 0 late, class 1 on time, class 1 late, … So classes are served by priority and,
# within one, requests that can still meet their time-to-first-token target go before
# those that cannot (earliest deadline first). A class without a deadline has one lane
# (first come, first served).
#
# Why a bound. That order alone starves the late: under sustained overload the on-time
# lanes never empty, so a late request is never served. With a real Dispatcher, 1 slot,
# 1 s service, arrivals every 0.8 s for 600 s, the first late request had waited 594.6 s;
# only --queue-timeout-s (300 s) ended it, with a 504 (issue 25). No order can serve
# everyone when arrivals outrun service for good, so the bound must refuse someone; the
# rule refuses the requests that have already missed their target, and tells them so:
#
#   **A held request overtaken by another after waiting its class's deadline plus
#   ``max_late_s`` is refused (503 with Retry-After).**
#
# "Overtaken": the check runs when a slot is handed to a request of an earlier lane. A
# late request still at the head of the first non-empty lane is served, however long it
# waited, since serving it is what it waited for. The time counts from when it was held or
# from when the pool last had a ready endpoint after having none, whichever is later: while
# no replica is ready (a cold start, scale from zero) nothing overtakes anything, and the
# requests held through it are not refused when the first replica arrives (they get the
# late lane's slots as the queue drains; --queue-timeout-s still bounds a cold start).
#
# The bound this gives (the 600 s experiment, ``experiments/lateness.py`` and
# tests/unit/test_hold_order.py): no request waits longer than deadline + max_late_s + the
# gap between two freed slots; everyone is either served or refused by then. Alternatives
# weighed: a share of freed slots for the oldest late request keeps late requests moving
# but under sustained overload the late lane still grows without bound, and each slot so
# spent is one an on-time request misses its target for; CoDel-style shedding on arrival
# refuses requests that could still be served on time.

#: A tight value for ``--max-late-s`` (seed seconds), the one the 600 s experiment shows
#: first: a request that has missed its 2 s TTFT target waits at most this much longer
#: while others are served, then is refused with 503 and Retry-After. For sustained
#: overload; under a transient one it refuses requests that would soon have been served.
MAX_LATE_S: Final = 30.0

#: ``--max-late-s``' default (router, ``inflight up``, ``inflight sim``; seconds): the bound
#: that refuses nothing in the scenarios where nothing is lost without it. ``inflight sim``,
#: saturation, --hold-deadline-s 1.5, seeds 1-3 (experiments/lateness_default.py): the longest
#: TTFT without a bound is 142.4 s (spike, 3 replicas overloaded through a 100 s start-up;
#: ramp 102.7 s, diurnal 92.4 s), and 180 s refuses none of their 33,550 requests; 120 s
#: refused 13, 60 and 34 on the spike's seeds, requests held from its first seconds at the
#: head of the late lane, 3-5 s from a slot (its TTFT without the bound 123-127 s), while
#: the last of 8 replicas was ready. So under sustained overload a late request is served or
#: refused (503) within deadline + 180 s, before --queue-timeout-s' 300 s and its 504 (the
#: 600 s experiment at 180: 104 refused, 0 timed out, the longest wait 181.6 s).
DEFAULT_MAX_LATE_S: Final = 180.0

SERVE: Final = "serve"  # hand the slot to this lane's head
LATE: Final = "late"  # this on-time lane's head is past its deadline: move it to the late lane
SHED: Final = "shed"  # this lane's head was overtaken past its bound: refuse it (503)


class HoldClassError(ValueError):
    """A priority class (``--priority-class``) that cannot be used; the message says why."""


@dataclass(frozen=True)
class HoldClass:
    """A priority class of held requests.

    ``max_priority``: the class takes requests whose priority (vLLM's: lower first) is at
    most this and above the previous class's. ``deadline_s``: the hold after which its
    requests are late (None: first come, first served). ``sheddable``: never held; 429 with
    Retry-After when no slot is free at once.
    """

    name: str
    max_priority: int
    deadline_s: float | None
    sheddable: bool = False


@dataclass(frozen=True)
class HoldPlan:
    """The router's classes in serving order (ascending ``max_priority``), and the
    lateness bound (None: none, late requests wait up to --queue-timeout-s)."""

    classes: tuple[HoldClass, ...]
    max_late_s: float | None = None

    def __post_init__(self) -> None:
        if not self.classes:
            raise HoldClassError("at least one class")
        seen: set[str] = set()
        for before, cls in zip((None, *self.classes), self.classes, strict=False):
            if cls.name in seen:
                raise HoldClassError(f"class {cls.name!r} given twice")
            seen.add(cls.name)
            if before is not None and cls.max_priority <= before.max_priority:
                raise HoldClassError(
                    f"class {cls.name!r}: max priority {cls.max_priority} must be above "
                    f"{before.max_priority} (class {before.name!r}): each class its own range"
                )
            if cls.deadline_s is not None and not cls.deadline_s > 0:
                raise HoldClassError(f"class {cls.name!r}: deadline must be > 0 s")
        if self.max_late_s is not None and not self.max_late_s > 0:
            raise HoldClassError(f"--max-late-s must be > 0, got {self.max_late_s:g}")

    @property
    def lanes(self) -> int:
        return 2 * len(self.classes)

    @property
    def timed(self) -> bool:
        """Whether the order needs the clock: a deadline, or a bound between classes."""
        return any(c.deadline_s is not None for c in self.classes) or (
            self.max_late_s is not None and len(self.classes) > 1
        )

    def class_of(self, priority: int) -> int:
        """The index of the class a request of ``priority`` belongs to: the first whose
        ``max_priority`` is at least it; above every class's, the last class.

        >>> plan = HoldPlan((HoldClass("high", 0, 1.5), HoldClass("low", 10, 5.0)))
        >>> plan.class_of(-3), plan.class_of(0), plan.class_of(1), plan.class_of(99)
        (0, 0, 1, 1)
        """
        for i, cls in enumerate(self.classes):
            if priority <= cls.max_priority:
                return i
        return len(self.classes) - 1


def single_plan(deadline_s: float | None, max_late_s: float | None = None) -> HoldPlan:
    """The plan of a router without classes: one class, ``--hold-deadline-s``."""
    return HoldPlan((HoldClass("default", 0, deadline_s),), max_late_s)


def parse_class(text: str) -> HoldClass:
    """``NAME:MAX_PRIORITY:DEADLINE_S`` (``--priority-class``) → HoldClass. DEADLINE_S is
    seconds > 0, ``fifo`` (no deadline) or ``shed`` (sheddable: never held, 429 when no
    slot is free).

    >>> parse_class("interactive:0:1.5")
    HoldClass(name='interactive', max_priority=0, deadline_s=1.5, sheddable=False)
    >>> parse_class("batch:100:shed").sheddable
    True
    """
    parts = text.split(":")
    if len(parts) != 3:
        raise HoldClassError(
            f"{text!r}: expected NAME:MAX_PRIORITY:DEADLINE_S, e.g. interactive:0:1.5"
        )
    name, prio, deadline = (p.strip() for p in parts)
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise HoldClassError(f"{text!r}: NAME must be letters, digits, '-' or '_'")
    try:
        max_priority = int(prio)
    except ValueError:
        raise HoldClassError(f"{text!r}: MAX_PRIORITY must be an integer, got {prio!r}") from None
    if deadline == "shed":
        return HoldClass(name, max_priority, None, sheddable=True)
    if deadline == "fifo":
        return HoldClass(name, max_priority, None)
    try:
        deadline_s = float(deadline)
    except ValueError:
        raise HoldClassError(
            f"{text!r}: DEADLINE_S must be seconds, 'fifo' or 'shed', got {deadline!r}"
        ) from None
    if not deadline_s > 0 or deadline_s == float("inf"):
        raise HoldClassError(f"{text!r}: DEADLINE_S must be > 0 and finite, got {deadline!r}")
    return HoldClass(name, max_priority, deadline_s)


def plan_from_classes(specs: list[str], max_late_s: float | None) -> HoldPlan:
    """``--priority-class`` flags (any order) → HoldPlan in serving order."""
    classes = sorted((parse_class(s) for s in specs), key=lambda c: c.max_priority)
    return HoldPlan(tuple(classes), max_late_s)


@dataclass(frozen=True)
class Step:
    """What to do next with the held requests: ``action`` (SERVE, LATE, SHED) on ``lane``."""

    action: str
    lane: int


def next_step(
    plan: HoldPlan, heads: list[float | None], now_s: float, ready_since_s: float
) -> Step:
    """The next step of handing a freed slot over, given each lane's oldest request's
    hold time (``heads[lane]``, None for an empty lane; lane ``2c`` is class ``c`` on time,
    ``2c + 1`` its late lane; at least one is not None), the time now and since when the
    pool has had a ready endpoint. The caller applies LATE and SHED and asks again, until
    SERVE.

    A worked example: classes high (deadline 1.5 s) and low (5 s), max_late_s 30; at
    t=100 s the heads are [99.0, None, 60.0, None]: high's head waited 1 s (on time), low's
    on-time head 40 s: LATE 2 (low's head moves to lane 3). Then [99.0, None, None, 60.0]:
    lane 0 is served first; lane 3's head waited 40 s ≥ 5 + 30: SHED 3. Then SERVE 0.
    """
    classes = plan.classes
    for c, cls in enumerate(classes):
        held_s = heads[2 * c]
        if cls.deadline_s is not None and held_s is not None and now_s - held_s >= cls.deadline_s:
            return Step(LATE, 2 * c)
    serve = next(i for i, held_s in enumerate(heads) if held_s is not None)
    max_late_s = plan.max_late_s
    if max_late_s is not None:
        for lane in range(serve + 1, len(heads)):
            held_s = heads[lane]
            if held_s is None:
                continue
            bound_s = (classes[lane // 2].deadline_s or 0.0) + max_late_s
            if now_s - max(held_s, ready_since_s) >= bound_s:
                return Step(SHED, lane)
    return Step(SERVE, serve)
