"""The fault run's records and its accounting: pure functions of what was recorded.

Nothing here does I/O or reads a clock: the harness (:mod:`inflight.bench.chaos.run`) records
requests, router samples and each fault's window, reads the stack's ``timeline.jsonl``
and ``decisions.jsonl``, and these functions turn them into the per-fault figures.

Attribution of a failed request. The router names the endpoint in every error it
answers for an upstream: ``upstream 127.0.0.1:41235 failed mid-response`` (an SSE error
event, after bytes were sent) or ``upstream 127.0.0.1:41235 refused; retried once`` (a
502 body). A failed request counts as *on the faulted replica* when the endpoint its
error names is one the fault hit, or when it went through the router the fault killed
and was in flight at the kill; every other failure (a client timeout, an error naming a
healthy endpoint, a 503 from the router) is ``lost_other``. (A killed router's instant is
its death, which its poll sees after the signal: a request it cut that ended in between,
as its client saw the reset first, was in flight at the kill.) So an unattributable failure
is never excused.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# The endpoint label (host:port) the router puts in its upstream error messages.
_UPSTREAM = re.compile(r"upstream (\d{1,3}(?:\.\d{1,3}){3}:\d{1,5})")


def endpoint_in_error(error: str) -> str | None:
    """``host:port`` named by a router error message, or None.

    >>> endpoint_in_error("upstream 127.0.0.1:41235 failed mid-response")
    '127.0.0.1:41235'
    """
    m = _UPSTREAM.search(error)
    return m.group(1) if m else None


@dataclass(frozen=True)
class ChaosRequest:
    """One request of the open-loop load (Unix seconds, wall)."""

    start_t: float
    end_t: float
    ok: bool
    router: int  # index of the router it was sent to (0: the stack's)
    error: str = ""
    long: bool = False  # one of the long streams of the scale-down fault
    refused: int = 0  # connections refused before it was sent (a router restarting)

    @property
    def endpoint(self) -> str | None:
        return endpoint_in_error(self.error) if self.error else None


@dataclass(frozen=True)
class Sample:
    """The routers' state at ``t``: L summed over the routers up, ready replicas (the
    stack's router), slots per replica."""

    t: float
    inflight: int
    ready: int
    slots: int


@dataclass(frozen=True)
class FaultWindow:
    """What the harness recorded for one fault (Unix seconds, wall).

    The window is ``[start_t, end_t)``: from the moment its load started to the moment
    the load of the next fault starts (or the run ends); every request sent in it and
    every scale-down in it belongs to this fault.
    """

    fault: str
    start_t: float
    injected_t: float
    released_t: float  # the fault's end: = injected_t for a kill; a hold lifted, …
    recovered_t: float | None  # None: not recovered before the deadline
    end_t: float
    faulted_endpoints: tuple[str, ...] = ()  # host:port of the replica(s) it hit
    faulted_router: int | None = None  # index of the router it killed
    # When the kill was signalled, where the fault's instant (``injected_t``) is the
    # process's death, later: a request through the router that ended in between was cut
    # by the kill. None: the same instant.
    signalled_t: float | None = None
    leaked_slots: int = 0  # router L + Σ replicas' running + waiting, after the drain
    leaked_detail: dict[str, int] = field(default_factory=dict)
    # what the leak check could not read (a router's status, a replica's /metrics): a
    # slot it cannot count is not a slot known to be free
    unprobed: tuple[str, ...] = ()
    open_after_drain: int = 0  # requests of the load still open when the drain gave up
    orphans: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    settled: bool = True
    surge: bool = False  # the load rose at the injection: the replica count must rise


@dataclass(frozen=True)
class RequestCounts:
    sent: int
    failed: int
    on_faulted: int
    lost_other: int


def count_requests(requests: Iterable[ChaosRequest], w: FaultWindow) -> RequestCounts:
    """Requests sent within ``w``, and its failures split by attribution."""
    sent = failed = on_faulted = 0
    for r in requests:
        if not w.start_t <= r.start_t < w.end_t:
            continue
        sent += 1
        if r.ok:
            continue
        failed += 1
        if _on_faulted(r, w):
            on_faulted += 1
    return RequestCounts(sent, failed, on_faulted, failed - on_faulted)


def _on_faulted(r: ChaosRequest, w: FaultWindow) -> bool:
    if r.endpoint is not None and r.endpoint in w.faulted_endpoints:
        return True
    # In flight through the killed router at some moment from the signal to its death.
    signalled_t = w.injected_t if w.signalled_t is None else w.signalled_t
    return (
        w.faulted_router is not None
        and r.router == w.faulted_router
        and r.start_t <= w.injected_t
        and r.end_t >= signalled_t
    )


