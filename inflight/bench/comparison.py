"""What the two comparisons (``inflight bench compare``: the closed-loop sweep,
``inflight.bench.closedloop.compare``, and the open-loop scenarios,
``inflight.bench.openloop.compare``) share: one fresh ``inflight up`` per run
(:func:`on_stack`), and how far a comparison got when Ctrl-C or SIGTERM stops it
(:class:`Progress`, :func:`interruptible`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from inflight import interrupt
from inflight.bench import cpu, proctree
from inflight.bench.stack import Stack
from inflight.measure.results import write_new
from inflight.planes.policy_catalogue import Policy

T = TypeVar("T")


def on_stack(
    policy: Policy,
    args: argparse.Namespace,
    time_scale: float,
    state_dir: Path,
    label: str,
    body: Callable[[Stack], T],
    *,
    max_replicas: int,
    min_replicas: int | None = None,
    extra_args: Sequence[str] = (),
) -> tuple[T, dict[str, Any]]:
    """Start a fresh ``inflight up`` for ``policy``, run ``body`` on it, stop it and prove it
    gone; return ``body``'s result and the ``stack`` and ``cpu`` facts of the run."""
    stack = Stack(
        policy=policy,
        state_dir=state_dir,
        time_scale=time_scale,
        max_replicas=max_replicas,
        extra_args=(*extra_args, *args.up_arg),
        min_replicas=min_replicas,
    )
    up_args = [*policy.up_args(max_replicas, min_replicas), *stack.extra_args]
    print(f"== {label}: starting inflight up ({' '.join(up_args)})", file=sys.stderr, flush=True)
    wall0 = time.monotonic()
    # One try from the start: Ctrl-C or SIGTERM (inflight.interrupt) anywhere in it stops the
    # stack.
    try:
        stack.start(args.stack_timeout_s)
        cpu_before = proctree.tree_cpu_s(stack.pid)
        machine_before = cpu.mark()
        wall0 = time.monotonic()
        result = body(stack)
        stack.snapshot()
        stack_cpu_s = proctree.tree_cpu_s(stack.pid) - cpu_before
    finally:
        wall_s = time.monotonic() - wall0
        with interrupt.deferred():  # a signal during the stop waits for this line too
            report = stack.stop()
            print(
                f"== {label}: stopped; clean={report.get('clean')} wall={wall_s:.0f}s",
                file=sys.stderr,
                flush=True,
            )
    loadgen_s, busy = cpu.since(machine_before, cpu.mark())
    extra = {
        "stack": {**report, "stack_info": stack.info, "state_dir": str(state_dir)},
        "cpu": {
            "wall_s": round(wall_s, 1),
            "stack_cores": round(stack_cpu_s / wall_s, 3),
            "loadgen_cores": round(loadgen_s / wall_s, 3),
            "machine_busy": None if busy is None else round(busy, 3),
            "cores": cpu.cores(),
        },
    }
    return result, extra


def unclean_reason(report: dict[str, Any]) -> str | None:
    """Why a stopped stack makes its run invalid (None when it stopped clean)."""
    if report.get("clean"):
        return None
    return (
        f"stack left processes {report.get('pids_left_after_stop')} or ports "
        f"{report.get('ports_busy_after_stop')} after stop"
    )


@dataclasses.dataclass
class Progress:
    """How far a comparison got: what the line of an interrupted one says."""

    out: Path | None = None
    state_root: Path | None = None
    running: str | None = None  # the policy (run) whose stack runs now
    kept: list[str] = dataclasses.field(default_factory=list)  # files written, whole
    compared: bool = False  # comparison.json and comparison.md written

    def write(self, path: Path, text: str, force: bool) -> None:
        """Write a result file whole: a signal that arrives meanwhile waits for the end."""
        with interrupt.deferred():
            write_new(path, text, force)
            self.kept.append(path.name)

    def interrupted(self, exc: interrupt.Interrupted) -> int:
        """Print the one line of an interrupted comparison; its exit code (130, 143)."""
        if self.out is None:
            line = "nothing was started"
        else:
            during = (
                f"during {self.running} (its stack is stopped, its partial run not written)"
                if self.running is not None
                else "between runs"
            )
            kept = f"kept in {self.out}: {', '.join(self.kept)}" if self.kept else "no file kept"
            line = f"{during}; {kept}"
            if not self.compared:
                line += "; no comparison.json: the comparison is incomplete"
            line += f"; stack logs in {self.state_root}"
        print(f"inflight bench compare: interrupted by {exc.name} {line}", file=sys.stderr,
              flush=True)  # fmt: skip
        return exc.exit_code


def interruptible(
    main: Callable[[argparse.Namespace, Progress], int], args: argparse.Namespace
) -> int:
    """Run a comparison's ``main``; Ctrl-C or SIGTERM stop it (:mod:`inflight.interrupt`): the
    running stack is stopped by its ``finally``, then one line and exit code 130 or 143."""
    progress = Progress()
    with interrupt.handled():
        try:
            return main(args, progress)
        except interrupt.Interrupted as exc:
            return progress.interrupted(exc)
