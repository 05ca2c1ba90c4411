"""The faults of the fault run, each injected into a settled, loaded stack.

Each fault is an async function of the run's :class:`~inflight.bench.chaos.ctx.Ctx`
returning an :class:`Injected`: when it started and ended, what it hit (endpoints, a
router, process groups that must be gone afterwards), and a recovery probe. Durations
given in seed seconds are multiplied by the time-scale, like everything else in the stack.

Processes are addressed by process group, found in the stack's ``children.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from inflight.bench.chaos import probe
from inflight.bench.chaos.ctx import Ctx
from inflight.procs import ManagedProcess, group_alive, inflight_command
from inflight.prom import PrometheusServer
from inflight.statedir import ENDPOINTS, PROMETHEUS_DIR, hold_path, read_timeline

Probe = Callable[[], Awaitable[bool]]


@dataclass
class Injected:
    injected_t: float
    released_t: float
    recovered: Probe  # true once the stack serves as before the fault
    endpoints: tuple[str, ...] = ()
    router: int | None = None
    groups: dict[int, str] = field(default_factory=dict)  # must be gone afterwards
    notes: list[str] = field(default_factory=list)


def _kill(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


async def _busiest_replica(ctx: Ctx) -> tuple[str, int]:
    """(host:port, pgid) of the ready replica with the most requests in flight."""
    status = await probe.router_status(ctx.session, ctx.router_url)
    if status is None:
        raise FaultError("the router does not answer /router/status")
    ready = [e for e in status.get("endpoints", []) if e.get("state") == "ready"]
    if not ready:
        raise FaultError("no ready replica to inject the fault into")
    ep = max(ready, key=lambda e: int(e.get("inflight", 0)))
    label = str(ep["url"]).removeprefix("http://")
    pgid = probe.replica_group(ctx.state_dir, int(label.rsplit(":", 1)[1]))
    if pgid is None:
        raise FaultError(f"no process group in children.json listens on {label}")
    return label, pgid


class FaultError(RuntimeError):
    """A fault could not be injected (the message says why)."""


async def _replica_back(ctx: Ctx, ready_before: int, pgid: int, label: str) -> bool:
    """The faulted replica is gone (process and router), and as many are ready as before
    it, or as the stack now wants if that is fewer: the load may have let the autoscaler
    scale down meanwhile (whether that was right is judged apart, as wrong_scale_downs),
    and waiting for the old count would then never end."""
    if group_alive(pgid):
        return False
    ready = await ctx.ready_endpoints()
    want = min(ready_before, max(1, _desired(ctx)))
    return f"http://{label}" not in ready and len(ready) >= want and await ctx.scaler_answers()


async def kill_replica(ctx: Ctx) -> Injected:
    """kill -9 of the busiest ready replica, under load."""
    ready_before = await ctx.ready()
    label, pgid = await _busiest_replica(ctx)
    _kill(pgid, signal.SIGKILL)
    t = time.time()
    return Injected(
        t, t, lambda: _replica_back(ctx, ready_before, pgid, label), (label,), None,
        {pgid: f"killed replica {label}"}, [f"SIGKILL to the group of {label} (pgid {pgid})"],
    )  # fmt: skip


async def hang_replica(ctx: Ctx) -> Injected:
    """SIGSTOP of the busiest ready replica: it hangs without dying. The stack must see
    it (health checks) and replace it; after ``hang_s`` seed seconds the harness sends
    SIGCONT if it is still there, so a process is never left stopped."""
    ready_before = await ctx.ready()
    label, pgid = await _busiest_replica(ctx)
    _kill(pgid, signal.SIGSTOP)
    t = time.time()
    notes = [f"SIGSTOP to the group of {label} (pgid {pgid})"]
    cap_t = t + ctx.args.hang_s * ctx.time_scale
    while group_alive(pgid) and time.time() < cap_t:  # noqa: ASYNC110 - polls /proc
        await asyncio.sleep(0.2)
    if group_alive(pgid):
        _kill(pgid, signal.SIGCONT)
        notes.append(f"still there after {time.time() - t:.1f} s: SIGCONT sent")
    else:
        notes.append(f"stopped by the stack {time.time() - t:.1f} s after the SIGSTOP")
    return Injected(
        t, t, lambda: _replica_back(ctx, ready_before, pgid, label), (label,), None,
        {pgid: f"hung replica {label}"}, notes,
    )  # fmt: skip


async def kill_prometheus(ctx: Ctx) -> Injected:
    """kill -9 of Prometheus, kept down ``prometheus_down_s`` seed seconds by the stack's
    ``hold/prometheus`` control, then released: the stack restarts it."""
    url = ctx.info.get("prometheus_url")
    pgid = probe.group_of(ctx.state_dir, "prometheus")
    if not url or pgid is None:
        raise FaultError("the stack runs no Prometheus (not installed?)")
    hold = hold_path(ctx.state_dir, "prometheus")
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.write_text(f"held by inflight bench chaos (pid {os.getpid()})\n")
    try:
        _kill(pgid, signal.SIGKILL)
        t = time.time()
        await asyncio.sleep(ctx.args.prometheus_down_s * ctx.time_scale)
    finally:
        hold.unlink(missing_ok=True)
    released = time.time()

    async def back() -> bool:
        return await probe.prometheus_ready(ctx.session, str(url)) and await ctx.scaler_answers()

    down = released - t
    return Injected(
        t, released, back, (), None, {pgid: "killed prometheus"},
        [f"SIGKILL to prometheus (pgid {pgid}); held down {down:.1f} s wall "
         f"({ctx.args.prometheus_down_s:g} seed s) by {hold.name}"],
    )  # fmt: skip


async def kill_scaler(ctx: Ctx) -> Injected:
    """kill -9 of the scaler; the stack restarts it."""
    pgid = probe.group_of(ctx.state_dir, "scaler")
    if pgid is None:
        raise FaultError("no scaler in children.json")
    _kill(pgid, signal.SIGKILL)
    t = time.time()
    return Injected(
        t, t, ctx.scaler_answers, (), None, {pgid: "killed scaler"},
        [f"SIGKILL to the scaler (pgid {pgid})"],
    )  # fmt: skip


async def second_router(ctx: Ctx) -> Injected:
    """A second router on the same endpoints file, scraped by the same Prometheus and
    given half the load; killed (-9) under load; taken out of discovery
    ``router_missing_s`` seed seconds later (a router removed from discovery is gone)."""
    state = ctx.state_dir
    ready_file = Path(state) / "logs" / "router-2.ready.json"
    argv = [
        *inflight_command("router"), "--host", "127.0.0.1", "--port", "0",
        "--ready-file", str(ready_file),
        "--slots-per-endpoint", str(ctx.slots), "--endpoints-file", str(state / ENDPOINTS),
        "--hold-when-full", "--file-poll-s", "0.2",
    ]  # fmt: skip
    proc = ManagedProcess(
        argv,
        name="router-2",
        log_path=Path(state) / "logs" / "router-2.log",
        ready_file=ready_file,
    )
    ctx.extra.append(proc)
    proc.start()
    port = (await asyncio.to_thread(proc.wait_ports, 60.0))["http"]
    url = f"http://127.0.0.1:{port}"
    await asyncio.to_thread(proc.wait_ready, url + "/health", 60.0)
    targets = _router_targets(ctx)
    first = ctx.router_url.removeprefix("http://")
    if targets is not None:
        targets.set_targets("router", [first, f"127.0.0.1:{port}"])
    index = len(ctx.load.router_urls)
    ctx.load.router_urls.append(url)
    ctx.load.routers = [0, index]
    ctx.active_routers.append(index)
    await asyncio.sleep(ctx.args.settle_s * ctx.time_scale)  # scraped, sharing the load
    assert proc.pgid is not None
    pgid = proc.pgid
    _kill(pgid, signal.SIGKILL)
    t = time.time()
    ctx.load.routers = [0]
    ctx.active_routers.remove(index)
    await asyncio.sleep(ctx.args.router_missing_s * ctx.time_scale)
    if targets is not None:
        targets.set_targets("router", [first])
    released = time.time()
    await asyncio.to_thread(proc.stop, 2.0)  # reap it
    return Injected(
        t, released, ctx.scaler_answers, (), index, {pgid: f"second router :{port}"},
        [f"router-2 on :{port} took half the load, SIGKILL, out of Prometheus discovery "
         f"{released - t:.1f} s later" + ("" if targets else " (no Prometheus)")],
    )  # fmt: skip


def _router_targets(ctx: Ctx) -> PrometheusServer | None:
    """The stack's Prometheus file discovery for job ``router`` (None: no Prometheus).
    A Prometheus restart by the stack rewrites it: run this fault after that one."""
    if not ctx.info.get("prometheus_url"):
        return None
    return PrometheusServer(data_dir=ctx.state_dir / PROMETHEUS_DIR, jobs={"router": []})


async def scale_down(ctx: Ctx) -> Injected:
    """Long streams open, then the load drops: the scaler removes replicas after its
    window while the streams run; each must complete."""
    desired_before = _desired(ctx)
    for _ in range(ctx.args.long_streams):
        ctx.load.send(ctx.long_payload, long=True)
    await asyncio.sleep(1.0)  # the streams reach the router before the load drops
    await ctx.load.stop()
    t = time.time()
    notes = [
        f"{ctx.args.long_streams} long streams, then no new load; desired was {desired_before}"
    ]

    async def back() -> bool:
        desired = _desired(ctx)
        return desired < desired_before and await ctx.ready() == desired and not ctx.load.inflight

    return Injected(t, t, back, notes=notes)


def _desired(ctx: Ctx) -> int:
    points = read_timeline(ctx.state_dir / "timeline.jsonl")
    return points[-1].desired if points else 0


FAULTS: dict[str, Callable[[Ctx], Awaitable[Injected]]] = {
    "kill-replica": kill_replica,
    "hang-replica": hang_replica,
    "prometheus-down": kill_prometheus,
    "scaler-restart": kill_scaler,
    "second-router": second_router,
    "scale-down": scale_down,
}