#: Errors of requests lost otherwise kept in a fault's details.
LOST_ERRORS_KEPT = 5

#: A router sample older than this (wall seconds) before a scale-down is no evidence of
#: it: the sampler reads every 0.25 s, so an older last sample means the routers did not
#: answer then (the stack's router dead or stopped), and what they held is unknown.
SAMPLE_MAX_AGE_S = 2.0


@dataclass(frozen=True)
class ScaleDown:
    """The replica count wanted fell from ``before`` to ``after`` at ``t``."""

    t: float
    before: int
    after: int
    saturation: float | None  # the highest evidence found (None: none)
    evidence: str

    @property
    def wrong(self) -> bool:
        """At saturation ≥ 1, or with no evidence at all: a scale-down nobody can show was
        safe is counted against the stack, never excused."""
        return self.saturation is None or self.saturation >= 1.0


def scale_downs(
    timeline: Sequence[Any], decisions: Sequence[dict[str, Any]], samples: Sequence[Sample]
) -> list[ScaleDown]:
    """Every drop of ``desired`` in ``timeline`` (points with ``t``, ``desired``, ``ready``),
    with the saturation at that moment from two sources, the higher one kept:

    * the scaling decision that made it (``decisions.jsonl``: the last one at most 1 s
      before the drop with the new ``desired``), whose ``saturation`` is the stack's
      router L ÷ capacity;
    * the harness's own router samples: L summed over *every* router it runs (the stack
      reads only its own) ÷ (slots × ready), the last sample at or before the drop, if it
      is at most :data:`SAMPLE_MAX_AGE_S` old.

    Saturation ≥ 1 means every slot was busy or requests were queued: removing a replica
    then is wrong whatever the metric said. No evidence from either source is wrong too
    (:attr:`ScaleDown.wrong`).
    """
    out: list[ScaleDown] = []
    decisions = sorted(decisions, key=lambda d: float(d.get("t", 0.0)))
    for prev, point in itertools.pairwise(timeline):
        if point.desired >= prev.desired:
            continue
        found: list[tuple[float, str]] = []
        for d in reversed(decisions):
            t = float(d.get("t", 0.0))
            if t > point.t + 0.05:
                continue
            if t < point.t - 1.0:
                break
            sat = d.get("saturation")
            if d.get("desired") == point.desired and isinstance(sat, int | float):
                found.append((float(sat), f"decision L={d.get('L')} cap={d.get('capacity')}"))
                break
        before = [s for s in samples if point.t - SAMPLE_MAX_AGE_S <= s.t <= point.t]
        if before:
            s = before[-1]
            capacity = s.slots * s.ready
            if capacity > 0:
                found.append((s.inflight / capacity, f"routers L={s.inflight} cap={capacity}"))
        sat, why = max(found) if found else (None, "no evidence")
        out.append(ScaleDown(point.t, prev.desired, point.desired, sat, why))
    return out


def streams_across(requests: Iterable[ChaosRequest], downs: Iterable[ScaleDown]) -> tuple[int, int]:
    """(long streams open at some scale-down, those of them that did not complete)."""
    times = [d.t for d in downs]
    open_ = [r for r in requests if r.long and any(r.start_t < t < r.end_t for t in times)]
    return len(open_), sum(1 for r in open_ if not r.ok)


@dataclass(frozen=True)
class FaultReport:
    """One row of the table (``time_to_recover_s``: wall seconds from the fault's end)."""

    fault: str
    requests_sent: int
    requests_failed: int
    failed_on_faulted_replica: int
    lost_other: int
    leaked_slots: int
    wrong_scale_downs: int
    time_to_recover_s: float | None
    orphans: int
    details: dict[str, Any] = field(default_factory=dict)


def surge_peak(timeline: Sequence[Any], w: FaultWindow) -> tuple[int | None, int | None]:
    """(desired at the injection, the highest desired from it to the fault's end): the
    count a surge must raise *while the fault lasts* (a rise once it is over proves
    nothing about the fault). None where the timeline has no point for it."""
    at = [p.desired for p in timeline if p.t <= w.injected_t]
    after = [p.desired for p in timeline if w.injected_t <= p.t <= w.released_t]
    before = at[-1] if at else None
    peak = max([*after, *([before] if before is not None else [])], default=None)
    return before, peak


