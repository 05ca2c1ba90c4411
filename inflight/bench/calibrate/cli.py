"""The flags of ``inflight bench calibrate-emulator``; ``register(sub)`` is called by
``inflight.bench.cli``. Values are checked here, so a bad one is refused by argparse naming
its flag before an engine starts."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

from inflight.bench.calibrate.model import KV_CASES, PREFIX_HIT_TOLERANCE, PREFIX_TTFT_TOLERANCE
from inflight.bench.components.cli import at_least, choice_list
from inflight.engines import vllm_cpu
from inflight.workload.flags import positive_float, positive_int_list

ENGINES = (vllm_cpu.ENGINE,)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate-emulator",
        help="fit the emulator to a real engine and check it on the same requests",
        description=(
            "Start one real engine (make vllm-cpu), read its KV capacity "
            "(vllm:cache_config_info), then interleave probes (TTFT against the prompt, time "
            "per token against the batch) with phases (a closed loop at each --levels "
            "concurrency, the KV-bound cases): probe, phase, probe, …; a phase whose probes "
            "drift beyond --tolerance is run again (--max-repeats). Each phase is replayed on "
            "the emulator with a profile fitted to the probes around it (a closed-loop level at "
            "the speed the engine itself measured over it); check throughput and "
            "mean latency within --tolerance and the KV-bound traces; last, the prefix check: "
            "--prefix-groups shared prefixes sent one request after another to both, their "
            "prefix-cache hit rates and TTFTs compared. Writes a new --out-dir. "
            "~6 min on a quiet 2-core machine."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    today = datetime.date.today().isoformat()
    add = p.add_argument
    add("--engine", choices=ENGINES, required=True, help="the real engine")
    add("--engine-model", default="llama-8m", help="a model make vllm-cpu built")
    add("--engine-home", default=vllm_cpu.DEFAULT_HOME, help="where make vllm-cpu set it up")
    add(
        "--out-dir",
        type=Path,
        default=Path(f"results/{today}-calibrate-emulator"),
        help="new folder for the results (refused if it exists)",
    )
    add(
        "--slots", type=at_least(1), default=4, help="--max-num-seqs of the engine and the emulator"
    )
    add("--num-gpu-blocks", type=at_least(1), default=40, help="KV blocks of 128 tokens")
    add("--max-model-len", type=at_least(1), default=2048)
    add("--levels", type=positive_int_list, default=[1, 2, 4, 8], help="closed-loop concurrencies")
    add("--requests-per-level", type=at_least(1), default=32, help="closed loop: requests a "
        "level sends (longer levels average out a moment the machine stalls)")  # fmt: skip
    add(
        "--prompt-tokens", type=at_least(1), default=128, help="closed loop: prompt of each request"
    )
    add("--output-tokens", type=at_least(1), default=64, help="closed loop: output of each request")
    add("--ttft-prompts", type=positive_int_list, default=[16, 256, 512, 1024, 1536])
    add("--reps", type=at_least(1), default=3, help="rounds of TTFT and time per token (median)")
    add("--batches", type=positive_int_list, default=[1, 2, 4], help="time per token: batches")
    add("--tpot-tokens", type=at_least(2), default=96, help="time per token: output of each stream")
    add("--kv-cases", type=choice_list(tuple(KV_CASES)), default=list(KV_CASES))
    add("--sample-s", type=positive_float, default=0.25, help="KV cases: scrape period")
    add("--prefix-groups", type=at_least(0), default=3, help="prefix check: groups sharing "
        "a prefix (0: none); every group's prefix must fit the KV cache at once")  # fmt: skip
    add("--prefix-rounds", type=at_least(2), default=4, help="prefix check: requests a group "
        "sends, one after another, each round one of every group")  # fmt: skip
    add("--prefix-tokens", type=at_least(1), default=1024, help="prefix check: the shared "
        "prefix (8 blocks of 128)")  # fmt: skip
    add("--prefix-suffix-tokens", type=at_least(1), default=128, help="prefix check: each "
        "request's own tokens after the prefix")  # fmt: skip
    add("--prefix-hit-tolerance", type=positive_float, default=PREFIX_HIT_TOLERANCE,
        help="prefix check: allowed difference of the hit rates (absolute)")  # fmt: skip
    add("--prefix-ttft-tolerance", type=positive_float, default=PREFIX_TTFT_TOLERANCE,
        help="prefix check: allowed relative error of the mean TTFTs")  # fmt: skip
    add("--tolerance", type=positive_float, default=0.10, help="allowed relative error, and "
        "drift between the probes around a phase")  # fmt: skip
    add("--max-repeats", type=at_least(0), default=2, help="times a phase whose probes drifted "
        "beyond --tolerance is run again")  # fmt: skip
    add("--startup-timeout-s", type=positive_float, default=600.0, help="wall s")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from inflight.bench.calibrate.run import main

    return main(args)
