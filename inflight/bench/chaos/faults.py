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
from inflight.bench.chaos.scale_down import plan_for
from inflight.procs import ManagedProcess, ProcessError, group_alive, inflight_command
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
    surge: bool = False  # the load rose at the injection: the replica count must rise
    signalled_t: float | None = None  # the kill's signal, where injected_t is the death


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


async def _start_router(ctx: Ctx, name: str, port: int = 0) -> tuple[ManagedProcess, int]:
    """A router of our own on the stack's endpoints file (``port`` 0: one from the OS);
    its process and port, once its /health answers."""
    state = ctx.state_dir
    ready_file = Path(state) / "logs" / f"{name}.ready.json"
    ready_file.unlink(missing_ok=True)
    argv = [
        *inflight_command("router"), "--host", "127.0.0.1", "--port", str(port),
        "--ready-file", str(ready_file),
        "--slots-per-endpoint", str(ctx.slots), "--endpoints-file", str(state / ENDPOINTS),
        "--hold-when-full", "--file-poll-s", "0.2",
    ]  # fmt: skip
    proc = ManagedProcess(
        argv, name=name, log_path=Path(state) / "logs" / f"{name}.log", ready_file=ready_file
    )
    ctx.extra.append(proc)
    proc.start()
    port = (await asyncio.to_thread(proc.wait_ports, 60.0))["http"]
    await asyncio.to_thread(proc.wait_ready, f"http://127.0.0.1:{port}/health", 60.0)
    return proc, port


async def _scraped(ctx: Ctx, port: int) -> None:
    """Until Prometheus has scraped the router on ``port`` (so the scaler knows it as a
    router: a target that exposed L); at most a minute."""
    url = ctx.info.get("prometheus_url")
    deadline = time.monotonic() + 60.0
    while url and time.monotonic() < deadline:
        if await probe.target_up(ctx.session, str(url), f"127.0.0.1:{port}"):
            return
        await asyncio.sleep(0.2)
    if url:
        raise FaultError(f"Prometheus did not scrape the router on :{port} within 60 s")


async def _share_load(
    ctx: Ctx, name: str
) -> tuple[ManagedProcess, int, int, PrometheusServer | None]:
    """A second router, in Prometheus' discovery and given half the load, scraped and
    sharing it for ``--settle-s``: (process, port, its index in the load's routers,
    the discovery it was added to)."""
    proc, port = await _start_router(ctx, name)
    targets = _router_targets(ctx)
    if targets is not None:
        targets.set_targets("router", [ctx.router_url.removeprefix("http://"), f"127.0.0.1:{port}"])
    index = len(ctx.load.router_urls)
    ctx.load.router_urls.append(f"http://127.0.0.1:{port}")
    ctx.load.routers = [0, index]
    ctx.active_routers.append(index)
    await _scraped(ctx, port)
    await asyncio.sleep(ctx.wall(ctx.args.settle_s))  # scraped, sharing the load
    return proc, port, index, targets


def _out_of_discovery(ctx: Ctx, targets: PrometheusServer | None) -> None:
    if targets is not None:
        targets.set_targets("router", [ctx.router_url.removeprefix("http://")])


async def second_router(ctx: Ctx) -> Injected:
    """A second router on the same endpoints file, scraped by the same Prometheus and
    given half the load; killed (-9) under load; taken out of discovery
    ``router_missing_s`` seed seconds later (a router removed from discovery is gone)."""
    proc, port, index, targets = await _share_load(ctx, "router-2")
    assert proc.pgid is not None
    pgid = proc.pgid
    _kill(pgid, signal.SIGKILL)
    t = time.time()
    ctx.load.routers = [0]
    ctx.active_routers.remove(index)
    await asyncio.sleep(ctx.args.router_missing_s * ctx.time_scale)
    _out_of_discovery(ctx, targets)
    released = time.time()
    await asyncio.to_thread(proc.stop, 2.0)  # reap it
    return Injected(
        t, released, ctx.scaler_answers, (), index, {pgid: f"second router :{port}"},
        [f"router-2 on :{port} took half the load, SIGKILL, out of Prometheus discovery "
         f"{released - t:.1f} s later" + ("" if targets else " (no Prometheus)")],
    )  # fmt: skip


def _scaled_up(ctx: Ctx, desired_before: int) -> Probe:
    """Recovered from a surge: the count wanted rose above ``desired_before``, and the
    scaler answers."""

    async def check() -> bool:
        return _desired(ctx) > desired_before and await ctx.scaler_answers()

    return check


def _surge(ctx: Ctx) -> int:
    """The load rises to ``--rate`` × ``--surge-factor``; the count wanted before it, which
    must leave room to rise (the phase settled at ``--surge-base`` × ``--rate``)."""
    desired = _desired(ctx)
    if desired >= ctx.args.max_replicas:
        raise FaultError(
            f"the stack already wants {desired} replicas (--max-replicas "
            f"{ctx.args.max_replicas}) before the surge: lower --surge-base or --rate"
        )
    ctx.load.rate_per_s = ctx.rate(ctx.args.surge_factor)
    return desired


