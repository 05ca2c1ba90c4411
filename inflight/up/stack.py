"""The whole stack on one machine: replicas, router, Prometheus, scaler, local KEDA+HPA.

Start order (each waits for the previous one's readiness where it matters): replica
processes, the router (fed through ``endpoints.json``), Prometheus when installed (file
SD targets: router, ready replicas, scaler; scrape every 5 s × time-scale), the scaler
(Prometheus source, or the direct router source without Prometheus), then — once the
first replicas answer ``/health`` — the KEDA+HPA loop, and ``stack.json`` last. Under a
peer's policy (``--policy kpa|ray|vllm-waiting|epp-queue|hpa-rps``) that peer's control
plane (:mod:`inflight.planes.peers`) replaces the KEDA+HPA loop on our scaler; it reads
Prometheus. The scaler still runs, idle (nothing calls it), so ``stack.json``, restarts
and its metrics are the same under every policy.

:meth:`Stack.run` is the main loop: supervisor tick, autoscaler tick, timeline, and the
core processes' keeper: a router, Prometheus or scaler that dies is restarted on the same
ports after a back-off (:mod:`inflight.control.restarts` decides when; each death and
restart is logged and recorded in ``restarts.jsonl``); a ``hold/<name>`` file in the state
dir keeps it down while it exists. A restarted router starts with L = 0: the requests it
held died with it (their clients saw the connection break), and the replicas drop the ones
it had sent them when the connection closes. On exit every process group is stopped,
and the stack checks that none is alive and that every port it used is free, and says so.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inflight import names
from inflight.control import hpa
from inflight.control.keda import KedaSpec
from inflight.control.periodic import next_due
from inflight.control.restarts import (
    RestartAction,
    RestartPolicy,
    RestartState,
    restart_step,
    started,
)
from inflight.control.scale_down import Warmth
from inflight.control.trigger import SCRAPE_INTERVAL_S, resolved
from inflight.logs import LOG_FORMAT
from inflight.planes.autoscaler import AutoscaleConfig, Autoscaler, Observation
from inflight.planes.peers.base import ControlLoop, PeerIO
from inflight.planes.peers.catalog import PEERS, PeerSettings
from inflight.planes.scaler_client import ScalerClient, ScalerUnavailable
from inflight.ports import listening_ports
from inflight.procs import ManagedProcess, ProcessError, inflight_command, port_is_free
from inflight.prom import PrometheusServer
from inflight.statedir import (
    CHILDREN,
    ENDPOINTS,
    PROMETHEUS_DIR,
    RestartRecord,
    StackInfo,
    StateDir,
    TimelinePoint,
)
from inflight.up import orphans
from inflight.up.peer_loop import PromReader, build_peer
from inflight.up.supervisor import Supervisor, SupervisorConfig

if TYPE_CHECKING:
    from inflight.up.cli import UpSettings

log = logging.getLogger("inflight.up")

TICK_S = 0.05
#: children.json is rewritten at least this often, so it names the groups' newer members.
MEMBERS_REFRESH_S = 1.0
#: Back-off of the router, Prometheus and scaler restarts (real seconds).
RESTART_POLICY = RestartPolicy()
#: The local Prometheus' job of the ready replicas (their /metrics: vLLM's series, the KV
#: dimension's among them); the trigger's ``capacitySelector`` names it.
REPLICAS_JOB = "replicas"
#: ``--token-admission``: how long the start waits for the router to read the first
#: replicas' KV capacity (real seconds; the router reads every 5 s, --discover-interval-s).
KV_DISCOVERY_WAIT_S = 15.0


class StackError(RuntimeError):
    """The stack could not start (the message says which part and why)."""


def autoscale_config(cfg: UpSettings) -> AutoscaleConfig:
    """The local KEDA + HPA loop's settings for one scaled workload (one a model under
    ``--model``): the shipped HPA behaviour and KEDA's cooldown, in real seconds."""
    return AutoscaleConfig(
        hpa=hpa.HpaSpec(
            min_replicas=max(1, cfg.min_replicas),
            max_replicas=cfg.max_replicas,
            behavior=hpa.SHIPPED_BEHAVIOR.scaled(cfg.time_scale),
        ),
        keda=KedaSpec(cfg.min_replicas, cfg.cooldown_real_s),
        hpa_sync_s=cfg.hpa_sync_real_s,
        polling_interval_s=cfg.polling_interval_real_s,
    )


