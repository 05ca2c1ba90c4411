"""A mixed live run (issue 25, item 5): one ``inflight up`` serving two models through one
router, three priority classes, the Azure LLM inference 2023 traces' arrivals and lengths.

Model ``a`` gets the conversation trace, model ``b`` the code trace (each a window,
``--rate-scale`` times its recorded rate); every request a priority drawn from
``--priority-mix`` (0: high, 10: low, 100: batch, sheddable). The stack runs the emulator
(``--time-scale``), 1..``--max-replicas`` replicas a model, the router's classes
``high:0:1.5``, ``low:10:1.5`` and ``batch:100:shed``. While sending, ``/router/status`` is
sampled (each model's L, held requests and ready replicas). Written to ``--out-dir``:
``requests.jsonl.gz`` (one request a line: model, priority, class, seed times, outcome),
``samples.jsonl.gz`` and ``summary.json`` / ``summary.md`` (a model's and a class's SLO
attainment and TTFT, refusals, replicas). Seconds are seed seconds (wall / time-scale)::

    python -m experiments.mixed_live --out-dir results/2026-12-02-mixed
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from inflight.bench.loadgen import send_one
from inflight.bench.openloop.sender import completion_body
from inflight.control.hold_order import plan_from_classes
from inflight.measure.classes import class_measures, class_table
from inflight.measure.slo import DEFAULT_SLO, outcome_from_record, slo_measures
from inflight.workload.priorities import assign, parse_mix
from inflight.workload.trace import PlannedRequest
from inflight.workload.trace_formats import TraceWindow, load_trace

CLASSES = ("high:0:1.5", "low:10:1.5", "batch:100:shed")
MODELS = ("a", "b")


def plan(args: argparse.Namespace) -> list[tuple[str, PlannedRequest]]:
    """Both models' requests, in send order (seed seconds)."""
    window = TraceWindow(args.trace_start_s, args.duration_s * args.rate_scale, args.rate_scale)
    out: list[tuple[str, PlannedRequest]] = []
    for model, path in zip(MODELS, (args.trace_a, args.trace_b), strict=True):
        loaded = load_trace(Path(path), window)
        reqs = [r for r in loaded.requests if r.max_tokens <= args.max_output_tokens]
        mixed = assign(reqs, parse_mix(args.priority_mix), seed=args.seed + MODELS.index(model))
        out += [(model, r) for r in mixed]
    return sorted(out, key=lambda mr: mr[1].t_s)


def start_stack(args: argparse.Namespace, state_dir: Path) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-P", "-m", "inflight", "up", "--state-dir", str(state_dir),
           "--model", "a", "--model", "b", "--time-scale", str(args.time_scale),
           "--min-replicas", "1", "--max-replicas", str(args.max_replicas),
           "--startup-s", str(args.startup_s), "--log-level", "warning",
           *(f"--priority-class={c}" for c in CLASSES)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + args.stack_timeout_s
    url = None
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.strip().startswith("router:"):
            url = line.split()[-1]
        if "Ctrl-C stops everything" in line:
            return proc, str(url)
    stop_stack(proc)
    raise SystemExit("inflight up did not become ready")


def stop_stack(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def send(
    url: str, planned: list[tuple[str, PlannedRequest]], ts: float, drain_s: float
) -> tuple[float, list[Any], list[dict[str, Any]]]:
    records: list[Any] = [None] * len(planned)
    samples: list[dict[str, Any]] = []
    timeout_s = (planned[-1][1].t_s + drain_s) * ts + 60
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                try:
                    async with session.get(url + "/router/status") as r:
                        body = await r.json()
                    samples.append({"t": time.time(), "models": [
                        {"model": m["model"], "inflight": m["inflight"], "queued": m["queued"],
                         "ready": sum(e["state"] == "ready" for e in m["endpoints"])}
                        for m in body.get("models", [])]})  # fmt: skip
                except (aiohttp.ClientError, ValueError):
                    pass
                await asyncio.sleep(0.5)

        async def one(i: int, model: str, req: PlannedRequest) -> None:
            payload = json.dumps(completion_body(model, req)).encode()
            records[i] = await send_one(session, url + "/v1/completions", payload, timeout_s)

        sampler = asyncio.create_task(sample())
        t0 = time.time()
        tasks = []
        for i, (model, req) in enumerate(planned):
            delay = t0 + req.t_s * ts - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, model, req)))
        await asyncio.wait(tasks, timeout=(planned[-1][1].t_s + drain_s) * ts - (time.time() - t0))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        done.set()
        await sampler
    return t0, records, samples


