"""``inflight bench router --ab A B``: two commits' routers side by side, rounds interleaved.

A wall-clock comparison of two builds is only worth something when both run in the same
minutes on the same machine: on a shared machine the load moves by ±35 % from one minute to
the next. So this starts, for each scenario, every target at once in front of the same
upstream, and measures them in rounds, the order rotating from round to round:

* ``A`` and ``B``: ``inflight router`` from two commits of this repository, each a
  ``git worktree`` (detached, in a temporary folder, removed at the end) put first on
  ``PYTHONPATH``, with this virtual environment; ``.`` is this checkout as it is,
  uncommitted changes included. A router from before ``--ready-file`` binds port 0 too
  and its port is read back from /proc;
* ``vllm-router`` (PyPI's Rust balancer, ``--vllm-router-bin``) and ``nginx`` when
  installed, and ``direct`` (no proxy: what the latency and streaming figures are added
  to).

Scenarios (``--scenarios``): capacity (wrk, c=64, an upstream answering at once: requests/s),
latency (wrk, c=64, an upstream answering in 50 ms: p50/p99), streaming (256 SSE streams:
time to the first event p50/p99, events/s). Printed per round, then the median of the
rounds for each target and the ratios B/A and each router against vllm-router; written as
JSON to ``--out``. ``--instructions`` also counts each tree's instructions a request under
callgrind (the guard's settings: :mod:`inflight.bench.components.instructions`), which no
load can move.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from inflight.bench.components.load import streams
from inflight.bench.components.nginx import start_nginx_static
from inflight.bench.components.procs import INFLIGHT, Stack
from inflight.bench.components.proxies import Start, started_proxies
from inflight.bench.components.upstream import start_upstream
from inflight.bench.components.wrk import run_wrk
from inflight.procs import ManagedProcess

#: Scenarios the A/B mode runs (``balance`` compares dispatch rules, not builds).
AB_SCENARIOS = ("capacity", "latency", "streaming")
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Tree:
    """One side: ``path`` goes first on ``PYTHONPATH`` (None: this checkout as it is)."""

    label: str
    commit: str
    path: Path | None


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@contextlib.contextmanager
def worktrees(commits: Sequence[str], tmp: Path) -> Iterator[list[Tree]]:
    """A detached worktree per commit (``.``: this checkout), removed on the way out."""
    made: list[Path] = []
    trees: list[Tree] = []
    try:
        for i, commit in enumerate(commits):
            side = "AB"[i] if i < 2 else str(i)
            if commit == ".":
                dirty = " + changes" if git("status", "--porcelain", "--untracked-files=no") else ""
                head = git("rev-parse", "--short", "HEAD")
                trees.append(Tree(f"{side} this checkout ({head}{dirty})", f"{head}{dirty}", None))
                continue
            sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
            path = tmp / f"tree-{side}-{sha[:10]}"
            git("worktree", "add", "--detach", str(path), sha)
            made.append(path)
            trees.append(Tree(f"{side} {commit} ({sha[:7]})", sha, path))
        yield trees
    finally:
        for path in made:
            with contextlib.suppress(subprocess.CalledProcessError):
                git("worktree", "remove", "--force", str(path))
        with contextlib.suppress(subprocess.CalledProcessError):
            git("worktree", "prune")


def reports_port(tree: Tree) -> bool:
    """Whether that tree's router takes ``--ready-file`` (commit 7f82a97 on)."""
    cli = (tree.path or REPO) / "router" / "cli.py"
    return not cli.exists() or "ready_file" in cli.read_text()


