"""``inflight emulator``: the wiring site of the emulator (flags → Profile → app → serve).

Flag names follow ``vllm serve`` where vLLM has one (``--host``, ``--port``, ``--model``,
``--served-model-name``, ``--max-num-seqs``, ``--max-model-len``); the timing flags are the
emulator's own. Defaults are the reference profile of docs/workload.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from inflight import config, ready
from inflight.config import Cli
from inflight.emulator.profile import Profile, ProfileError
from inflight.procs import process_age_s

DEFAULT_MODEL = "Qwen/Qwen3-32B-FP8"
_REF = Profile()


class EmulatorSettings(config.Settings):
    """``inflight emulator``'s configuration: flags or ``INFLIGHT_EMULATOR_*`` variables.

    The timing fields are :class:`Profile`'s (defaults: the reference profile); Profile
    checks their values, and its errors come back naming the flag and variable.
    """

    SUBCOMMAND = "emulator"

    host: Annotated[str, Cli("address to listen on")] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535), Cli("port to listen on (0: any free one)")] = 8000
    ready_file: Annotated[Path | None, Cli(ready.HELP, metavar="READY_FILE")] = None
    model: Annotated[str | None, Cli("model name (vLLM's flag); names it too")] = None
    served_model_name: Annotated[
        list[str] | None,
        NoDecode,
        Cli(
            f"name(s) clients use; default: --model, else {DEFAULT_MODEL} "
            "(env: comma-separated or a JSON array)",
            nargs="+",
        ),
    ] = None
    max_num_seqs: Annotated[int, Cli("slots: sequences running at once (vLLM's flag)")] = (
        _REF.max_num_seqs
    )
    time_scale: Annotated[float, Cli("multiplies every duration (0.1: ten times faster)")] = (
        _REF.time_scale
    )
    startup_s: Annotated[float, Cli("model seconds until /health answers 200")] = _REF.startup_s
    service_s: Annotated[float, Cli("full-batch service time of a reference request, s")] = (
        _REF.service_s
    )
    reference_prompt_tokens: Annotated[int, Cli("prompt of a reference request")] = (
        _REF.reference_prompt_tokens
    )
    reference_output_tokens: Annotated[int, Cli("output of a reference request")] = (
        _REF.reference_output_tokens
    )
    prefill_ms_per_1k_tokens: Annotated[float, Cli("prefill cost, ms per 1k")] = (
        _REF.prefill_ms_per_1k_tokens
    )
    step_base_fraction: Annotated[float, Cli("lone-sequence step ÷ full step")] = (
        _REF.step_base_fraction
    )
    cold_start_requests: Annotated[int, Cli("the first N requests are cold")] = (
        _REF.cold_start_requests
    )
    cold_start_factor: Annotated[float, Cli("steps slow down this much when cold")] = (
        _REF.cold_start_factor
    )
    default_max_tokens: Annotated[int, Cli("output tokens without max_tokens")] = (
        _REF.default_max_tokens
    )
    max_model_len: Annotated[int, Cli("prompt + output token limit (vLLM's flag)")] = (
        _REF.max_model_len
    )
    block_size: Annotated[int, Cli("tokens a KV block holds (vLLM's flag)")] = _REF.block_size
    num_gpu_blocks: Annotated[
        int, Cli("KV blocks, vLLM's null block included (0: max-num-seqs × max-model-len)")
    ] = _REF.num_gpu_blocks
    watermark: Annotated[float, Cli("share of KV blocks admission leaves free (vLLM's)")] = (
        _REF.watermark
    )
    max_num_batched_tokens: Annotated[int, Cli("token budget a step (vLLM's; 0: none)")] = (
        _REF.max_num_batched_tokens
    )
    prefill_ms_per_1k_tokens_sq: Annotated[float, Cli("prefill, ms per (1k tokens)²")] = (
        _REF.prefill_ms_per_1k_tokens_sq
    )
    prefill_fixed_ms: Annotated[float, Cli("prefill's fixed cost a request, ms")] = (
        _REF.prefill_fixed_ms
    )
    tick_ms: Annotated[float, Cli("wall ms between stream wake-ups (not scaled)")] = _REF.tick_ms
    enable_prefix_caching: Annotated[
        bool,
        Cli(
            "vLLM's automatic prefix caching: a prompt's cached full blocks are not "
            "computed again (vLLM's flag; on by default in vLLM, off here)"
        ),
    ] = _REF.enable_prefix_caching
    hold_control: Annotated[
        bool,
        Cli(
            "serve GET /emulator/engine and POST /emulator/engine/hold|release: tests hold "
            "the engine's clock so a state lasts (off by default; never in inflight up)"
        ),
    ] = False

    _split_names = field_validator("served_model_name", mode="before")(config.split_list)

    @model_validator(mode="after")
    def _check_profile(self) -> EmulatorSettings:
        try:
            _ = self.profile
        except ProfileError as exc:
            raise config.FieldError(exc.field, exc.problem) from None
        return self

    @property
    def profile(self) -> Profile:
        """The timing profile these settings describe."""
        return Profile(**{name: getattr(self, name) for name in Profile.__dataclass_fields__})

    @property
    def served_names(self) -> tuple[str, ...]:
        if self.served_model_name:
            return tuple(self.served_model_name)
        return (self.model or DEFAULT_MODEL,)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "emulator",
        help="a vLLM-compatible replica without a GPU (slots, queue, step clock, vLLM metrics)",
        description=(
            "Serve the OpenAI API like one vLLM replica: --max-num-seqs slots with an FCFS "
            "queue, step-clock batching timed by the reference profile, vLLM's metric names. "
            "Every duration is multiplied by --time-scale. Every flag can also be set as "
            "INFLIGHT_EMULATOR_<FLAG> (e.g. INFLIGHT_EMULATOR_MAX_NUM_SEQS=8); a flag wins."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    config.add_flags(parser, EmulatorSettings)
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> EmulatorSettings:
    """Flags over ``INFLIGHT_EMULATOR_*`` over defaults; ConfigError names flag and variable."""
    return config.load(EmulatorSettings, args)


def profile_from_args(args: argparse.Namespace) -> Profile:
    """The Profile the flags (and environment) describe."""
    return settings_from_args(args).profile


def served_names(args: argparse.Namespace) -> tuple[str, ...]:
    return settings_from_args(args).served_names


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except config.ConfigError as exc:
        return config.report(EmulatorSettings, exc)
    if config.wants_print(args):
        return config.print_config(settings)
    return serve(settings)


def serve(settings: EmulatorSettings) -> int:
    """The wiring: reads ``settings`` only."""
    import sys

    from prometheus_client import CollectorRegistry

    from inflight.emulator import server

    profile = settings.profile
    names = settings.served_names
    try:
        # Bound and listening here, so the port can be reported before the loop runs.
        sock = ready.listen(settings.host, settings.port)
    except OSError as exc:
        print(f"inflight emulator: error: --port: {exc}", file=sys.stderr)
        return 1
    port = ready.bound_port(sock)

    print(
        f"inflight emulator: {names[0]} on http://{settings.host}:{port} "
        f"slots={profile.max_num_seqs} time_scale={profile.time_scale} "
        f"startup={profile.startup_wall_s:.3f}s step_full={profile.step_full_s * 1000:.3f}ms",
        flush=True,
    )
    if settings.ready_file is not None:
        ready.write(settings.ready_file, {"http": port})
    app = server.build_app(
        profile, names, CollectorRegistry(), process_age_s, hold_control=settings.hold_control
    )
    if not server.serve(app, sock):
        return 3  # start-up failed (uvicorn logged why)
    return 0
