"""``inflight sim generalize``: a policy judged on N random draws, beside every peer.

Each seed is one draw (:mod:`inflight.sim.draws`: a workload from ServeGen's production
statistics or a trace window, a shape, a load, a start-up and an SLO, warm or ``--cold``).
The draw's warm-up and window are written as an inflight JSONL trace (``draws/seed-S/
draw.jsonl``) and judged by ``inflight sim compare`` itself, run as a child process on it
(``--trace-start-s``/``--trace-warmup-s``: the warm-up replayed unmeasured), with the
policy, the peers and the static frontier ``fixed:1 … fixed:MAX`` on the same requests; its
``comparison.json`` gives each policy's frontier gap and the fleets that dominate it
(:mod:`inflight.measure.frontier`). This module only draws, runs and gathers:
:func:`summarize` is the distribution over the draws (median, p10, worst gap in points;
share of draws a fixed fleet dominates; share of draws the policy's gap beats each peer's),
over every draw and again over the **meetable** ones: those where some fixed fleet meets the
SLO for at least :data:`MEETABLE_ATTAINMENT` of the requests. A draw no fleet comes near
(ServeGen's batch-like clients send clumps of thousands of requests at once) tells no policy
from another: every gap there is a few points of almost nothing.

**Seeds are named before the run, and the two uses never share one**: ``--purpose choose``
takes seeds below :data:`REPORT_SEEDS_FROM`, ``--purpose report`` seeds from it on; the
report (``generalize.json``, ``generalize.md``) records the purpose, the seeds and what
each draw was. The out-dir is never overwritten.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inflight import interrupt
from inflight.measure.results import ResultFileExists, new_out_dir, write_new
from inflight.measure.stats import percentile
from inflight.planes.policy_catalogue import OPEN_LOOP_POLICIES, parse_policies
from inflight.procs import inflight_command
from inflight.sim.draws import SHAPES, WARMUP_S, Draw, draw
from inflight.workload.trace import write_trace

SCHEMA = "inflight-sim-generalize/1"
PURPOSES = ("choose", "report")
REPORT_SEEDS_FROM = 1_000_000  # choose: seeds 0 … 999,999; report: 1,000,000 on
SIM_SEED = "1"  # the simulator's own seed (the router's ties) on every draw
DEFAULT_MAX_REPLICAS = 8
# A draw is meetable when its best fixed fleet meets the SLO for at least this share of
# its requests (a definition of the report, not a setting of any policy).
MEETABLE_ATTAINMENT = 0.5
STOPPED = -1  # a draw's exit code when a signal stopped the command before its run began


def default_peers(policy: str) -> str:
    """The open-loop comparison's autoscalers other than ``policy`` (its fixed fleet is
    the frontier's)."""
    return ",".join(
        p.name for p in parse_policies(OPEN_LOOP_POLICIES.replace("MAX", "1"))
        if not p.frozen and p.name != policy
    )  # fmt: skip


def check_seeds(purpose: str, seeds: Sequence[int]) -> None:
    """ValueError unless every seed lies in ``purpose``'s set (module docstring)."""
    if purpose not in PURPOSES:
        raise ValueError(f"--purpose: one of {', '.join(PURPOSES)}, got {purpose!r}")
    lo, hi = (0, REPORT_SEEDS_FROM) if purpose == "choose" else (REPORT_SEEDS_FROM, None)
    bad = [s for s in seeds if s < lo or (hi is not None and s >= hi)]
    if bad:
        span = f"{lo}–{REPORT_SEEDS_FROM - 1}" if hi else f">= {REPORT_SEEDS_FROM}"
        raise ValueError(
            f"--seeds-from: --purpose {purpose} draws seeds {span} (the other purpose's are "
            f"kept apart), got {bad[0]}"
        )


def compare_args(d: Draw, trace: Path, policies: str, out: Path) -> list[str]:
    """``inflight sim compare``'s arguments for draw ``d`` written at ``trace``."""
    return [
        "sim", "compare", "--trace", str(trace),
        "--trace-start-s", f"{d.warmup_s!r}", "--trace-warmup-s", f"{d.warmup_s!r}",
        "--trace-duration-s", f"{d.duration_s!r}",
        "--min-replicas", "1", "--max-replicas", str(d.max_replicas),
        "--startup-s", f"{d.startup_s:g}",
        "--slo-ttft-s", f"{d.slo_ttft_s:g}", "--slo-tpot-s", f"{d.slo_tpot_s:g}",
        "--seeds", SIM_SEED, "--policies", policies, "--out-dir", str(out),
    ]  # fmt: skip


