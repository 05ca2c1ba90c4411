"""The live shell of the peers' control planes: reads their signals from Prometheus.

``inflight up --policy kpa|ray|vllm-waiting|epp-queue|hpa-rps`` runs the peer's loop
(:mod:`inflight.planes.peers.catalog`, around the peer's pure decider in
:mod:`inflight.control.peers`) in-process in :class:`inflight.up.stack.Stack`, reading each
:class:`~inflight.control.peers.base.Signal` with an instant query on the stack's
Prometheus (the same scrape the scaler reads), as KEDA's Prometheus scaler does:
``GET /api/v1/query?query=…`` with a timeout. A failed read (Prometheus down, an error
status, a malformed answer) raises ScalerUnavailable and an empty result NoData: the peer
then makes no decision, and says so in the log and in ``decisions.jsonl``.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from inflight.control.peers.base import Signal
from inflight.planes.peers.base import ControlLoop, PeerIO
from inflight.planes.peers.catalog import PEERS, PeerSettings
from inflight.planes.peers.signals import NoData, promql
from inflight.planes.scaler_client import ScalerUnavailable

log = logging.getLogger("inflight.up.peers")

#: The longest a read may take (KEDA's Prometheus scaler uses the HTTP client's timeout;
#: here one loop tick must not stall the stack's main loop for long).
READ_TIMEOUT_S = 2.0


def parse_instant(status: int, body: bytes | str, query: str) -> float:
    """The value of an instant query's answer, as KEDA's ``ExecutePromQuery`` reads it.

    No series, or a sample with no value: NoData. An error status, bad JSON, more than
    one series, or a value list without the value: ScalerUnavailable. NaN and ±Inf are
    returned as they are (the trigger decides, ``ignoreNullValues``).
    """
    if not 200 <= status <= 299:
        raise ScalerUnavailable(f"prometheus query api returned error. status: {status}")
    try:
        data: Any = json.loads(body)
    except ValueError as exc:
        raise ScalerUnavailable(f"prometheus answered with bad JSON: {exc}") from exc
    result = data.get("data", {}).get("result", []) if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ScalerUnavailable(f"prometheus answered without a result list: {data!r:.200}")
    if not result:
        raise NoData(f"{query}: the result is empty")
    if len(result) > 1:
        raise ScalerUnavailable(f"prometheus query {query} returned multiple elements")
    value = result[0].get("value", []) if isinstance(result[0], dict) else []
    if not value:
        raise NoData(f"{query}: the value list is empty")
    if len(value) < 2:
        raise ScalerUnavailable(f"prometheus query {query} didn't return enough values")
    try:
        return float(value[1])
    except (TypeError, ValueError) as exc:
        raise ScalerUnavailable(f"prometheus value {value[1]!r} is not a number") from exc


class PromReader:
    """``read(Signal) -> float`` over Prometheus' HTTP API (blocking, with a timeout)."""

    def __init__(
        self,
        base_url: Callable[[], str],
        time_scale: float,
        scrape_interval_s: float,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url
        self.time_scale = time_scale
        self.scrape_interval_s = scrape_interval_s
        self.timeout_s = timeout_s

    def __call__(self, signal: Signal) -> float:
        query = promql(signal, self.time_scale, self.scrape_interval_s)
        base = self.base_url()
        url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            raise ScalerUnavailable(f"prometheus at {base} unreachable: {exc}") from exc
        value = parse_instant(status, body, query)
        if math.isnan(value):
            log.debug("%s read NaN", signal.value)
        return value


def build_peer(name: str, settings: PeerSettings, io: PeerIO) -> ControlLoop:
    """The control loop of peer ``name`` (KeyError-free: the CLI validated the name)."""
    try:
        spec = PEERS[name]
    except KeyError:
        raise ValueError(f"unknown peer {name!r}; one of {', '.join(PEERS)}") from None
    log.info("control plane: %s — %s (%s)", name, spec.description, spec.citation)
    return spec.build(settings, io)
