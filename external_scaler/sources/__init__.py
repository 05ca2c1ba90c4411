"""Where the window of L comes from: Prometheus (the default) or the routers directly.

A source turns a trigger's ``ScalerSpec`` and the time into an ``Observed`` window; it
raises ``SourceError`` (→ UNAVAILABLE) when it cannot, never returns a made-up 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from external_scaler.metadata import ScalerSpec
from inflight.control.capacity import KvWindow
from inflight.control.policy import Window


@dataclass(frozen=True)
class Observed:
    """A window of samples and the time (unix seconds) the policy should decide at.

    ``end_s`` is the source's evaluation time: the Prometheus source aligns it to its query
    step, so two scaler processes asked within the same step decide on identical data.
    ``kv``: vLLM's KV series over the same steps (empty when the source has none, or the
    trigger's ``capacity`` is ``requests``).
    """

    window: Window
    end_s: float
    kv: KvWindow = field(default_factory=KvWindow)


class WindowSource(Protocol):
    """Anything that can deliver the window of L a trigger needs."""

    async def observe(self, spec: ScalerSpec, now_s: float, timeout_s: float) -> Observed:
        """The window for ``spec`` ending about ``now_s``; answer within ``timeout_s``."""
        ...

    async def close(self) -> None:
        """Release connections and background tasks."""
        ...
