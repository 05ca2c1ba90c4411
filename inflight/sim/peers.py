"""The peers' control planes in virtual time: ``inflight.planes.peers``' own loops.

Each peer (``inflight.planes.peers.catalog.PEERS``: Knative's KPA, Ray Serve's default
policy, production-stack's KEDA trigger on vLLM's queue, llm-d's KEDA on the EPP queue,
an HPA on request rate) is built exactly as ``inflight up --policy NAME`` builds it (the
same loop around the same pure decider, ``inflight.control.peers``), with a
:class:`~inflight.planes.peers.base.PeerIO` whose ``read`` answers each
:class:`~inflight.control.peers.base.Signal`'s instant query from the simulated scrapes
(``inflight.sim.scrapes``), at time-scale 1. An empty result (no sample; ``rate()`` over
fewer than two samples; a sum over no replica) is ``NoData``, as the live reader says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inflight.sim import scrapes as S


def catalog() -> dict[str, Any]:
    """``PEERS`` by name; empty where ``inflight.planes.peers`` is not in this build."""
    try:
        from inflight.planes.peers.catalog import PEERS
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("inflight.planes.peers"):
            return {}
        raise
    return dict(PEERS)


def reader(scrapes: S.Scrapes, clock: Callable[[], float], scrape_interval_s: float) -> Any:
    """``read(Signal) -> float`` over the simulated Prometheus, evaluated at ``clock()``."""
    from inflight.control.peers.base import Signal
    from inflight.planes.peers.signals import NoData, promql, rate_window_s

    series = {
        Signal.INFLIGHT: S.INFLIGHT,
        Signal.ROUTER_QUEUED: S.QUEUED,
        Signal.VLLM_WAITING: S.VLLM_WAITING,
    }
    window_s = rate_window_s(1.0, scrape_interval_s)

    def read(signal: Signal) -> float:
        now = clock()
        if signal is Signal.ARRIVAL_RATE:
            value = scrapes.rate(S.RECEIVED, now, window_s)
        else:
            value = scrapes.instant(series[signal], now)
        if value is None:
            raise NoData(f"{promql(signal, 1.0, scrape_interval_s)}: the result is empty")
        return value

    return read