def fault_report(
    w: FaultWindow,
    requests: Sequence[ChaosRequest],
    downs: Sequence[ScaleDown],
    timeline: Sequence[Any] = (),
) -> FaultReport:
    counts = count_requests(requests, w)
    mine = [d for d in downs if w.start_t <= d.t < w.end_t]
    recover = None if w.recovered_t is None else round(max(0.0, w.recovered_t - w.released_t), 2)
    details: dict[str, Any] = {
        "faulted_endpoints": list(w.faulted_endpoints),
        "scale_downs": [
            {
                "t": d.t,
                "from": d.before,
                "to": d.after,
                "saturation": d.saturation,
                "evidence": d.evidence,
            }
            for d in mine
        ],
        "leaked_detail": dict(w.leaked_detail),
        "unprobed": list(w.unprobed),
        "open_after_drain": w.open_after_drain,
        "orphans": list(w.orphans),
        "notes": list(w.notes),
        "settled_before_fault": w.settled,
        "fault_duration_s": round(w.released_t - w.injected_t, 2),
        "injected_t": w.injected_t,
        "released_t": w.released_t,
        "requests_retried_after_refused": sum(
            1 for r in requests if r.refused and w.start_t <= r.start_t < w.end_t
        ),
    }
    lost = [
        r
        for r in requests
        if w.start_t <= r.start_t < w.end_t and not r.ok and not _on_faulted(r, w)
    ]
    if lost:  # what each lost request's error said (the first few), to tell why
        details["lost_other_errors"] = [
            {"start_t": r.start_t, "end_t": r.end_t, "router": r.router, "error": r.error[:300]}
            for r in lost[:LOST_ERRORS_KEPT]
        ]
    if w.surge:
        before, peak = surge_peak(timeline, w)
        details["surge_desired_before"] = before
        details["surge_desired_peak"] = peak
    if w.faulted_router is not None:
        details["faulted_router"] = w.faulted_router
    if w.fault == "scale-down":
        open_, broken = streams_across(
            [r for r in requests if w.start_t <= r.start_t < w.end_t], mine
        )
        details["long_streams_open_at_scale_down"] = open_
        details["long_streams_not_completed"] = broken
    return FaultReport(
        fault=w.fault,
        requests_sent=counts.sent,
        requests_failed=counts.failed,
        failed_on_faulted_replica=counts.on_faulted,
        lost_other=counts.lost_other,
        leaked_slots=w.leaked_slots,
        wrong_scale_downs=sum(1 for d in mine if d.wrong),
        time_to_recover_s=recover,
        orphans=len(w.orphans),
        details=details,
    )


def bar_failures(reports: Sequence[FaultReport], final_orphans: Sequence[str] = ()) -> list[str]:
    """Why the run misses the bar (empty: it meets it). Each line names the fault."""
    out: list[str] = []
    for r in reports:
        for name, value in (
            ("lost_other", r.lost_other),
            ("leaked_slots", r.leaked_slots),
            ("wrong_scale_downs", r.wrong_scale_downs),
            ("orphans", r.orphans),
        ):
            if value:
                out.append(f"{r.fault}: {name} = {value} (must be 0)")
        if r.time_to_recover_s is None:
            out.append(f"{r.fault}: did not recover before the deadline")
        # A fault that was not tested cleanly is not passed: what could not be checked,
        # a stack that was still moving when the fault came, requests never ended.
        if r.details.get("unprobed"):
            out.append(f"{r.fault}: the leak check could not read {r.details['unprobed']}")
        if not r.details.get("settled_before_fault", True):
            out.append(f"{r.fault}: the stack had not settled when the fault was injected")
        if r.details.get("open_after_drain"):
            out.append(
                f"{r.fault}: {r.details['open_after_drain']} request(s) still open after the drain"
            )
        if "surge_desired_before" in r.details:
            before, peak = r.details["surge_desired_before"], r.details["surge_desired_peak"]
            if before is None or peak is None or peak <= before:
                out.append(
                    f"{r.fault}: no scale-up while the fault lasted (desired {before} → {peak})"
                )
        if r.fault == "scale-down":
            open_ = r.details.get("long_streams_open_at_scale_down", 0)
            broken = r.details.get("long_streams_not_completed", 0)
            if not open_:
                out.append("scale-down: no long stream was open when the replica count fell")
            if broken:
                out.append(f"scale-down: {broken} of {open_} streams open at it did not complete")
    if final_orphans:
        out.append(f"after stopping the stack: processes left {list(final_orphans)}")
    return out
