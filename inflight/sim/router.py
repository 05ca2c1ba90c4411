"""The router in virtual time: the live router's pool and dispatcher, minus HTTP.

``inflight up`` runs the router with ``--hold-when-full`` (except for the peers whose own
deployments queue in vLLM): a request takes a slot on the least-loaded ready replica
(``router.pool.Pool.choose``), or waits in the router's FIFO until one frees
(``router.dispatch.Dispatcher.hold``/``pump``), bounded by ``--max-queue`` and
``--queue-timeout-s``. Without holding, it goes to the least-loaded ready replica even
when every slot is busy (vLLM queues it), and fails (503) when none is ready. Pool and
dispatcher are the live objects; what this module adds is only what the router's HTTP
layer does around them: count the request in L and in the received counter when it
arrives, and take it out of L when its response ends or it is refused
(``router.dispatch.Admission`` does that live; it is an ``async with`` and cannot run
without an event loop).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from inflight.control.hold_order import HoldPlan, single_plan
from router.dispatch import Dispatcher
from router.errors import NoEndpoint, QueueFull, Shed
from router.pool import READY, Endpoint, Pool
from router.sources import apply

# Defaults of ``inflight router`` (router/config.py), which ``inflight up`` keeps.
MAX_QUEUE = 1024
QUEUE_TIMEOUT_S = 300.0


def _no_clock() -> float:
    raise AssertionError("the router read a clock it was not given")


class Held:
    """A request held in the router's FIFO: the dispatcher's ``Waiter``.

    ``pump`` hands it a slot with :meth:`set_result`; the simulator dispatches it then. Or
    it refuses it (the lateness bound, 503) with :meth:`set_exception`: ``on_refused``
    is told, the request already out of L.
    """

    __slots__ = ("_done", "_router", "on_refused", "on_slot")

    def __init__(
        self,
        on_slot: Callable[[Endpoint], None],
        on_refused: Callable[[BaseException], None] | None = None,
        router: SimRouter | None = None,
    ) -> None:
        self._done = False
        self.on_slot = on_slot
        self.on_refused = on_refused
        self._router = router

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Endpoint, /) -> None:
        self._done = True
        self.on_slot(result)

    def set_exception(self, exception: BaseException, /) -> None:
        self._done = True
        if self._router is not None:
            self._router.dispatcher.inflight -= 1
        if self.on_refused is None:
            raise AssertionError(f"a held request was refused and nobody was told: {exception}")
        self.on_refused(exception)

    def cancel(self) -> None:
        self._done = True


class SimRouter:
    """One router: ``arrive`` → a slot now, or held; ``finish`` gives the slot back."""

    def __init__(
        self,
        slots: int,
        rng: random.Random,
        max_queue: int = MAX_QUEUE,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
        hold_when_full: bool = True,
        hold_deadline_s: float | None = None,
        clock: Callable[[], float] | None = None,
        max_late_s: float | None = None,
        plan: HoldPlan | None = None,
    ) -> None:
        if (hold_deadline_s is not None or (plan is not None and plan.timed)) and clock is None:
            raise ValueError("a hold deadline needs the simulation's clock")
        self.pool = Pool(slots, rng=rng)
        if plan is not None and hold_deadline_s is not None:
            raise ValueError("give a plan (priority classes) or a hold deadline, not both")
        if plan is None:
            # ``inflight router``'s --max-late-s (off by default, as ``inflight up`` runs
            # it): a bound on lateness, so only with a deadline.
            plan = single_plan(hold_deadline_s, max_late_s if hold_deadline_s is not None else None)
        self.dispatcher = Dispatcher(
            self.pool,
            hold_when_full=hold_when_full,
            max_queue=max_queue,
            queue_timeout_s=queue_timeout_s,
            plan=plan,
            clock=clock if clock is not None else _no_clock,
        )
        self.received = 0  # router_requests_received_total

    @property
    def inflight(self) -> int:
        return self.dispatcher.inflight

    @property
    def queued(self) -> int:
        return self.dispatcher.queued

    def ready_endpoints(self) -> int:
        return self.pool.count_by_state()[READY]

    def set_endpoints(self, urls: Sequence[str]) -> None:
        """The endpoint file changed: the router applies it and pumps held requests."""
        apply(self.dispatcher, urls)

    def arrive(
        self,
        on_slot: Callable[[Endpoint], None],
        on_refused: Callable[[BaseException], None] | None = None,
        cls: int = 0,
    ) -> Held | None:
        """A work request arrives: into L; a slot at once (``on_slot`` called now) or held
        (later a slot, or refused by the lateness bound: ``on_refused``, out of L).

        ``cls``: its priority class (the plan's index). Returns the :class:`Held` ticket
        when held; raises Shed (429) for a sheddable class with no free slot, QueueFull
        (503) when the FIFO is full, NoEndpoint (503) when not holding and no replica is
        ready: either way the request is already out of L again.
        """
        d = self.dispatcher
        self.received += 1
        d.inflight += 1
        ep = d.try_acquire()
        if ep is not None:
            on_slot(ep)
            return None
        if not d.hold_when_full:
            d.inflight -= 1
            raise NoEndpoint("no ready endpoint")
        held = Held(on_slot, on_refused, self)
        try:
            d.hold(held, cls)
        except (QueueFull, Shed):
            d.inflight -= 1
            raise
        return held

    def give_up(self, held: Held) -> bool:
        """A held request timed out (504): out of the FIFO and of L; False if it had a slot."""
        if held.done():
            return False
        held.cancel()
        self.dispatcher.unhold(held)
        self.dispatcher.inflight -= 1
        return True

    def finish(self, ep: Endpoint) -> None:
        """A response ended: the slot goes back (held requests take it), out of L."""
        self.dispatcher.release(ep)
        self.dispatcher.inflight -= 1
