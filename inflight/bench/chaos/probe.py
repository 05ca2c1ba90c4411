"""What the fault run reads from a running stack: router status, replica queues, the
scaler's answer, and which process group is which (from ``children.json`` and /proc).

Processes are found by PID and process group only (``children.json`` names each group
the stack started; :func:`inflight.ports.listening_ports` maps a replica's group to
its port), never by pattern.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from inflight import names
from inflight.bench import proctree
from inflight.planes.scaler_client import ScalerClient, ScalerUnavailable
from inflight.ports import listening_ports
from inflight.procs import group_alive, live_processes
from inflight.statedir import CHILDREN

_TIMEOUT = aiohttp.ClientTimeout(total=2.0)


async def router_status(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    """The router's ``/router/status`` document, None when it does not answer."""
    try:
        async with session.get(url.rstrip("/") + "/router/status", timeout=_TIMEOUT) as resp:
            doc = await resp.json(content_type=None)
            return doc if resp.status == 200 and isinstance(doc, dict) else None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None


def parse_queue(text: str) -> int:
    """``vllm:num_requests_running`` + ``vllm:num_requests_waiting`` from a /metrics text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((names.VLLM_RUNNING, names.VLLM_WAITING)):
            total += float(line.rsplit(" ", 1)[1])
    return round(total)


async def replica_queue(session: aiohttp.ClientSession, url: str) -> int | None:
    """Requests a replica runs or queues now (None: it does not answer)."""
    try:
        async with session.get(url.rstrip("/") + "/metrics", timeout=_TIMEOUT) as resp:
            return parse_queue(await resp.text()) if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None


async def prometheus_ready(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url.rstrip("/") + "/-/ready", timeout=_TIMEOUT) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def target_up(session: aiohttp.ClientSession, prometheus_url: str, instance: str) -> bool:
    """Prometheus' last scrape of ``instance`` (``host:port``) succeeded (``up == 1``)."""
    query = f'up{{instance="{instance}"}} == 1'
    try:
        async with session.get(
            prometheus_url.rstrip("/") + "/api/v1/query", params={"query": query}, timeout=_TIMEOUT
        ) as resp:
            doc = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return False
    result = doc.get("data", {}).get("result", []) if isinstance(doc, dict) else []
    return bool(result)


def scaler_answers(address: str, metadata: dict[str, str]) -> bool:
    """GetMetricSpec then GetMetrics answer (a fresh channel: no reconnect back-off)."""
    client = ScalerClient(address, metadata, deadline_s=1.0)
    try:
        spec = client.metric_spec()
        client.metric_value(spec.metric_name)
        return True
    except ScalerUnavailable:
        return False
    finally:
        client.close()


def children(state_dir: Path) -> list[dict[str, Any]]:
    """The stack's ``children.json`` rows (``pgid``, ``start_time``, ``name``)."""
    try:
        rows = json.loads((state_dir / CHILDREN).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in rows if isinstance(r, dict) and "pgid" in r]


def group_of(state_dir: Path, name: str) -> int | None:
    """Process group of the core process ``name`` (``prometheus``, ``scaler``, ``router``)."""
    for row in children(state_dir):
        if row.get("name") == name:
            return int(row["pgid"])
    return None


def replica_group(state_dir: Path, port: int) -> int | None:
    """Process group of the replica listening on ``port``."""
    for row in children(state_dir):
        if str(row.get("name", "")).startswith("replica-") and port in listening_ports(
            int(row["pgid"])
        ):
            return int(row["pgid"])
    return None


def untracked(up_pid: int, state_dir: Path) -> list[str]:
    """Live descendants of ``inflight up`` in a group ``children.json`` does not name:
    processes the stack lost track of (it would never stop them)."""
    known = {int(r["pgid"]) for r in children(state_dir)} | {up_pid}
    pgid_of = {p.pid: p.pgid for p in live_processes()}
    out = []
    for pid in sorted(proctree.descendants(up_pid)):
        pgid = pgid_of.get(pid)
        if pgid is not None and pgid not in known:
            out.append(f"pid {pid} (pgid {pgid}) not in {CHILDREN}")
    return out


def alive_groups(pgids: dict[int, str]) -> list[str]:
    """Labels of the groups in ``pgids`` (pgid -> label) that still have a live member."""
    return [f"{label} (pgid {pgid})" for pgid, label in pgids.items() if group_alive(pgid)]