def summarise(
    planned: list[tuple[str, PlannedRequest]], t0: float, records: list[Any],
    samples: list[dict[str, Any]], ts: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    hold = plan_from_classes(list(CLASSES), None)
    names = [c.name for c in hold.classes]
    rows, outcomes, classes = [], [], []
    for (model, req), rec in zip(planned, records, strict=True):
        if rec is None:
            continue  # cancelled at the drain limit
        o = outcome_from_record(rec, t0, ts)
        cls = names[hold.class_of(req.priority)]
        outcomes.append((model, o))
        classes.append(cls)
        rows.append({"model": model, "priority": req.priority, "class": cls,
                     "t_s": req.t_s, "prompt_tokens": req.prompt_tokens,
                     "max_tokens": req.max_tokens, "ttft_s": o.ttft_s, "e2e_s": o.e2e_s,
                     "ok": o.ok, "cause": o.cause})  # fmt: skip
    ready = {m: [(round((s["t"] - t0) / ts, 1), x["ready"]) for s in samples for x in s["models"]
                 if x["model"] == m] for m in MODELS}  # fmt: skip
    per_model = {}
    for m in MODELS:
        mine = [(o, c) for (mm, o), c in zip(outcomes, classes, strict=True) if mm == m]
        per_model[m] = {
            **slo_measures([o for o, _ in mine], DEFAULT_SLO),
            "by_class": class_measures(
                [o for o, _ in mine], [c for _, c in mine], names, DEFAULT_SLO
            ),
            "ready_replicas_max": max((n for _, n in ready[m]), default=0),
            "ready_replicas": _changes(ready[m]),
            "held_max": max(
                (x["queued"] for s in samples for x in s["models"] if x["model"] == m), default=0
            ),
        }
    all_o = [o for _, o in outcomes]
    summary = {
        "planned": len(planned),
        "answered": len(all_o),
        "unanswered": len(planned) - len(all_o),
        "all": slo_measures(all_o, DEFAULT_SLO),
        "by_class": class_measures(all_o, classes, names, DEFAULT_SLO),
        "by_model": per_model,
    }
    return summary, rows


def _changes(points: list[tuple[float, int]]) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    for t, n in points:
        if not out or out[-1][1] != n:
            out.append((t, n))
    return out


def while_held(rows: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A model's and a class's requests sent while that model's pool held requests (the
    last ``/router/status`` sample before it showed ``queued`` > 0): the overloaded moments
    the classes are for. Per (model, class): requests, served, refused (429), TTFT p50."""
    out: dict[str, Any] = {}
    for m in MODELS:
        points = [(s["t_s"], x["queued"]) for s in samples for x in s["models"] if x["model"] == m]
        times = [t for t, _ in points]

        def held(
            t_s: float, points: list[tuple[float, int]] = points, times: list[float] = times
        ) -> bool:
            i = bisect.bisect_right(times, t_s) - 1
            return i >= 0 and points[i][1] > 0

        for c in ("high", "low", "batch"):
            sel = [r for r in rows if r["model"] == m and r["class"] == c and held(r["t_s"])]
            ttft = [r["ttft_s"] for r in sel if r["ok"] and r["ttft_s"] is not None]
            out[f"{m}/{c}"] = {
                "requests": len(sel),
                "served": sum(r["ok"] for r in sel),
                "refused_429": sum(r["cause"] == "http_429" for r in sel),
                "ttft_p50_s": round(statistics.median(ttft), 3) if ttft else None,
            }
    return out


def held_markdown(held: dict[str, Any]) -> str:
    lines = ["## Sent while the model's pool held requests", "",
             "| model/class | requests | served | refused 429 | TTFT p50 s |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for key, v in held.items():
        p50 = "-" if v["ttft_p50_s"] is None else f"{v['ttft_p50_s']:.2f}"
        lines.append(f"| {key} | {v['requests']} | {v['served']} | {v['refused_429']} | {p50} |")
    return "\n".join(lines) + "\n"


def add_held(out_dir: Path) -> str:
    """Add the while-held table to a run folder's summary (from its saved files)."""
    with gzip.open(out_dir / "requests.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    with gzip.open(out_dir / "samples.jsonl.gz", "rt") as f:
        samples = [json.loads(line) for line in f]
    held = while_held(rows, samples)
    summary = json.loads((out_dir / "summary.json").read_text())
    summary["while_held"] = held
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    md = (out_dir / "summary.md").read_text().split("## Sent while")[0].rstrip() + "\n\n"
    md += held_markdown(held)
    (out_dir / "summary.md").write_text(md)
    return md


def markdown(summary: dict[str, Any], command: list[str]) -> str:
    lines = ["# Mixed live run: two models, three priority classes, Azure 2023 traces", "",
             "```", " ".join(command), "```", "",
             f"{summary['planned']} requests planned, {summary['answered']} answered "
             f"({summary['unanswered']} unanswered).", "", "## A class, both models", "",
             class_table({"both": summary}).rstrip(), "", "## A model", ""]  # fmt: skip
    for m, pm in summary["by_model"].items():
        ttft = pm["ttft_s"] or {}
        att = pm["slo_attainment"]
        lines.append(
            f"- model {m}: {pm['requests_sent']} requests, attainment "
            f"{'-' if att is None else f'{100 * att:.1f} %'}, TTFT p50 "
            f"{ttft.get('p50', float('nan')):.2f} s, ready replicas (seed s, n) "
            f"{pm['ready_replicas']}, most held at once {pm['held_max']}"
        )
    lines += ["", class_table(summary["by_model"]).rstrip(), ""]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--add-held", action="store_true", help="only add the while-held table")
    p.add_argument("--trace-a", default="/tmp/traces/AzureLLMInferenceTrace_conv.csv")
    p.add_argument("--trace-b", default="/tmp/traces/AzureLLMInferenceTrace_code.csv")
    p.add_argument("--trace-start-s", type=float, default=600.0)
    p.add_argument("--duration-s", type=float, default=240.0, help="seed s of traffic")
    p.add_argument("--rate-scale", type=float, default=0.5)
    p.add_argument("--max-output-tokens", type=int, default=1000)
    p.add_argument("--priority-mix", default="0:0.4,10:0.4,100:0.2")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--time-scale", type=float, default=0.25)
    p.add_argument("--max-replicas", type=int, default=3)
    p.add_argument("--startup-s", type=float, default=30.0)
    p.add_argument("--drain-s", type=float, default=120.0)
    p.add_argument("--stack-timeout-s", type=float, default=180.0)
    args = p.parse_args()
    if args.add_held:
        print(add_held(args.out_dir))
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=False)
    planned = plan(args)
    state_dir = Path("state") / "mixed" / args.out_dir.name
    proc, url = start_stack(args, state_dir)
    try:
        t0, records, samples = asyncio.run(send(url, planned, args.time_scale, args.drain_s))
    finally:
        stop_stack(proc)
    summary, rows = summarise(planned, t0, records, samples, args.time_scale)
    command = ["python", "-m", "experiments.mixed_live", *sys.argv[1:]]
    summary["command"] = command
    summary["settings"] = {k: v for k, v in vars(args).items() if k != "out_dir"}
    summary["settings"]["classes"] = list(CLASSES)
    with gzip.open(args.out_dir / "requests.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with gzip.open(args.out_dir / "samples.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({**s, "t_s": round((s["t"] - t0) / args.time_scale, 2)}) + "\n"
                     for s in samples)  # fmt: skip
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (args.out_dir / "summary.md").write_text(markdown(summary, command))
    print(add_held(args.out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
