"""Knative's KPA for one revision: the collector's and the multiscaler's tickers around
the pure decider :mod:`inflight.control.peers.kpa` (where the citations are).

Knative keeps ``Scale(now)`` free of I/O and drives it from two Go tickers: the
collector's scrape every ``scrapeTickInterval`` (1 s; ``pkg/autoscaler/metrics/
collector.go``) and the multiscaler's decision every ``tickInterval`` (2 s;
``pkg/autoscaler/scaling/multiscaler.go``). :class:`KpaLoop` is those tickers: it reads
L through ``io`` when a scrape is due, hands it to :func:`~inflight.control.peers.kpa.record`,
and when a decision is due calls :func:`~inflight.control.peers.kpa.tick` and applies it.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from inflight.control.peers import kpa
from inflight.control.peers.base import Signal
from inflight.control.peers.kpa import KpaSpec, KpaState
from inflight.control.periodic import next_due
from inflight.planes.peers.base import PeerIO, apply
from inflight.planes.scaler_client import ScalerUnavailable

log = logging.getLogger("inflight.up.peers.kpa")


class KpaLoop:
    """The KPA for one revision: scrapes L into both windows every ``scrape_s`` and
    decides every ``tick_s``, within ``min_replicas..max_replicas`` (Knative's min/max
    scale). All I/O is in ``io``; all state is the decider's :class:`KpaState`."""

    def __init__(
        self, spec: KpaSpec, min_replicas: int, max_replicas: int, io: PeerIO, name: str = "kpa"
    ) -> None:
        if not 0 <= min_replicas <= max_replicas or max_replicas < 1:
            raise ValueError(f"bad replica bounds {min_replicas}..{max_replicas}")
        self.spec = replace(spec, min_scale=min_replicas, max_scale=max_replicas)
        self.io = io
        self.name = name
        self.state: KpaState | None = None
        self.next_scrape_s = 0.0
        self.next_tick_s = 0.0

    def start(self, now_s: float) -> None:
        self.state = KpaState.start(self.spec, self.io.ready_replicas(), now_s)
        self.next_scrape_s = now_s
        self.next_tick_s = now_s + self.spec.tick_s

    def tick(self, now_s: float) -> bool:
        if self.state is None:
            self.start(now_s)
        # Both on Go tickers in Knative (the collector's scrape ticker, the multiscaler's
        # tickInterval ticker): due on their own phase, one run for any number of missed
        # ticks (inflight.control.periodic).
        if now_s >= self.next_scrape_s:
            self.next_scrape_s = next_due(self.next_scrape_s, self.spec.scrape_s, now_s)
            self._scrape(now_s)
        if now_s < self.next_tick_s:
            return False
        self.next_tick_s = next_due(self.next_tick_s, self.spec.tick_s, now_s)
        self._decide(now_s)
        return True

    def _scrape(self, now_s: float) -> None:
        """The collector's scrape: one stat into both windows (none if the read fails)."""
        assert self.state is not None
        try:
            value = self.io.read(Signal.INFLIGHT)
        except ScalerUnavailable as exc:
            log.warning("%s: scrape failed: %s", self.name, exc)
            return
        self.state = kpa.record(self.state, value, now_s)

    def _decide(self, now_s: float) -> None:
        assert self.state is not None
        decision, self.state = kpa.tick(self.spec, self.state, self.io.replicas(), now_s)
        apply(self.io, decision, self.name)