def start_tree_router(stack: Stack, tree: Tree, upstreams: list[str]) -> tuple[str, ManagedProcess]:
    """That tree's ``inflight router`` (4 slots per endpoint, its defaults otherwise)."""
    env = {"PYTHONPATH": str(tree.path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return stack.start_ours(
        [*INFLIGHT, "router", "--host", "127.0.0.1", "--port", "0",
         "--slots-per-endpoint", "4", "--endpoints", ",".join(upstreams)],
        f"router-{tree.label.split()[0]}-{len(stack.procs)}",
        "/health",
        env=env if tree.path is not None else None,
        reports_port=reports_port(tree),
    )  # fmt: skip


def targets(
    stack: Stack, trees: list[Tree], upstreams: list[str], vllm_router_bin: str | None,
    nginx: bool,
) -> contextlib.AbstractContextManager[dict[str, str]]:  # fmt: skip
    """Every target started side by side in front of ``upstreams``: {name: url}."""
    ours: list[tuple[str, Start]] = [
        (tree.label, functools.partial(start_tree_router, stack, tree, upstreams)) for tree in trees
    ]
    return started_proxies(stack, upstreams, ours, nginx, vllm_router_bin)


Measure = Callable[[str], dict[str, float]]


Show = Callable[[str, dict[str, float]], str]


def rounds(
    urls: dict[str, str], n: int, measure: Measure, show: Show
) -> dict[str, list[dict[str, float]]]:
    """``n`` rounds over every target; round ``r`` starts at the ``r``-th target, so no
    target always goes first (or right after the same one)."""
    names = list(urls)
    out: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(n):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            result = measure(urls[name])
            out[name].append(result)
            print(f"  round {r + 1}  {name:36s} {show(name, result)}", flush=True)
    return out


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def summarize(
    scenario: str, runs: dict[str, list[dict[str, float]]], trees: list[Tree]
) -> dict[str, object]:
    """Medians per target, and the ratios that answer the A/B question."""
    keys = {
        "capacity": ["rps"],
        "latency": ["p50_ms", "p99_ms"],
        "streaming": ["ttfb_p50_ms", "ttfb_p99_ms", "events_per_s", "event_delay_p99_ms"],
    }[scenario]
    medians = {name: {k: median(rs, k) for k in keys} for name, rs in runs.items()}
    a, b = trees[0].label, trees[1].label
    out: dict[str, object] = {"medians": medians}
    print(f"  -- {scenario}: median of {len(runs[a])} rounds")
    if scenario == "capacity":
        ranges = {
            n: (min(r["rps"] for r in rs), max(r["rps"] for r in rs)) for n, rs in runs.items()
        }
        for name, m in medians.items():
            lo, hi = ranges[name]
            print(f"     {name:36s} {m['rps']:9.0f} req/s  (rounds {lo:.0f}..{hi:.0f})")
        ratios = {"B/A": medians[b]["rps"] / medians[a]["rps"]}
        if "vllm-router" in medians:
            for tree in trees[:2]:
                ratios[f"{tree.label[0]}/vllm-router"] = (
                    medians[tree.label]["rps"] / medians["vllm-router"]["rps"]
                )
        out["every_round_of_B_above_every_round_of_A"] = ranges[b][0] > ranges[a][1]
        out["every_round_of_A_above_every_round_of_B"] = ranges[a][0] > ranges[b][1]
    else:
        base = medians["direct"]
        for name, m in medians.items():
            added = "  ".join(
                f"{k} {m[k]:8.2f} ({m[k] - base[k]:+7.2f})"
                if k.endswith("_ms")
                else f"{k} {m[k]:8.0f}"
                for k in keys
            )
            print(f"     {name:36s} {added}")
        k99 = "p99_ms" if scenario == "latency" else "ttfb_p99_ms"
        ratios = {}
        added_a = medians[a][k99] - base[k99]
        added_b = medians[b][k99] - base[k99]
        if added_a > 0:
            ratios[f"B/A added {k99}"] = added_b / added_a
        if "nginx" in medians and scenario == "streaming":
            out["B_ttfb_p99_at_or_below_nginx"] = medians[b][k99] <= medians["nginx"][k99]
    for name, value in ratios.items():
        print(f"     {name:36s} {value:6.3f}x")
    out["ratios"] = ratios
    return out


def count_instructions(trees: list[Tree], workdir: Path) -> dict[str, dict[str, float | int | str]]:
    """Each tree's instructions a request (callgrind, the guard's settings)."""
    from inflight.bench.components import instructions

    out: dict[str, dict[str, float | int | str]] = {}
    for tree in trees:
        count = instructions.guard_count(workdir / f"instr-{len(out)}", tree.path)
        out[tree.label] = count.as_dict()
        print(f"  instructions  {tree.label:34s} {count.per_request:10,.0f} a request "
              f"({count.gc_per_request:,.0f} in the garbage collector)", flush=True)  # fmt: skip
    a, b = (out[t.label]["per_request"] for t in trees[:2])
    print(f"  instructions  B/A {float(b) / float(a):.3f}x")
    return out


def main(args: argparse.Namespace, vllm_router_bin: str | None, have_nginx: bool) -> int:
    wanted = [s for s in args.scenarios if s in AB_SCENARIOS]
    if not wanted:
        print(f"inflight bench router: error: --ab runs {', '.join(AB_SCENARIOS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    out_path: Path = args.out or (
        Path("results")
        / "local"
        / time.strftime("bench_router_ab-%Y%m%dT%H%M%SZ.json", time.gmtime())
    )
    if out_path.exists():
        print(f"inflight bench router: error: {out_path} exists; results are never "
              "overwritten (pass another --out)", file=sys.stderr)  # fmt: skip
        return 2
    doc: dict[str, object] = {
        "meta": {
            "ab": list(args.ab), "rounds": args.rounds, "duration_s": args.duration_s,
            "cpus": os.cpu_count(), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "vllm_router": vllm_router_bin, "nginx": have_nginx,
        },
    }  # fmt: skip
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-router-ab-") as tmp:
        work = Path(tmp)
        stack = Stack(work)
        with worktrees(args.ab, work) as trees:
            doc["trees"] = [{"label": t.label, "commit": t.commit} for t in trees]
            for t in trees:
                print(f"{t.label}: {t.path or REPO}")
            if args.instructions:
                results["instructions"] = count_instructions(trees, work)
            try:
                for scenario in wanted:
                    print(f"== {scenario}", flush=True)
                    results[scenario] = run_scenario(
                        scenario, stack, trees, args, vllm_router_bin, have_nginx
                    )
                    stack.stop_all()
            finally:
                stack.stop_all()
    doc["results"] = results
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=2))
    print(f"\nwritten: {out_path}")
    return 0