async def router_crashloop(ctx: Ctx) -> Injected:
    """A router in a restart loop while the load surges: scale-up must still happen.

    As a router pod in CrashLoopBackOff: a second router, scraped once (so the scaler
    knows it as a router), stays in Prometheus' discovery while it is killed (-9),
    restarted on its port after ``--crashloop-down-s`` and killed again once its /health
    answers, for ``--crashloop-s`` seed seconds; it gets no client load (not ready). Its
    target is down at most steps of every window: L is partial, which may raise the
    count, never lower it. Then it is taken out of discovery."""
    proc, port = await _start_router(ctx, "router-crash")
    targets = _router_targets(ctx)
    if targets is None:
        raise FaultError("router-crashloop needs the stack's Prometheus (not installed?)")
    targets.set_targets("router", [ctx.router_url.removeprefix("http://"), f"127.0.0.1:{port}"])
    await _scraped(ctx, port)
    desired_before = _surge(ctx)
    t = time.time()
    groups: dict[int, str] = {}
    crashes = 0
    end = t + ctx.wall(ctx.args.crashloop_s)
    while True:
        assert proc.pgid is not None
        groups[proc.pgid] = f"crash-looping router :{port} (start {crashes + 1})"
        _kill(proc.pgid, signal.SIGKILL)
        await asyncio.to_thread(proc.stop, 2.0)  # reap it
        crashes += 1
        await asyncio.sleep(ctx.wall(ctx.args.crashloop_down_s))
        if time.time() >= end:
            break
        try:
            proc, _ = await _start_router(ctx, "router-crash", port)
        except ProcessError as exc:
            raise FaultError(f"the crash-looping router did not restart on :{port}: {exc}") from exc
    _out_of_discovery(ctx, targets)
    released = time.time()
    return Injected(
        t, released, _scaled_up(ctx, desired_before), (), None, groups,
        [f"router-crash on :{port}: {crashes} SIGKILLs in {released - t:.1f} s, each restart "
         f"after {ctx.wall(ctx.args.crashloop_down_s):.1f} s, no client load; load "
         f"×{ctx.args.surge_factor / ctx.args.surge_base:g} at the first kill; desired was "
         f"{desired_before}"],
        surge=True,
    )  # fmt: skip


async def router_stop(ctx: Ctx) -> Injected:
    """A router SIGSTOPped while the load surges: scale-up must happen on the partial L.

    A second router shares the load (as ``second-router``); at the surge it is stopped:
    it hangs with the requests it holds (they still hold slots on the replicas), its
    scrapes time out (``up == 0``), and the clients send to the first router only (a
    readiness probe would take it out of the Service). ``--router-stop-s`` seed seconds
    later it gets SIGCONT, finishes what it holds, is stopped and taken out of discovery."""
    proc, port, index, targets = await _share_load(ctx, "router-stop")
    url = ctx.load.router_urls[index]
    status = await probe.router_status(ctx.session, url)
    assert proc.pgid is not None
    pgid = proc.pgid
    desired_before = _surge(ctx)
    _kill(pgid, signal.SIGSTOP)
    t = time.time()
    ctx.load.routers = [0]
    ctx.active_routers.remove(index)
    held = int(status.get("inflight", 0)) if status else 0
    ctx.frozen[index] = held
    try:
        await asyncio.sleep(ctx.wall(ctx.args.router_stop_s))
    finally:
        _kill(pgid, signal.SIGCONT)
        del ctx.frozen[index]
    released = time.time()
    ctx.active_routers.append(index)  # counted again (its L drains): the leak check reads it
    drained = await _until_drained(ctx, url, ctx.args.drain_timeout_s)
    ctx.active_routers.remove(index)
    _out_of_discovery(ctx, targets)
    await asyncio.to_thread(proc.stop, 5.0)
    return Injected(
        t, released, _scaled_up(ctx, desired_before), (), index,
        {pgid: f"stopped router :{port}"},
        [f"router-stop on :{port} took half the load, SIGSTOP holding {held} request(s), "
         f"SIGCONT {released - t:.1f} s later; "
         + ("its requests then ended" if drained else "its L was not 0 after the drain")
         + f"; load ×{ctx.args.surge_factor / ctx.args.surge_base:g} at the stop; desired "
         f"was {desired_before}"],
        surge=True,
    )  # fmt: skip


