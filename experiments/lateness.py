"""Sustained overload through the router's real Dispatcher, in virtual time: how long the
late wait, with and without the lateness bound (``--max-late-s``, issue 25).

The experiment of issue 25: one endpoint with one slot, each request holding it
``service_s`` (1 s), a request every ``every_s`` (0.8 s) for ``duration_s`` (600 s), so
arrivals outrun service by a quarter for ten minutes. Requests are held
(``--hold-when-full``) in :mod:`router.dispatch`'s order with ``--hold-deadline-s`` 1.5 s;
a held request gives up at ``--queue-timeout-s`` (300 s, 504). The dispatcher and its pool
are the live router's objects; only the clock is virtual (an event heap), so the run takes
a second and gives the same figures every time::

    python -m experiments.lateness            # with the bound, then without

Printed: requests served (on time: first slot within the deadline; late), refused by the
bound (503), timed out (504), and the longest wait of each, in seconds.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from inflight.control.hold_order import MAX_LATE_S
from router.dispatch import Dispatcher
from router.errors import HeldTooLong
from router.pool import Endpoint, Pool

URL = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Outcome:
    """One request: its arrival and how long it waited for a slot or an answer (seconds);
    ``status`` 200 (served), 503 (refused by the bound), 504 (--queue-timeout-s)."""

    arrival_s: float
    wait_s: float
    status: int


@dataclass(frozen=True)
class Summary:
    arrived: int
    served_on_time: int
    served_late: int
    refused_503: int
    timed_out_504: int
    max_wait_served_s: float
    max_wait_refused_s: float
    first_late_wait_s: float | None  # the wait of the first request that became late
    still_held: int

    def lines(self) -> list[str]:
        first = "-" if self.first_late_wait_s is None else f"{self.first_late_wait_s:.1f} s"
        return [
            f"arrived {self.arrived}, served {self.served_on_time} on time and "
            f"{self.served_late} late, refused {self.refused_503} (503), timed out "
            f"{self.timed_out_504} (504), still held at the end {self.still_held}",
            f"longest wait: served {self.max_wait_served_s:.1f} s, refused or timed out "
            f"{self.max_wait_refused_s:.1f} s; the first late request waited {first}",
        ]


class _Waiter:
    """A held request (the dispatcher's ``Waiter``): records what it got."""

    def __init__(self, on_slot: Callable[[Endpoint], None], on_refused: Callable[[], None]):
        self._done = False
        self._on_slot = on_slot
        self._on_refused = on_refused

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Endpoint, /) -> None:
        self._done = True
        self._on_slot(result)

    def set_exception(self, exception: BaseException, /) -> None:
        assert isinstance(exception, HeldTooLong), exception
        self._done = True
        self._on_refused()


def run(
    max_late_s: float | None,
    *,
    every_s: float = 0.8,
    service_s: float = 1.0,
    duration_s: float = 600.0,
    deadline_s: float = 1.5,
    queue_timeout_s: float = 300.0,
) -> tuple[Summary, list[Outcome]]:
    """The experiment; ``max_late_s`` None: without the bound (the router before issue 25)."""
    now = [0.0]
    events: list[tuple[float, int, Callable[[], None]]] = []
    seq = itertools.count()

    def at(t_s: float, fn: Callable[[], None]) -> None:
        heapq.heappush(events, (t_s, next(seq), fn))

    pool = Pool(1)
    pool.set_endpoints([URL])
    d = Dispatcher(
        pool,
        hold_when_full=True,
        queue_timeout_s=queue_timeout_s,
        hold_deadline_s=deadline_s,
        max_late_s=max_late_s,
        clock=lambda: now[0],
    )
    outcomes: list[Outcome] = []

    def arrive(t0: float) -> None:
        def served(ep: Endpoint) -> None:
            outcomes.append(Outcome(t0, now[0] - t0, 200))
            at(now[0] + service_s, lambda: d.release(ep))

        ep = d.try_acquire()
        if ep is not None:
            served(ep)
            return

        def refused() -> None:
            outcomes.append(Outcome(t0, now[0] - t0, 503))

        waiter = _Waiter(served, refused)
        d.hold(waiter)

        def give_up() -> None:
            if not waiter.done():
                waiter._done = True
                d.unhold(waiter)
                outcomes.append(Outcome(t0, now[0] - t0, 504))

        at(t0 + queue_timeout_s, give_up)

    n = int(duration_s / every_s) + 1
    for i in range(n):
        t = i * every_s
        at(t, functools.partial(arrive, t))
    while events:
        now[0], _, fn = heapq.heappop(events)
        fn()
    served = [o for o in outcomes if o.status == 200]
    failed = [o for o in outcomes if o.status != 200]
    late = sorted((o for o in outcomes if o.wait_s >= deadline_s), key=lambda o: o.arrival_s)
    summary = Summary(
        arrived=n,
        served_on_time=sum(o.wait_s < deadline_s for o in served),
        served_late=sum(o.wait_s >= deadline_s for o in served),
        refused_503=sum(o.status == 503 for o in outcomes),
        timed_out_504=sum(o.status == 504 for o in outcomes),
        max_wait_served_s=max((o.wait_s for o in served), default=0.0),
        max_wait_refused_s=max((o.wait_s for o in failed), default=0.0),
        first_late_wait_s=late[0].wait_s if late else None,
        still_held=d.queued,
    )
    return summary, outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-late-s", type=float, default=MAX_LATE_S)
    p.add_argument("--every-s", type=float, default=0.8)
    p.add_argument("--service-s", type=float, default=1.0)
    p.add_argument("--duration-s", type=float, default=600.0)
    p.add_argument("--hold-deadline-s", type=float, default=1.5)
    args = p.parse_args(argv)
    kw = {
        "every_s": args.every_s,
        "service_s": args.service_s,
        "duration_s": args.duration_s,
        "deadline_s": args.hold_deadline_s,
    }
    for label, bound in (
        (f"--max-late-s {args.max_late_s:g}", args.max_late_s),
        ("no bound", None),
    ):
        summary, _ = run(bound, **kw)
        print(f"{label}:")
        for line in summary.lines():
            print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
