"""``inflight up``: the one wiring site of the single-machine stack.

Parses and validates flags (errors name the flag), turns seed-time durations into real
seconds with ``--time-scale``, and runs :class:`orchestrator.stack.Stack` until Ctrl-C or
SIGTERM. Heavy imports stay inside :func:`run` so ``inflight --help`` stays fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = "state/up"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "up",
        help="the whole stack on this machine: replicas, router, Prometheus, scaler, autoscaling",
        description=(
            "Start replicas (the emulator by default), the router, Prometheus (when installed), "
            "the scaler and a local KEDA+HPA loop; print the router URL and stop everything on "
            "Ctrl-C or SIGTERM. Durations (--polling-interval-s, --cooldown-s, --hpa-sync-s) "
            "are in seed seconds and multiplied by --time-scale, like every period of the stack."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = p.add_argument
    add("--state-dir", default=DEFAULT_STATE_DIR, help="state, logs and the replica timeline")
    add("--port", type=int, default=0, help="router port (0: a free port from the OS)")
    add("--time-scale", type=float, default=1.0, help="multiplies every duration (0.1: 10x)")
    add(
        "--policy",
        choices=("saturation", "qps"),
        default="saturation",
        help="scaler policy (qps: the seed's flawed rule, a benchmark baseline)",
    )
    add("--min-replicas", type=int, default=1, help="KEDA minReplicaCount (0: scale to zero)")
    add("--max-replicas", type=int, default=2, help="KEDA maxReplicaCount")
    add("--slots-per-replica", type=int, default=4, help="vLLM --max-num-seqs per replica")
    add(
        "--replicas",
        type=int,
        default=None,
        help="replicas at start (default max(1, --min-replicas)); the count --no-autoscale keeps",
    )
    add("--no-autoscale", action="store_true", help="keep --replicas fixed (for measurement)")
    add("--polling-interval-s", type=float, default=30.0, help="KEDA pollingInterval (IsActive)")
    add("--cooldown-s", type=float, default=300.0, help="KEDA cooldownPeriod before zero")
    add("--hpa-sync-s", type=float, default=15.0, help="HPA sync period: metric reads")
    add(
        "--replica-cmd",
        default=None,
        help="replica command with a {port} placeholder, e.g. "
        "'vllm serve MODEL --port {port} --max-num-seqs 4' (default: the emulator)",
    )
    add("--served-model-name", default=None, help="model name of the default emulator replicas")
    add(
        "--no-prometheus",
        action="store_true",
        help="do not start Prometheus even if installed (the scaler reads the router)",
    )
    add(
        "--startup-timeout-s",
        type=float,
        default=900.0,
        help="real seconds a replica may take to answer /health",
    )
    add("--log-level", default="info", help="debug|info|warning|error")
    p.set_defaults(func=run)


class UsageError(ValueError):
    pass


def build_config(args: argparse.Namespace) -> Any:
    """Validate flags into an UpConfig (raises UsageError naming the flag)."""
    from inflight.prom import find_prometheus
    from orchestrator.stack import UpConfig
    from orchestrator.supervisor import SupervisorConfig, check_replica_command

    def positive(flag: str, value: float) -> float:
        if not value > 0:
            raise UsageError(f"{flag} must be > 0, got {value}")
        return value

    ts = positive("--time-scale", args.time_scale)
    if args.min_replicas < 0:
        raise UsageError(f"--min-replicas must be >= 0, got {args.min_replicas}")
    if args.max_replicas < max(1, args.min_replicas):
        raise UsageError(
            f"--max-replicas ({args.max_replicas}) must be >= 1 and >= --min-replicas "
            f"({args.min_replicas})"
        )
    if args.slots_per_replica < 1:
        raise UsageError(f"--slots-per-replica must be >= 1, got {args.slots_per_replica}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {args.port}")
    if args.no_autoscale:
        if args.replicas is None:
            raise UsageError("--no-autoscale needs --replicas N (the frozen replica count)")
        if args.replicas < 1:
            raise UsageError(f"--replicas must be >= 1 with --no-autoscale, got {args.replicas}")
        initial = args.replicas
    else:
        initial = max(1, args.min_replicas) if args.replicas is None else args.replicas
        if not args.min_replicas <= initial <= args.max_replicas:
            raise UsageError(
                f"--replicas ({initial}) must lie within --min-replicas..--max-replicas "
                f"({args.min_replicas}..{args.max_replicas})"
            )
    if args.replica_cmd is not None:
        try:
            cmd = shlex.split(args.replica_cmd)
        except ValueError as exc:
            raise UsageError(f"--replica-cmd: {exc}") from exc
    else:
        from emulator.cli import DEFAULT_MODEL

        cmd = [
            sys.executable, "-m", "inflight", "emulator",
            "--host", "127.0.0.1", "--port", "0", "--ready-file", "{ready_file}",
            "--max-num-seqs", str(args.slots_per_replica),
            "--time-scale", str(ts),
            "--served-model-name", args.served_model_name or DEFAULT_MODEL,
        ]  # fmt: skip
    try:
        check_replica_command(cmd)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    use_prometheus = not args.no_prometheus and find_prometheus() is not None
    return UpConfig(
        state_dir=Path(args.state_dir).resolve(),
        replica_cmd=tuple(cmd),
        router_port=args.port,
        time_scale=ts,
        policy=args.policy,
        slots_per_replica=args.slots_per_replica,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        initial_replicas=initial,
        autoscale=not args.no_autoscale,
        hpa_sync_s=positive("--hpa-sync-s", args.hpa_sync_s) * ts,
        polling_interval_s=positive("--polling-interval-s", args.polling_interval_s) * ts,
        cooldown_s=positive("--cooldown-s", args.cooldown_s) * ts,
        use_prometheus=use_prometheus,
        supervisor=SupervisorConfig(
            startup_timeout_s=positive("--startup-timeout-s", args.startup_timeout_s)
        ),
        startup_timeout_s=args.startup_timeout_s,
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except UsageError as exc:
        print(f"inflight up: error: {exc}", file=sys.stderr)
        return 2

    import logging
    import signal
    import threading

    from inflight import logs
    from inflight.prom import find_prometheus
    from orchestrator.stack import Stack, StackError
    from orchestrator.state import StateDirBusy

    logs.configure(args.log_level)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("inflight.up").info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if not config.use_prometheus and not args.no_prometheus and find_prometheus() is None:
        print(
            "inflight up: prometheus is not installed; the scaler reads the router directly "
            "(install it: apt-get install -y --no-install-recommends prometheus)",
            file=sys.stderr,
        )
    stack = Stack(config)
    code = 1
    try:
        info = stack.start(stop)
        mode = (
            f"frozen at {config.initial_replicas} replica(s)"
            if not config.autoscale
            else f"autoscaling {config.min_replicas}..{config.max_replicas} on {config.policy}"
        )
        prom = info.prometheus_url or "not running (the scaler reads the router directly)"
        print(
            f"inflight up: ready ({mode}, time-scale {config.time_scale})\n"
            f"  router:     {info.router_url}\n"
            f"  prometheus: {prom}\n"
            f"  scaler:     {info.scaler_address} (gRPC)\n"
            f"  state:      {config.state_dir}\n"
            "Ctrl-C stops everything.",
            flush=True,
        )
        code = stack.run(stop)
    except StateDirBusy as exc:
        print(f"inflight up: error: {exc}", file=sys.stderr)
        return 1  # nothing was started (and the state dir is another run's)
    except (StackError, OSError) as exc:
        print(f"inflight up: error: {exc}", file=sys.stderr)
    finally:
        # Whatever went wrong, even an unexpected error, the children run in their own
        # sessions and would outlive us: stop every one of them.
        problems = stack.shutdown()
        for problem in problems:
            print(f"inflight up: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("inflight up: stopped; no process left running, every port free", flush=True)
    return code