def run_scenario(
    scenario: str, stack: Stack, trees: list[Tree], args: argparse.Namespace,
    vllm_router_bin: str | None, have_nginx: bool,
) -> dict[str, object]:  # fmt: skip
    duration = args.duration_s
    measure: Measure
    if scenario in ("capacity", "latency"):
        if scenario == "capacity":
            upstream = start_nginx_static(stack) if have_nginx else start_upstream(stack, "instant")
        else:
            upstream = start_upstream(stack, "delay", delay_s=0.05)

        def measure(url: str) -> dict[str, float]:
            return run_wrk(url, 64, duration, stack.workdir)

    else:
        upstream = start_upstream(stack, "sse", events=100, interval_s=0.01)

        def measure(url: str) -> dict[str, float]:
            return asyncio.run(streams(url, 256, duration))

    def show(_name: str, r: dict[str, float]) -> str:
        if scenario == "capacity":
            return f"{r['rps']:9.0f} req/s  (non-2xx {r['non_2xx']:.0f})"
        if scenario == "latency":
            return f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms"
        return (f"first event p50 {r['ttfb_p50_ms']:6.1f} ms  p99 {r['ttfb_p99_ms']:6.1f} ms"
                f"  {r['events_per_s']:8.0f} events/s  failures {r['failures']:.0f}")  # fmt: skip

    with targets(stack, trees, [upstream], vllm_router_bin, have_nginx) as urls:
        if scenario == "capacity":
            urls.pop("direct")  # the harness's ceiling, not a router: kept out of the rounds
        runs = rounds(urls, args.rounds, measure, show)
    return {"rounds": runs, **summarize(scenario, runs, trees)}