async def _until_drained(ctx: Ctx, url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await probe.router_status(ctx.session, url)
        if status is not None and int(status.get("inflight", 0)) == 0:
            return True
        await asyncio.sleep(0.2)
    return False


async def kill_router(ctx: Ctx) -> Injected:
    """kill -9 of the stack's own router under load: ``inflight up`` restarts it on its
    port. The requests it held fail with it (on the fault); those sent while it is down
    are refused at connect, before anything was sent, and the client retries them
    (``requests_retried_after_refused``): none may be lost beyond those it held."""
    ready_before = await ctx.ready()
    pgid = probe.group_of(ctx.state_dir, "router")
    if pgid is None:
        raise FaultError("no router in children.json")
    signalled = time.time()
    _kill(pgid, signal.SIGKILL)
    # The fault's instant is the router's death, not the signal: until its process is gone
    # its listening socket still accepts, and what it accepted then it held. (Its clients
    # see their connections reset while this polls: before the death is stamped.)
    deadline = time.monotonic() + 5.0
    while group_alive(pgid) and time.monotonic() < deadline:  # noqa: ASYNC110 - polls /proc
        await asyncio.sleep(0.005)
    t = time.time()

    async def back() -> bool:
        if group_alive(pgid) or probe.group_of(ctx.state_dir, "router") in (None, pgid):
            return False
        want = min(ready_before, max(1, _desired(ctx)))
        return await ctx.ready() >= want and await ctx.scaler_answers()

    return Injected(
        t, t, back, (), 0, {pgid: "killed router"},
        [f"SIGKILL to the stack's router (pgid {pgid}); {ready_before} replica(s) ready; "
         f"gone {t - signalled:.3f} s after the signal"],
        signalled_t=signalled,
    )  # fmt: skip


def _router_targets(ctx: Ctx) -> PrometheusServer | None:
    """The stack's Prometheus file discovery for job ``router`` (None: no Prometheus).
    A Prometheus restart by the stack rewrites it: run this fault after that one."""
    if not ctx.info.get("prometheus_url"):
        return None
    return PrometheusServer(data_dir=ctx.state_dir / PROMETHEUS_DIR, jobs={"router": []})


async def scale_down(ctx: Ctx) -> Injected:
    """Long streams open, then the load drops: the policy removes replicas while the streams
    run; each must complete.

    The fleet is not driven: the fault waits for the policy's own scale-down, on a condition
    it is guaranteed to reach (:mod:`inflight.bench.chaos.scale_down`): only long streams
    stay in flight, as many as fit in one replica fewer (each one that ends is replaced),
    until the count wanted falls, or until a deadline derived from the trigger's windows
    passes, counted from the end of the load's own requests. The note says which came."""
    desired_before = _desired(ctx)
    try:
        plan = plan_for(
            slots=ctx.slots, time_scale=ctx.time_scale, min_replicas=1,
            max_replicas=ctx.args.max_replicas, desired_before=desired_before,
            long_streams=ctx.args.long_streams, overrides=dict(ctx.args.scaler_metadata),
        )  # fmt: skip
    except ValueError as exc:
        raise FaultError(f"scale-down: {exc}") from exc
    sent = 0

    def top_up() -> None:
        nonlocal sent
        while ctx.load.long_inflight < plan.streams:
            ctx.load.send(ctx.long_payload, long=True)
            sent += 1

    top_up()
    await asyncio.sleep(1.0)  # the streams reach the router before the load drops
    await ctx.load.stop()
    t = time.time()
    quiet_t: float | None = None  # the load's own requests have ended: L is the streams'
    deadline_t = t + ctx.args.drain_timeout_s + plan.deadline_s
    fell_t: float | None = None
    while True:
        now = time.time()
        if quiet_t is None and ctx.load.inflight == ctx.load.long_inflight:
            quiet_t, deadline_t = now, now + plan.deadline_s
        if _desired(ctx) < desired_before:
            fell_t = now
            break
        if now >= deadline_t:
            break
        top_up()
        await asyncio.sleep(0.2)
    released = fell_t if fell_t is not None else time.time()
    notes = [
        f"{plan.streams} long streams (--long-streams {ctx.args.long_streams}, at most what "
        f"{desired_before - 1} replica(s) hold), then no new load; desired was {desired_before}",
        f"waited for the policy's own scale-down (no fleet driven), each long stream that ended "
        f"replaced ({sent} sent); deadline {plan.deadline_s:.1f} s wall after the load's "
        f"requests ended = {plan.why}; "
        + (
            f"the count fell {fell_t - t:.1f} s after the load drop"
            if fell_t is not None
            else f"the count did not fall by the deadline ({released - t:.1f} s after the drop)"
        ),
    ]

    async def back() -> bool:
        desired = _desired(ctx)
        return desired < desired_before and await ctx.ready() == desired and not ctx.load.inflight

    return Injected(t, released, back, notes=notes)


def _desired(ctx: Ctx) -> int:
    points = read_timeline(ctx.state_dir / "timeline.jsonl")
    return points[-1].desired if points else 0


FAULTS: dict[str, Callable[[Ctx], Awaitable[Injected]]] = {
    "kill-replica": kill_replica,
    "hang-replica": hang_replica,
    "prometheus-down": kill_prometheus,
    "scaler-restart": kill_scaler,
    "second-router": second_router,
    "router-crashloop": router_crashloop,
    "router-stop": router_stop,
    "router-restart": kill_router,
    "scale-down": scale_down,
}

#: Faults injected at a surge: the phase settles at ``--surge-base`` × ``--rate`` first.
SURGE_FAULTS = frozenset({"router-crashloop", "router-stop"})