def write_draw(d: Draw, folder: Path) -> Path:
    """The draw as one inflight JSONL trace: the warm-up, then the window after it."""
    folder.mkdir(parents=True)
    shifted = [type(r)(r.t_s + d.warmup_s, r.prompt_tokens, r.max_tokens) for r in d.requests]
    path = folder / "draw.jsonl"
    write_trace(path, [*d.warmup, *shifted])
    return path


class _Children:
    """The ``inflight sim compare`` children running now, each in its own process group, so
    that SIGINT or SIGTERM (:mod:`inflight.interrupt`) stops every one of them and no new one
    starts: the worker threads only wait on them, and the signal reaches the main thread
    alone. No lock: the main thread sets ``stopping`` before it reads the children, and a
    worker reads ``stopping`` again after it adds its child, so a child started as the stop
    began is stopped by one of the two (set operations are atomic)."""

    def __init__(self) -> None:
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    def run(self, argv: list[str], log: Path) -> int:
        """One child, its output in ``log``; its exit code (STOPPED when not started)."""
        if self._stopping:
            return STOPPED
        with log.open("w") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._procs.add(proc)
        try:
            if self._stopping:
                _stop_group(proc)
            return proc.wait()
        finally:
            self._procs.discard(proc)
            if proc.poll() is None:
                _stop_group(proc)

    def stop_all(self) -> None:
        """SIGTERM every child's group and reap it; start no more."""
        self._stopping = True
        for proc in list(self._procs):
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()


def _figures(run: Mapping[str, Any]) -> dict[str, Any]:
    gap = run.get("frontier_gap")
    return {
        "slo_attainment": run.get("slo_attainment"),
        "replica_seconds": run.get("replica_seconds"),
        "replica_seconds_ratio": run.get("replica_seconds_ratio"),
        "frontier_gap_points": None if gap is None else round(100 * gap, 3),
        "dominated_by_fixed": list(run.get("dominated_by_fixed") or []),
    }


def best_fixed(comparison: Mapping[str, Any]) -> float | None:
    """The best SLO attainment of a comparison's fixed fleets (its static frontier)."""
    fleets = (comparison.get("frontier") or {}).get("fleets") or {}
    found = [f["slo_attainment"] for f in fleets.values() if f.get("slo_attainment") is not None]
    return max(found) if found else None