def router_args(cfg: UpSettings, endpoints_file: Path) -> list[str]:
    """``inflight router``'s arguments under ``cfg``: holding (our policies, and the
    peers that hold), the order of held requests (``inflight.control.hold_order``) and
    token admission (``--token-admission``)."""
    argv = [
        "router",
        "--host",
        "127.0.0.1",
        "--port",
        str(cfg.port),  # 0: the router binds a port from the OS and reports it
        "--slots-per-endpoint",
        str(cfg.slots_per_replica),
        *cfg.router_source(endpoints_file),  # one file, or one a model (--model)
        "--file-poll-s",
        "0.2",
    ]
    if cfg.router_holds:
        argv.append("--hold-when-full")
        deadline = cfg.router_hold_deadline_s
        if deadline is not None and not cfg.priority_class:  # the classes have their own
            argv += ["--hold-deadline-s", f"{deadline:.6g}"]
        argv += cfg.router_priority_args  # --priority-class, --max-late-s (real seconds)
        argv += cfg.router_token_args  # --token-admission: --discover-kv-tokens, …
    return argv


def _get_json(url: str, timeout_s: float = 1.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
            return data if isinstance(data, dict) else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


class Stack:
    """One run of ``inflight up``. ``start()``, then ``run(stop)``, then ``shutdown()``."""

    def __init__(self, config: UpSettings) -> None:
        self.config = config
        self.state_dir = config.state_path
        self.state = StateDir(self.state_dir)
        self.supervisor = Supervisor(
            command=config.replica_command,
            endpoints_file=self.state.path(ENDPOINTS),
            log_dir=self.state.logs,
            config=SupervisorConfig(
                startup_timeout_s=config.startup_timeout_s,
                health_timeout_s=config.replica_health_timeout_s,
            ),
            drained=self._drained,
            warmth=self._warmth,
        )
        self.router: ManagedProcess | None = None
        self.router_port = 0
        self.prometheus: PrometheusServer | None = None
        self.scaler: ManagedProcess | None = None
        self.scaler_ports: tuple[int, int] = (0, 0)
        self.client: ScalerClient | None = None
        self.autoscaler: Autoscaler | None = None
        self.peer: ControlLoop | None = None  # --policy <peer>: its control plane
        self._last_point: tuple[int, int, int] | None = None
        self._recorded_groups: tuple[int | None, ...] = ()
        self._members_recorded_s = 0.0
        self._published_targets: tuple[str, ...] | None = None
        self._next_poll_s = 0.0
        self._log_handler: logging.Handler | None = None
        self._scaler_argv: list[str] = []
        self._restarts: dict[str, RestartState] = {}
        self._held_logged: set[str] = set()

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    # --- router status: L, ready endpoints, and whether an endpoint is drained -------------
    def _status(self) -> dict[str, Any] | None:
        return _get_json(self.router_url + "/router/status") if self.router_port else None

    def _drained(self, url: str) -> bool:
        status = self._status()
        if status is None:
            return True  # no router to hold requests for it
        for ep in status.get("endpoints", []):
            if ep.get("url") == url:
                return bool(ep.get("state") != "ready" and ep.get("inflight", 0) == 0)
        return True

    def _warmth(self) -> dict[str, Warmth]:
        """Each ready endpoint's requests in flight and prefix blocks only it holds: which
        replica a scale-down takes (:mod:`inflight.control.scale_down`). Empty without a
        router, and without its --dispatch prefix (INFLIGHT_ROUTER_DISPATCH=prefix): the
        rule comes with that feature, off by default; without it, newest first."""
        status = self._status()
        if status is None:
            return {}
        endpoints = status.get("endpoints", [])
        if not any(ep.get("unique_blocks") is not None for ep in endpoints):
            return {}  # no prefix dispatch: the rule is that feature's; newest first
        return {
            str(ep["url"]): Warmth(int(ep.get("inflight", 0)), int(ep.get("unique_blocks") or 0))
            for ep in endpoints
            if ep.get("state") == "ready" and "url" in ep
        }

    def observe(self) -> Observation:
        status = self._status()
        if status is None:
            return Observation(None, self.supervisor.ready, self.config.slots_per_replica)
        endpoints = status.get("endpoints", [])
        ready = sum(1 for ep in endpoints if ep.get("state") == "ready")
        inflight = status.get("inflight")
        return Observation(
            float(inflight) if isinstance(inflight, int | float) else None,
            ready,
            int(status.get("slots_per_endpoint", self.config.slots_per_replica)),
        )

    # --- start ----------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> StackInfo:
        cfg = self.config
        self.state.acquire()
        self._setup_file_logging()
        for leftover in orphans.reap(self.state.path(CHILDREN)):
            log.warning("stopped %s, left running by a previous inflight up", leftover)
        log.info("state dir %s; replica command: %s", self.state_dir, " ".join(cfg.replica_command))
        self.supervisor.set_desired(cfg.initial_replicas)
        self.supervisor.tick()  # replica processes start first: they take longest
        self._record_children()
        self._record_point(force=True)
        self._start_router()
        if cfg.use_prometheus:
            self._start_prometheus()
        self._start_scaler()
        self._wait_replicas(stop)
        self._wait_kv_capacity(stop)
        self._wait_metric(stop)
        started = time.monotonic()
        if cfg.autoscale:
            self._start_autoscaler(started)
        self._next_poll_s = started + cfg.hpa_sync_real_s
        info = StackInfo(
            pid=os.getpid(),
            router_url=self.router_url,
            prometheus_url=self.prometheus.url if self.prometheus else None,
            scaler_address=f"127.0.0.1:{self.scaler_ports[0]}",
            time_scale=cfg.time_scale,
            policy=cfg.policy,
            started_at=time.time(),
            trigger_metadata=resolved(cfg.trigger_metadata),
        )
        self.state.write_stack(info)
        return info

    def _setup_file_logging(self) -> None:
        handler = logging.FileHandler(self.state.logs / "up.log")
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger("inflight").addHandler(handler)
        self._log_handler = handler

    def _close_file_logging(self) -> None:
        if self._log_handler is not None:
            logging.getLogger("inflight").removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    def _start_router(self) -> None:
        cfg = self.config
        if cfg.port and not port_is_free(cfg.port):
            # Not ours: shutdown must not report it as a port we left busy.
            raise StackError(f"--port {cfg.port} is in use; pick another or pass 0")
        argv = [*inflight_command(), *router_args(cfg, self.state.path(ENDPOINTS))]
        if not cfg.router_holds:
            log.info("router without --hold-when-full: requests queue in the replicas")
        self.router, ports = self._start_process(argv, "router", "/health", "http")
        self.router_port = ports["http"]
        self._record_children()

    def _start_prometheus(self) -> None:
        cfg = self.config
        self.prometheus = PrometheusServer(
            data_dir=self.state_dir / PROMETHEUS_DIR,
            jobs={
                "router": [f"127.0.0.1:{self.router_port}"],
                REPLICAS_JOB: [],
                "scaler": [],  # the scaler's metrics port, once it has reported it
            },
            scrape_interval_s=SCRAPE_INTERVAL_S * cfg.time_scale,
            evaluation_interval_s=SCRAPE_INTERVAL_S * cfg.time_scale,
        )
        try:
            # Named in children.json as soon as it exists, as the router and scaler are.
            self.prometheus.start(
                ready_timeout_s=60.0, on_spawn=lambda _proc: self._record_children()
            )
        except ProcessError as exc:
            raise StackError(f"prometheus did not start: {exc}") from exc
        self._restarts["prometheus"] = started(RestartState(), time.monotonic())
        log.info(
            "prometheus at %s (scrape every %.3g s)",
            self.prometheus.url,
            SCRAPE_INTERVAL_S * cfg.time_scale,
        )

    def _start_scaler(self) -> None:
        argv = [
            *inflight_command(),
            "scaler",
            "--grpc-port",
            "0",  # both ports from the OS, reported in the ready file
            "--metrics-port",
            "0",
            # Periods of the scaler's own caching and polling, scaled like everything else
            # (a 1 s cache at time-scale 0.05 would be 20 seed seconds stale).
            "--cache-ttl-s",
            f"{min(1.0, self.config.time_scale):.3g}",
            "--stream-interval-s",
            f"{max(0.1, min(1.0, 5 * self.config.time_scale)):.3g}",
        ]
        if self.prometheus is not None:
            argv += ["--prometheus-url", self.prometheus.url]
        else:
            log.warning(
                "prometheus is not used: the scaler reads the router directly (--source direct)"
            )
            argv += ["--source", "direct", "--router-url", self.router_url]
            argv += ["--poll-interval-s", f"{max(0.05, min(0.5, 5 * self.config.time_scale)):.3g}"]
        # Kept for a restart, which reuses the ports reported now (the address KEDA, or the
        # local loop, was given must not change): see _restart_scaler.
        self._scaler_argv = argv
        self.scaler, ports = self._start_process(argv, "scaler", "/metrics", "metrics")
        self.scaler_ports = grpc_port, metrics_port = ports["grpc"], ports["metrics"]
        self._restarts["scaler"] = started(RestartState(), time.monotonic())
        self._record_children()
        if self.prometheus is not None:
            self.prometheus.set_targets("scaler", [f"127.0.0.1:{metrics_port}"])
        self.client = ScalerClient(f"127.0.0.1:{grpc_port}", self.config.trigger_metadata)
        try:
            self.client.wait_ready(timeout_s=30.0)
        except ScalerUnavailable as exc:
            raise StackError(f"scaler did not start: {exc}") from exc

    def _start_process(
        self, argv: list[str], name: str, ready_path: str, http_key: str
    ) -> tuple[ManagedProcess, dict[str, int]]:
        """Start a server of ours with ``--ready-file``; read the ports it reports, then
        poll ``ready_path`` on its ``http_key`` port. Returns the process and its ports."""
        ready_file = self.state.logs / f"{name}.ready.json"
        proc = ManagedProcess(
            [*argv, "--ready-file", str(ready_file)],
            name=name,
            log_path=self.state.logs / f"{name}.log",
            grace_s=10.0,
            ready_file=ready_file,
        )
        try:
            proc.start()
            # Named in children.json now, not once ready: if we are killed while it starts,
            # the next run on this state dir still finds it and stops it.
            self._record_children(proc)
            ports = proc.wait_ports(timeout_s=60.0)
            if http_key not in ports:
                raise ProcessError(f"{name} reported no {http_key!r} port: {ports}")
            port = ports[http_key]
            proc.wait_ready(f"http://127.0.0.1:{port}{ready_path}", timeout_s=60.0)
        except ProcessError as exc:
            proc.stop()
            raise StackError(f"{name} did not start: {exc}") from exc
        if not set(ports.values()) <= listening_ports(proc.pid):
            proc.stop()
            raise StackError(f"{name} reported ports {ports} but does not listen on them all")
        log.info("%s ready on %s (pid %d)", name, ports, proc.pid)
        return proc, ports

    def _wait_replicas(self, stop: threading.Event) -> None:
        want = self.config.initial_replicas
        deadline = time.monotonic() + self.config.startup_timeout_s
        # Ready means the router routes to them too (it re-reads endpoints.json by polling).
        while self.supervisor.ready < want or self.observe().ready < want:
            if stop.is_set():
                raise StackError("stopped while waiting for the first replicas")
            if time.monotonic() > deadline:
                raise StackError(
                    f"{want - self.supervisor.ready} replica(s) not healthy after "
                    f"{self.config.startup_timeout_s:.0f} s; see {self.state.logs}"
                )
            self._step_processes()
            stop.wait(TICK_S)

    def router_kv_capacities(self) -> dict[str, float] | None:
        """The KV capacity in tokens the router admits against, by endpoint (its
        ``router_endpoint_kv_tokens``; 0: not read yet); None when it does not answer."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(self.router_url + "/metrics", timeout=1.0) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, OSError, UnicodeDecodeError):
            return None
        return {
            sample.labels.get("endpoint", ""): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == names.ROUTER_ENDPOINT_KV_TOKENS
        }

    def _wait_kv_capacity(self, stop: threading.Event) -> None:
        """``--token-admission``: until the router has read every first replica's KV
        capacity, so the load is admitted in tokens from its first request (the router reads
        a new endpoint's at its next discovery round, up to 5 s after it routes to it:
        meanwhile slots alone bound it). A replica that does not state it (a --replica-cmd
        without ``vllm:cache_config_info``) stays bounded by slots: a warning, not an error."""
        if not self.config.waits_for_kv_capacity:
            return
        deadline = time.monotonic() + KV_DISCOVERY_WAIT_S
        while True:
            known = self.router_kv_capacities() or {}
            unread = sorted(url for url, tokens in known.items() if not tokens)
            if len(known) >= self.supervisor.ready and not unread:
                log.info(
                    "router: KV capacity read for every replica: %s",
                    ", ".join(f"{url} {tokens:,.0f} tokens" for url, tokens in known.items()),
                )
                return
            if stop.is_set():
                raise StackError("stopped while the router read the replicas' KV capacity")
            if time.monotonic() > deadline:
                log.warning(
                    "router: no KV capacity read after %.0f s for %s: admitted by slots only "
                    "until the replica states it (vllm:cache_config_info)",
                    KV_DISCOVERY_WAIT_S,
                    ", ".join(unread) or "the replicas",
                )
                return
            self._step_processes()
            stop.wait(0.2)

    def _wait_metric(self, stop: threading.Event, timeout_s: float = 120.0) -> None:
        """Until the scaler answers GetMetrics: Prometheus needs a few scrapes first."""
        assert self.client is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                spec = self.client.metric_spec()
                self.client.metric_value(spec.metric_name)
                return
            except ScalerUnavailable as exc:
                if stop.is_set():
                    raise StackError("stopped while waiting for the scaler's first metric") from exc
                if time.monotonic() > deadline:
                    raise StackError(f"scaler: no metric after {timeout_s:.0f} s: {exc}") from exc
            self._step_processes()
            stop.wait(0.2)

    def _start_autoscaler(self, now_s: float) -> None:
        cfg = self.config
        if cfg.policy in PEERS:
            self._start_peer(now_s)
            return
        assert self.client is not None
        self.autoscaler = Autoscaler(
            scaler=self.client,
            config=autoscale_config(cfg),
            get_replicas=lambda: self.supervisor.desired,
            set_replicas=self.supervisor.set_desired,
            observe=self.observe,
            record=self.state.append_decision,
            wall_clock=time.time,
        )
        self.autoscaler.start(now_s)
        self.client.watch_activation(self.autoscaler.activate)

    def _start_peer(self, now_s: float) -> None:
        """A peer's control plane in place of the KEDA+HPA loop on our scaler (which keeps
        running, for its metrics only: nothing calls it). It reads Prometheus."""
        cfg = self.config
        prometheus = self.prometheus
        if prometheus is None:  # refused by the CLI; a Stack built by hand gets this
            raise StackError(f"--policy {cfg.policy} reads Prometheus, which is not running")
        read = PromReader(
            base_url=lambda: prometheus.url,
            time_scale=cfg.time_scale,
            scrape_interval_s=SCRAPE_INTERVAL_S * cfg.time_scale,
        )
        io = PeerIO(
            read=read,
            get_replicas=lambda: self.supervisor.desired,
            ready_replicas=lambda: self.supervisor.ready,
            set_replicas=self.supervisor.set_desired,
            observe=self.observe,
            record=self.state.append_decision,
            wall_clock=time.time,
        )
        settings = PeerSettings(
            time_scale=cfg.time_scale,
            slots_per_replica=cfg.slots_per_replica,
            min_replicas=cfg.min_replicas,
            max_replicas=cfg.max_replicas,
            hpa_sync_s=cfg.hpa_sync_s,  # seed seconds
        )
        self.peer = build_peer(cfg.policy, settings, io)
        self.peer.start(now_s)

    # --- run --------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        """The main loop until ``stop`` is set; 0."""
        while not stop.is_set():
            now = time.monotonic()
            self._keep_core_alive(now)
            polled = False
            if self.autoscaler is not None:
                polled = self.autoscaler.tick(now)
            elif self.peer is not None:
                polled = self.peer.tick(now)
            elif now >= self._next_poll_s:  # a timeline point on the HPA's phase
                self._next_poll_s = next_due(self._next_poll_s, self.config.hpa_sync_real_s, now)
                polled = True
            self._step_processes()
            self._record_point(force=polled)
            stop.wait(TICK_S)
        return 0

    # --- core processes: restart a dead router, Prometheus or scaler -------------------------
    def _keep_core_alive(self, now: float) -> None:
        """One restart step per core process (the decision is :func:`restart_step`'s)."""
        prom = self.prometheus.process if self.prometheus is not None else None
        for name, proc in (("router", self.router), ("prometheus", prom), ("scaler", self.scaler)):
            if proc is None:
                continue
            alive = proc.poll() is None
            held = not alive and self.state.is_held(name)
            before = self._restarts.get(name, RestartState())
            state, action = restart_step(before, RESTART_POLICY, alive=alive, held=held, now_s=now)
            self._restarts[name] = state
            if action is RestartAction.DIED:
                self._on_core_death(name, proc, state, now)
            elif action is RestartAction.START:
                self._held_logged.discard(name)
                self._restart_core(name, state)
            elif held and name not in self._held_logged:
                self._held_logged.add(name)
                log.warning("%s is held down by %s", name, self.state.path(f"hold/{name}"))
                self._record_restart(name, "held", None, state.failures, None)

    def _on_core_death(
        self, name: str, proc: ManagedProcess, state: RestartState, now: float
    ) -> None:
        code = proc.poll()
        delay = None if state.next_start_s is None else max(0.0, state.next_start_s - now)
        log.error(
            "%s exited (code %s); restarting it in %.1f s (death %d in a row)",
            name,
            code,
            delay or 0.0,
            state.failures,
        )
        try:
            proc.stop(grace_s=2.0)  # the leader is gone: reap it, and stop any member left
        except ProcessError as exc:
            log.error("%s", exc)
        self._record_restart(name, "died", code, state.failures, delay)

    def _restart_core(self, name: str, state: RestartState) -> None:
        try:
            if name == "router":
                self._restart_router()
            elif name == "prometheus":
                self._restart_prometheus()
            else:
                self._restart_scaler()
        except (ProcessError, OSError) as exc:
            # Counted as a death at the next step (the process is not alive): back-off.
            log.error("%s could not be restarted: %s", name, exc)
            self._record_restart(name, "start-failed", None, state.failures, None)
            return
        self._record_children()
        self._record_restart(name, "restarted", None, state.failures, None)

    def _restart_router(self) -> None:
        """Same port (its clients, Prometheus' target and the scaler's direct source know
        it by that address), same endpoints file; not waited for: while it starts,
        ``observe()`` reads no L and the autoscaler's scaler sees its target down."""
        argv = [*inflight_command(), *router_args(self.config, self.state.path(ENDPOINTS))]
        argv[argv.index("--port") + 1] = str(self.router_port)
        proc = ManagedProcess(
            argv, name="router", log_path=self.state.logs / "router.log", grace_s=10.0
        )
        proc.start()
        self.router = proc
        log.info("router restarted on port %d (pid %d)", self.router_port, proc.pid)

    def _restart_prometheus(self) -> None:
        """Same port, same data dir; blocks until /-/ready (about a second; 10 s at most)."""
        assert self.prometheus is not None
        url = self.prometheus.url
        self.prometheus.start(ready_timeout_s=10.0, on_spawn=lambda _p: self._record_children())
        self._published_targets = None  # its config was rewritten: publish replicas again
        log.info("prometheus restarted at %s", self.prometheus.url)
        if self.prometheus.url != url and self.scaler is not None:
            log.warning("prometheus moved to %s; restarting the scaler", self.prometheus.url)
            self.scaler.stop(grace_s=5.0)  # the keeper restarts it with the new URL

    def _restart_scaler(self) -> None:
        """Same ports; not waited for (the autoscaler's calls fail until it answers, which
        changes no replica count). A fresh gRPC client, so no reconnect back-off is left."""
        argv = list(self._scaler_argv)
        # The ports it had (KEDA's address for it must not change), and today's Prometheus.
        for flag, value in (
            ("--grpc-port", str(self.scaler_ports[0])),
            ("--metrics-port", str(self.scaler_ports[1])),
            ("--prometheus-url", self.prometheus.url if self.prometheus else None),
        ):
            if value is not None and flag in argv:
                argv[argv.index(flag) + 1] = value
        proc = ManagedProcess(
            argv, name="scaler", log_path=self.state.logs / "scaler.log", grace_s=10.0
        )
        proc.start()
        self.scaler = proc
        log.info("scaler restarted (pid %d)", proc.pid)
        old = self.client
        self.client = ScalerClient(
            f"127.0.0.1:{self.scaler_ports[0]}", self.config.trigger_metadata
        )
        if self.autoscaler is not None:
            self.autoscaler.scaler = self.client
            self.client.watch_activation(self.autoscaler.activate)
        if old is not None:
            old.close()

    def _record_restart(
        self, name: str, event: str, code: int | None, failures: int, delay_s: float | None
    ) -> None:
        self.state.append_restart(
            RestartRecord(
                t=time.time(),
                process=name,
                event=event,
                code=code,
                failures=failures,
                delay_s=None if delay_s is None else round(delay_s, 3),
            )
        )

    def _step_processes(self) -> None:
        self.supervisor.tick()
        self._record_children()
        urls = tuple(self.supervisor.ready_urls())
        if self.prometheus is not None and urls != self._published_targets:
            self.prometheus.set_targets(REPLICAS_JOB, [u.removeprefix("http://") for u in urls])
            self._published_targets = urls
        self._record_point()

    def _record_children(self, *starting: ManagedProcess) -> None:
        procs = [*self._core_processes(), *starting, *self.supervisor.all_processes]
        groups = tuple(p.pgid for p in procs)
        now = time.monotonic()
        # Also every MEMBERS_REFRESH_S: members (a replica's workers) come after their leader.
        if groups != self._recorded_groups or now >= self._members_recorded_s + MEMBERS_REFRESH_S:
            orphans.record(self.state.path(CHILDREN), procs)
            self._recorded_groups = groups
            self._members_recorded_s = now

    def _record_point(self, force: bool = False) -> None:
        point = (self.supervisor.desired, self.supervisor.ready, self.supervisor.live)
        if force or point != self._last_point:
            self._last_point = point
            self.state.append_timeline(TimelinePoint(time.time(), *point))

    # --- shutdown ---------------------------------------------------------------------------
    def shutdown(self) -> list[str]:
        """Stop everything (reverse order); return the problems found (empty: clean).

        Safe after any failure of :meth:`start`, and a no-op when ``start`` did not take
        the state dir (it starts nothing before that; the dir may be another run's).
        """
        if not self.state.held:
            return []
        problems: list[str] = []
        if self.client is not None:
            self.client.close()
        ports: set[int] = set(self.supervisor.ports_used)
        procs: list[ManagedProcess] = []
        for proc in reversed(self._core_processes()):
            procs.append(proc)
            try:
                proc.stop()
            except ProcessError as exc:
                problems.append(str(exc))
        problems += [f"still alive: {s}" for s in self.supervisor.stop_all()]
        self._record_point()  # the last point: nothing wanted, nothing live
        for proc in procs:
            if proc.alive():
                problems.append(f"still alive: {proc.label} (pgid {proc.pgid})")
        ports |= {p for p in (self.router_port, *self.scaler_ports) if p}
        if self.prometheus is not None:
            ports.add(self.prometheus.port)
        if not problems:
            self.state.path(CHILDREN).unlink(missing_ok=True)
        busy = sorted(p for p in ports if not port_is_free(p))
        if busy:
            problems.append(f"ports still in use: {busy}")
        self.state.release()
        self._close_file_logging()
        return problems

    def _core_processes(self) -> list[ManagedProcess]:
        """Router, Prometheus and scaler (those started so far), in start order."""
        prom = self.prometheus.process if self.prometheus is not None else None
        return [p for p in (self.router, prom, self.scaler) if p is not None]
