"""The limits at the door: what a client may send the router, and how slowly (issue 39).

One value, :class:`DoorLimits`, read by :mod:`router.uvicorn_protocol` (the app's ``LIMITS``
attribute) and made from ``inflight router``'s flags (:meth:`router.config.RouterSettings.
door_limits`); kept apart from the protocol so the settings import no server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _no_count(reason: str) -> None:
    """DoorLimits' ``count`` when nobody counts."""


@dataclass(frozen=True)
class DoorLimits:
    """What a client may send and how slowly (the module doc; ``inflight router``'s flags
    say the same). None: no limit. The defaults are nginx's and Envoy's, and no OpenAI
    request up to ``--max-body-bytes`` comes near them (its size is in the body)."""

    max_url_bytes: int = 8 * 1024  # nginx's large_client_header_buffers buffer: 8 KiB
    max_header_bytes: int = 64 * 1024  # Envoy's max_request_headers_kb: 60 KiB
    max_headers: int = 100  # Envoy's max_headers_count
    header_timeout_s: float | None = 60.0  # nginx's client_header_timeout
    body_timeout_s: float | None = 60.0  # nginx's client_body_timeout (between two reads)
    max_connections: int | None = 4096
    write_stall_s: float | None = 60.0  # nginx's send_timeout (between two writes)
    count: Callable[[str], None] = _no_count  # router_client_errors_total{reason}

    @property
    def watch_period_s(self) -> float | None:
        """The watchdog's period: half the shorter timeout (None: no timeout)."""
        timeouts = [t for t in (self.header_timeout_s, self.body_timeout_s) if t]
        return min(timeouts) / 2 if timeouts else None