def meetable(draws: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The draws where some fixed fleet meets the SLO for :data:`MEETABLE_ATTAINMENT` of the
    requests or more."""
    return [d for d in draws if (d.get("best_fixed_attainment") or 0.0) >= MEETABLE_ATTAINMENT]


def summarize(draws: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Per policy over the draws judged: the frontier gap's mean (the choose draws' criterion),
    median, p10 and worst (points), the share of draws a fixed fleet dominates it, and (the
    first name against each other) the share of draws its gap beats theirs."""
    judged = [d for d in draws if d.get("policies")]
    out: dict[str, Any] = {}
    for name in names:
        gaps = [d["policies"][name]["frontier_gap_points"] for d in judged]
        known = [g for g in gaps if g is not None]
        dominated = [bool(d["policies"][name]["dominated_by_fixed"]) for d in judged]
        out[name] = {
            "draws": len(known),
            "gap_mean": round(statistics.fmean(known), 3) if known else None,
            "gap_median": round(statistics.median(known), 3) if known else None,
            "gap_p10": round(percentile(known, 10), 3) if known else None,
            "gap_worst": min(known) if known else None,
            "share_dominated": round(sum(dominated) / len(judged), 4) if judged else None,
        }
    first, peers = names[0], names[1:]

    def beats(d: Mapping[str, Any], peer: str) -> bool:
        a = d["policies"][first]["frontier_gap_points"]
        b = d["policies"][peer]["frontier_gap_points"]
        return a is not None and (b is None or a > b)

    for peer in peers:
        out[peer][f"beaten_by_{first}"] = (
            round(sum(beats(d, peer) for d in judged) / len(judged), 4) if judged else None
        )
    if judged and peers:
        out[first]["beats_every_peer"] = round(
            sum(all(beats(d, p) for p in peers) for d in judged) / len(judged), 4
        )
    return out


def by_shape(draws: Sequence[Mapping[str, Any]], policy: str) -> dict[str, Any]:
    """:func:`summarize` of ``policy`` alone over each shape's draws (ramp, step, decline,
    burst; a trace's own), in :data:`inflight.sim.draws.SHAPES` order, then the others
    by name: where its gaps and dominations come from."""
    shapes: dict[str, list[Mapping[str, Any]]] = {}
    for d in draws:
        shapes.setdefault(d["draw"]["shape"], []).append(d)
    order = sorted(shapes, key=lambda k: (SHAPES.index(k) if k in SHAPES else len(SHAPES), k))
    return {k: summarize(shapes[k], [policy])[policy] for k in order}


def markdown(doc: Mapping[str, Any]) -> str:
    m = doc["meta"]
    seeds = m["seeds"]
    lines = [
        f"# Generalization: `{m['policy']}` on {len(seeds)} draws ({m['mode']})",
        "",
        f"`{' '.join(m['command'])}`",
        "",
        f"Purpose: **{m['purpose']}**. Seeds {seeds[0]}–{seeds[-1]} (named before the run; "
        f"{m['seed_rule']}). Every draw here was used to {m['purpose']} and for nothing else. "
        f"Frontier gap: attainment minus the static frontier's (fixed:1 … "
        f"fixed:{m['max_replicas']}) at the same replica-seconds, in points.",
        "",
        *_summary_table(doc["summary"], m["policy"]),
    ]
    if "summary_meetable" in doc:
        n = len(meetable(doc["draws"]))
        lines += ["", f"### The {n} meetable draws", "",
                  f"Those where some fixed fleet meets the SLO for at least "
                  f"{_share(m['meetable_attainment'])} of the requests (column 'best fixed' "
                  f"below); the others tell no policy from another.", "",
                  *_summary_table(doc["summary_meetable"], m["policy"])]  # fmt: skip
    if "meetable_by_shape" in doc:
        lines += ["", f"### `{m['policy']}` on the meetable draws, by shape", "",
                  *_summary_table(doc["meetable_by_shape"], m["policy"], "shape")]  # fmt: skip
    lines += ["", "## The draws", "", "| seed | source | shape | window | start-up | SLO | "
              f"requests | {m['policy']}: attainment, cost ÷ fixed:MAX, gap | dominated by "
              "| best fixed |", "|---|---|---|---:|---:|---|---:|---|---|---:|"]  # fmt: skip
    for d in doc["draws"]:
        w = d["draw"]
        p = (d.get("policies") or {}).get(m["policy"])
        fig = "failed: see " + d["dir"] + "/compare.log" if p is None else (
            f"{_share(p['slo_attainment'])}, {_num(p['replica_seconds_ratio'])}, "
            f"{_pts(p['frontier_gap_points'])}"
        )  # fmt: skip
        lines.append(
            f"| {w['seed']} | {w['source']} | {w['shape']} | {w['duration_s']:g} s | "
            f"{w['startup_s']:g} s | {w['slo']['ttft_s']:g} s / {1000 * w['slo']['tpot_s']:g} ms "
            f"| {w['requests']} | {fig} | "
            f"{', '.join(p['dominated_by_fixed']) if p else ''} | "
            f"{_share(d.get('best_fixed_attainment'))} |"
        )
    return "\n".join(lines) + "\n"


def _summary_table(summary: Mapping[str, Any], policy: str, row: str = "policy") -> list[str]:
    lines = [
        f"| {row} | draws | gap mean | gap median | gap p10 | worst | dominated by a fixed "
        f"fleet | beaten by {policy} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summary.items():
        beaten = s.get(f"beaten_by_{policy}")
        lines.append(
            f"| {name} | {s['draws']} | {_mean(s.get('gap_mean'))} | {_pts(s['gap_median'])} | "
            f"{_pts(s['gap_p10'])} | {_pts(s['gap_worst'])} | {_share(s['share_dominated'])} | "
            f"{'–' if beaten is None else _share(beaten)} |"
        )
    every = summary.get(policy, {}).get("beats_every_peer")
    if every is not None:
        lines += ["", f"`{policy}` beats every peer's gap on {_share(every)} of these draws."]
    return lines


def _pts(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}"


def _mean(v: float | None) -> str:
    return "–" if v is None else f"{v:+.2f}"


def _share(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def run(a: argparse.Namespace) -> int:
    if a.draws < 1:
        raise ValueError(f"--draws: must be >= 1, got {a.draws}")
    if a.jobs < 1:
        raise ValueError(f"--jobs: must be >= 1, got {a.jobs}")
    seeds = list(range(a.seeds_from, a.seeds_from + a.draws))
    check_seeds(a.purpose, seeds)
    peers = default_peers(a.policy) if a.peers is None else a.peers
    names = [p.name for p in parse_policies(",".join(x for x in (a.policy, peers) if x))]
    if any(fleet.startswith("fixed:") for fleet in names):
        raise ValueError("--policy, --peers: autoscalers only (the fixed fleets are the frontier)")
    traces = [Path(t) for t in a.trace or ()]
    out = new_out_dir(a.out_dir, "generalization results", False)
    jobs = []
    for seed in seeds:
        d = draw(seed, a.max_replicas, a.cold, traces, a.duration_s, a.warmup_s)
        folder = out / "draws" / f"seed-{seed}"
        argv = compare_args(d, write_draw(d, folder), ",".join(names), folder / "compare")
        write_new(folder / "draw.json", json.dumps({**d.describe(),
                  "command": ["inflight", *argv]}, indent=1) + "\n", False)  # fmt: skip
        jobs.append((d, folder, argv))
    children = _Children()
    with interrupt.handled(), ThreadPoolExecutor(max_workers=a.jobs) as pool:
        try:
            codes = list(
                pool.map(
                    lambda j: children.run(inflight_command(*j[2]), j[1] / "compare.log"), jobs
                )
            )
        except interrupt.Interrupted:
            children.stop_all()  # before the pool's exit waits on its threads
            pool.shutdown(cancel_futures=True)
            raise
    rows = []
    for (d, folder, argv), code in zip(jobs, codes, strict=True):
        row: dict[str, Any] = {
            "draw": d.describe(),
            "dir": str(folder.relative_to(out)),
            "command": ["inflight", *argv],
            "exit_code": code,
        }
        comparison = folder / "compare" / "comparison.json"
        if code == 0 and comparison.exists():
            doc = json.loads(comparison.read_text())
            row["policies"] = {n: _figures(doc["runs"][n]) for n in names}
            row["best_fixed_attainment"] = best_fixed(doc)
        rows.append(row)
        print(f"seed {d.seed}: {d.source} {d.shape}, exit {code}", file=sys.stderr)
    meta = {
        "schema": SCHEMA,
        "created_at": None,  # no clock is read
        "command": ["inflight", *sys.argv[1:]],
        "purpose": a.purpose,
        "seeds": seeds,
        "seed_rule": f"choose: seeds below {REPORT_SEEDS_FROM}; report: from it on",
        "mode": "cold" if a.cold else "warm",
        "policy": a.policy,
        "peers": names[1:],
        "max_replicas": a.max_replicas,
        "traces": [str(t) for t in traces],
        "duration_s": a.duration_s,
        "warmup_s": 0.0 if a.cold else a.warmup_s,
        "draws_failed": [r["draw"]["seed"] for r in rows if "policies" not in r],
    }
    doc = {
        "meta": {**meta, "meetable_attainment": MEETABLE_ATTAINMENT},
        "summary": summarize(rows, names),
        "summary_meetable": summarize(meetable(rows), names),
        "meetable_by_shape": by_shape(meetable(rows), names[0]),
        "draws": rows,
    }
    write_new(out / "generalize.json", json.dumps(doc, indent=1) + "\n", False)
    md = markdown(doc)
    write_new(out / "generalize.md", md, False)
    print(md)
    return 0 if not meta["draws_failed"] else 1


def _guarded(a: argparse.Namespace) -> int:
    try:
        return run(a)
    except (ValueError, ResultFileExists) as exc:
        print(f"inflight sim generalize: error: {exc}", file=sys.stderr)
        return 2
    except interrupt.Interrupted as exc:
        print(f"inflight sim generalize: {exc.name}: every draw's run stopped", file=sys.stderr)
        return exc.exit_code


def register(sub: Any) -> None:
    p = sub.add_parser(
        "generalize",
        help="a policy on N random draws against every fixed fleet, beside the peers",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--policy", default="saturation", help="the policy judged (default saturation)")
    p.add_argument(
        "--peers", default=None, help="comma-separated peers on the same draws (default: the "
        "open-loop comparison's autoscalers: kpa, ray, vllm-waiting, epp-queue, hpa-rps, qps)"
    )  # fmt: skip
    p.add_argument("--draws", type=int, required=True, help="how many draws (seeds)")
    p.add_argument("--seeds-from", type=int, required=True, help="the first draw's seed")
    p.add_argument(
        "--purpose", choices=PURPOSES, required=True,
        help=f"what the draws are for: choose (seeds < {REPORT_SEEDS_FROM}) or report "
        f"(seeds >= {REPORT_SEEDS_FROM}); recorded in the report"
    )  # fmt: skip
    p.add_argument("--cold", action="store_true", help="no history; a burst at once")
    p.add_argument("--max-replicas", type=int, default=DEFAULT_MAX_REPLICAS)
    p.add_argument("--trace", action="append", help="a trace file windows are drawn from too "
                   "(Azure 2023 CSV, Mooncake JSONL, inflight JSONL; repeatable)")  # fmt: skip
    p.add_argument("--duration-s", type=float, default=None,
                   help="every window this long (default: drawn, 600, 900 or 1200 s)")  # fmt: skip
    p.add_argument(
        "--warmup-s",
        type=float,
        default=WARMUP_S,
        help=f"warm draws: seconds of history replayed first (default {WARMUP_S:g})",
    )
    p.add_argument("--jobs", type=int, default=1, help="draws simulated at once")
    p.add_argument("--out-dir", type=Path, required=True, help="never overwritten")
    p.set_defaults(func=_guarded)
