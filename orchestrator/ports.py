"""Moved to :mod:`inflight.ports` (Prometheus, started by :mod:`inflight.prom`, needs it too);
kept so existing imports keep working."""

from inflight.ports import listening_ports, ports_of

__all__ = ["listening_ports", "ports_of"]
