"""What the faults (:mod:`inflight.bench.chaos.faults`) and the phase runner
(:mod:`inflight.bench.chaos.run`) share for one fault run: :class:`Ctx`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import aiohttp

from inflight.bench.chaos import probe
from inflight.bench.chaos.load import OpenLoop
from inflight.bench.chaos.model import Sample
from inflight.control.trigger import scaler_metadata
from inflight.procs import ManagedProcess


@dataclasses.dataclass
class Ctx:
    """What the faults and the phase runner share for one run."""

    args: argparse.Namespace
    info: dict[str, Any]
    state_dir: Path
    session: aiohttp.ClientSession
    load: OpenLoop
    long_payload: bytes
    time_scale: float
    slots: int
    samples: list[Sample] = dataclasses.field(default_factory=list)
    active_routers: list[int] = dataclasses.field(default_factory=lambda: [0])
    # routers that hold requests but cannot answer (SIGSTOPped): index -> L at the stop,
    # counted in the samples (they hold slots on the replicas) without probing them
    frozen: dict[int, int] = dataclasses.field(default_factory=dict)
    extra: list[ManagedProcess] = dataclasses.field(default_factory=list)

    @property
    def router_url(self) -> str:
        return str(self.info["router_url"])

    async def ready_endpoints(self) -> list[str]:
        """URLs the stack's router routes to now."""
        status = await probe.router_status(self.session, self.router_url)
        if status is None:
            return []
        return [str(e["url"]) for e in status.get("endpoints", []) if e.get("state") == "ready"]

    async def ready(self) -> int:
        return len(await self.ready_endpoints())

    async def scaler_answers(self) -> bool:
        md = scaler_metadata(
            self.slots, self.time_scale, "saturation", dict(self.args.scaler_metadata)
        )
        return await asyncio.to_thread(probe.scaler_answers, str(self.info["scaler_address"]), md)

    def wall(self, seed_s: float) -> float:
        return seed_s * self.time_scale

    def rate(self, factor: float = 1.0) -> float:
        """Arrivals per wall second: ``--rate`` (per seed second) × ``factor``."""
        return float(self.args.rate) * factor / self.time_scale
