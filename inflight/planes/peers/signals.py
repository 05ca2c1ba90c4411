"""What a peer reads: one Prometheus signal, named once, with its PromQL.

The :class:`~inflight.control.peers.base.Signal` names the quantity (the pure deciders
refer to it); this module says how it is read. The live shell (:mod:`inflight.up.peer_loop`)
reads a :class:`Signal` with an instant query on the stack's Prometheus; the simulator
computes the same quantity from its own scraped samples. Either way the reader is a plain
``read(Signal) -> float`` that raises
:class:`~inflight.planes.scaler_client.ScalerUnavailable` when it cannot answer, and
:class:`NoData` (a subclass) when the query answered with an empty result: KEDA's
Prometheus scaler tells the two apart (``ignoreNullValues``), so the reader must too.
"""

from __future__ import annotations

from collections.abc import Callable

from inflight import names
from inflight.control.peers.base import Signal
from inflight.planes.scaler_client import ScalerUnavailable

__all__ = [
    "MIN_RATE_SCRAPES",
    "RATE_WINDOW_S",
    "NoData",
    "Reader",
    "Signal",
    "promql",
    "rate_window_s",
]

#: Seed seconds of the arrival-rate window: Prometheus' conventional ``rate(…[1m])``.
RATE_WINDOW_S = 60.0
#: ``rate()`` needs two samples in its window; ask for at least this many scrape intervals.
MIN_RATE_SCRAPES = 2


class NoData(ScalerUnavailable):
    """The query answered, with no sample (KEDA: "the result is empty")."""


Reader = Callable[[Signal], float]


def rate_window_s(time_scale: float, scrape_interval_s: float) -> float:
    """The ``rate()`` window in wall seconds: 1 min × time-scale, at least two scrapes.

    Rounded to whole milliseconds (Prometheus durations are integer ms).

    >>> rate_window_s(0.05, 0.25)
    3.0
    >>> rate_window_s(0.001, 0.25)
    0.5
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if scrape_interval_s <= 0:
        raise ValueError(f"scrape_interval_s must be > 0, got {scrape_interval_s}")
    seconds = max(RATE_WINDOW_S * time_scale, MIN_RATE_SCRAPES * scrape_interval_s)
    return max(1, round(seconds * 1000)) / 1000


def _duration(seconds: float) -> str:
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def promql(signal: Signal, time_scale: float = 1.0, scrape_interval_s: float = 5.0) -> str:
    """The instant query for ``signal`` (metric names from :mod:`inflight.names`).

    >>> promql(Signal.INFLIGHT)
    'sum(router_inflight_requests)'
    >>> promql(Signal.VLLM_WAITING)
    'sum(vllm:num_requests_waiting)'
    >>> promql(Signal.ARRIVAL_RATE, time_scale=0.05, scrape_interval_s=0.25)
    'sum(rate(router_requests_received_total[3s]))'
    """
    if signal is Signal.INFLIGHT:
        return f"sum({names.ROUTER_INFLIGHT})"
    if signal is Signal.ROUTER_QUEUED:
        return f"sum({names.ROUTER_QUEUED})"
    if signal is Signal.VLLM_WAITING:
        return f"sum({names.VLLM_WAITING})"
    window = _duration(rate_window_s(time_scale, scrape_interval_s))
    return f"sum(rate({names.ROUTER_REQUESTS_RECEIVED}[{window}]))"
