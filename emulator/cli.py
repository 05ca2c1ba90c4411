"""``inflight emulator``: the wiring site of the emulator (flags → Profile → app → serve).

Flag names follow ``vllm serve`` where vLLM has one (``--host``, ``--port``, ``--model``,
``--served-model-name``, ``--max-num-seqs``, ``--max-model-len``); the timing flags are the
emulator's own. Defaults are the reference profile of WORKLOAD.md.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from inflight import ready

DEFAULT_MODEL = "Qwen/Qwen3-32B-FP8"

# (flag, Profile field, type, help). Defaults come from Profile itself.
_TIMING_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--max-num-seqs", "max_num_seqs", int, "slots: sequences running at once (vLLM's flag)"),
    ("--time-scale", "time_scale", float, "multiplies every duration (0.1: ten times faster)"),
    ("--startup-s", "startup_s", float, "model seconds until /health answers 200"),
    ("--service-s", "service_s", float, "full-batch service time of a reference request, s"),
    ("--reference-prompt-tokens", "reference_prompt_tokens", int, "prompt of a reference request"),
    ("--reference-output-tokens", "reference_output_tokens", int, "output of a reference request"),
    ("--prefill-ms-per-1k-tokens", "prefill_ms_per_1k_tokens", float, "prefill cost, ms per 1k"),
    ("--step-base-fraction", "step_base_fraction", float, "lone-sequence step ÷ full step"),
    ("--cold-start-requests", "cold_start_requests", int, "the first N requests are cold"),
    ("--cold-start-factor", "cold_start_factor", float, "steps slow down this much when cold"),
    ("--default-max-tokens", "default_max_tokens", int, "output tokens without max_tokens"),
    ("--max-model-len", "max_model_len", int, "prompt + output token limit (vLLM's flag)"),
    ("--kv-cache-tokens", "kv_cache_tokens", int, "KV capacity for vllm:kv_cache_usage_perc"),
    ("--tick-ms", "tick_ms", float, "wall ms between stream wake-ups (not scaled)"),
)


def register(subparsers: Any) -> None:
    from emulator.profile import Profile

    defaults = {f.name: f.default for f in fields(Profile)}
    parser = subparsers.add_parser(
        "emulator",
        help="a vLLM-compatible replica without a GPU (slots, queue, step clock, vLLM metrics)",
        description=(
            "Serve the OpenAI API like one vLLM replica: --max-num-seqs slots with an FCFS "
            "queue, step-clock batching timed by the reference profile, vLLM's metric names. "
            "Every duration is multiplied by --time-scale."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=8000, help="port to listen on (0: any free one)"
    )
    ready.add_argument(parser)
    parser.add_argument("--model", default=None, help="model name (vLLM's flag); names it too")
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help=f"name(s) clients use; default: --model, else {DEFAULT_MODEL}",
    )
    for flag, name, typ, text in _TIMING_FLAGS:
        parser.add_argument(flag, dest=name, type=typ, default=defaults[name], help=text)
    parser.set_defaults(func=run)


def profile_from_args(args: argparse.Namespace) -> Any:
    """The Profile the flags describe; ProfileError names the flag at fault."""
    from emulator.profile import Profile

    return Profile(**{name: getattr(args, name) for _flag, name, _t, _h in _TIMING_FLAGS})


def served_names(args: argparse.Namespace) -> tuple[str, ...]:
    if args.served_model_name:
        return tuple(args.served_model_name)
    return (args.model or DEFAULT_MODEL,)


def run(args: argparse.Namespace) -> int:
    import sys

    from prometheus_client import CollectorRegistry

    from emulator.profile import ProfileError
    from emulator.server import build_app, serve

    try:
        profile = profile_from_args(args)
    except ProfileError as exc:
        print(f"inflight emulator: error: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"inflight emulator: error: --port {args.port} is not a port", file=sys.stderr)
        return 2
    names = served_names(args)
    try:
        # Bound and listening here, so the port can be reported before the loop runs.
        sock = ready.listen(args.host, args.port)
    except OSError as exc:
        print(f"inflight emulator: error: --port: {exc}", file=sys.stderr)
        return 1
    port = ready.bound_port(sock)

    print(
        f"inflight emulator: {names[0]} on http://{args.host}:{port} "
        f"slots={profile.max_num_seqs} time_scale={profile.time_scale} "
        f"startup={profile.startup_wall_s:.3f}s step_full={profile.step_full_s * 1000:.3f}ms",
        flush=True,
    )
    if args.ready_file is not None:
        ready.write(args.ready_file, {"http": port})
    if not serve(build_app(profile, names, CollectorRegistry()), sock):
        return 3  # start-up failed (uvicorn logged why)
    return 0
