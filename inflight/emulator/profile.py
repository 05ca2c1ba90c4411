"""The timing profile of an emulated replica: how long a step takes, in wall seconds.

One frozen value built once from the settings (``inflight.emulator.cli.EmulatorSettings``) and
handed to
the engine. The reference profile is docs/workload.md's: 4 slots; a meeting-summary request
(~3,000 prompt tokens, 300 output tokens) takes about 4.5 s of service at a full batch;
start-up 30 s; the first requests run ≈1.6× slower (cold start). Every duration is
multiplied by ``time_scale``.

The step model, with a worked example (reference profile, time-scale 1):

* prefill costs ``prefill_ms_per_1k_tokens`` per 1,000 prompt tokens, paid once, in the
  step that admits the sequence: 3,000 tokens × 20 ms/1k = 0.06 s;
* a decode step with ``n`` sequences running takes
  ``step_full_s × (base_fraction + (1 − base_fraction) × n / slots)``;
* at a full batch the slots turn over once per service time, so one service time holds
  ``output_tokens`` steps and ``slots`` prefills:
  ``service_s = output_tokens × step_full_s + slots × prefill_s``, hence
  ``step_full_s = (4.5 − 4 × 0.06) / 300 = 0.0142 s`` and throughput = 4 / 4.5 = 0.889 req/s.
* a lone request: step = 0.0142 × (0.5 + 0.5 × 1/4) = 0.008875 s, so 300 tokens + prefill
  ≈ 2.72 s: latency grows with the batch, throughput saturates at the slot count.

Prefill may also grow with the square of the context (attention): ``prefill_ms_per_1k_tokens_sq``
ms per (1,000 tokens)², charged on the context a chunk extends, so a prompt chunked over
several steps costs what it costs in one; and ``prefill_fixed_ms`` is paid once per admission
(what a real engine spends on a request beyond its tokens: the TTFT of a 1-token prompt less
one step). Both default to 0: linear, as before.

The KV cache, vLLM's way (``vllm/v1/core``): ``num_gpu_blocks`` blocks of ``block_size``
tokens, one of them vLLM's null block, so ``num_gpu_blocks − 1`` hold sequences (40 blocks of
128: 39 × 128 = 4,992 tokens; ``vllm:kv_cache_usage_perc`` = blocks held ÷ 39). A waiting
sequence is admitted only when its whole context fits with ``watermark`` × blocks to spare;
a running one that needs a block when none is free preempts the newest running sequence
(recompute). The default cache, ``max_num_seqs × max_model_len`` tokens, holds every slot's
longest sequence, so it never binds; ``max_num_batched_tokens`` (0: no limit, the default)
is vLLM's per-step token budget (chunked prefill).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from inflight import kv_blocks as vllm_kv


class ProfileError(ValueError):
    """A timing flag has a value the model cannot use; the message names the flag.

    ``field`` is the Profile field at fault and ``problem`` the rest of the message, so the
    configuration layer (:mod:`inflight.config`) can name the flag and its variable.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"--{field.replace('_', '-')} {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Profile:
    """Timing of one emulated replica. Durations are model seconds before ``time_scale``."""

    max_num_seqs: int = 4
    time_scale: float = 1.0
    startup_s: float = 30.0
    service_s: float = 4.5  # full-batch service time of a reference request
    reference_prompt_tokens: int = 3000
    reference_output_tokens: int = 300
    prefill_ms_per_1k_tokens: float = 20.0
    step_base_fraction: float = 0.5  # a lone sequence's step, as a fraction of a full one
    cold_start_requests: int = 4  # the first N admitted sequences are cold
    cold_start_factor: float = 1.6  # steps run this much slower while a cold one runs
    default_max_tokens: int = 300  # output length when a request gives no max_tokens
    max_model_len: int = 32768
    block_size: int = 128  # tokens a KV block holds (vLLM's CPU build: 128)
    num_gpu_blocks: int = 0  # KV blocks, null block included; 0: max_num_seqs × max_model_len
    watermark: float = 0.0  # share of the blocks a waiting sequence must leave free (vLLM's)
    max_num_batched_tokens: int = 0  # tokens one step computes (chunked prefill); 0: no limit
    prefill_ms_per_1k_tokens_sq: float = 0.0  # prefill's quadratic term, ms per (1k tokens)²
    prefill_fixed_ms: float = 0.0  # a prefill's fixed cost, once per admission (ms)
    tick_ms: float = 10.0  # wall ms between wake-ups while tokens stream (not scaled)
    # vLLM's automatic prefix caching (its default is on): sequences that carry their
    # prompt's block hashes reuse cached blocks (inflight/emulator/engine.py). Off here by
    # default, so today's runs stay as they were (a bench's repeated transcript would hit).
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str, str]] = [
            (self.max_num_seqs >= 1, "max_num_seqs", "must be ≥ 1"),
            (self.time_scale > 0, "time_scale", "must be > 0"),
            (self.startup_s >= 0, "startup_s", "must be ≥ 0"),
            (self.service_s > 0, "service_s", "must be > 0"),
            (self.reference_prompt_tokens >= 0, "reference_prompt_tokens", "must be ≥ 0"),
            (self.reference_output_tokens >= 1, "reference_output_tokens", "must be ≥ 1"),
            (self.prefill_ms_per_1k_tokens >= 0, "prefill_ms_per_1k_tokens", "must be ≥ 0"),
            (0 < self.step_base_fraction <= 1, "step_base_fraction", "must be in (0, 1]"),
            (self.cold_start_requests >= 0, "cold_start_requests", "must be ≥ 0"),
            (self.cold_start_factor >= 1, "cold_start_factor", "must be ≥ 1"),
            (self.default_max_tokens >= 1, "default_max_tokens", "must be ≥ 1"),
            (self.max_model_len >= 1, "max_model_len", "must be ≥ 1"),
            (self.block_size >= 1, "block_size", "must be ≥ 1"),
            (
                self.num_gpu_blocks == 0 or self.num_gpu_blocks >= 2,
                "num_gpu_blocks",
                "must be 0 (enough for every slot) or ≥ 2 (one is vLLM's null block)",
            ),
            (0 <= self.watermark < 1, "watermark", "must be in [0, 1)"),
            (self.max_num_batched_tokens >= 0, "max_num_batched_tokens", "must be ≥ 0"),
            (self.prefill_ms_per_1k_tokens_sq >= 0, "prefill_ms_per_1k_tokens_sq", "must be ≥ 0"),
            (self.prefill_fixed_ms >= 0, "prefill_fixed_ms", "must be ≥ 0"),
            (self.tick_ms > 0, "tick_ms", "must be > 0"),
        ]
        for ok, field, problem in checks:
            if not ok:
                value = getattr(self, field)
                raise ProfileError(field, f"{problem}, got {value:g}")
        if self.usable_blocks * self.block_size < self.max_model_len:
            raise ProfileError(
                "num_gpu_blocks",
                f"{self.num_gpu_blocks} of --block-size {self.block_size} hold "
                f"{self.usable_blocks * self.block_size} tokens (one block is vLLM's null "
                f"block), fewer than one sequence of --max-model-len {self.max_model_len}",
            )
        if self.step_full_s <= 0:
            raise ProfileError(
                "service_s",
                f"{self.service_s:g} is too short for --max-num-seqs "
                f"{self.max_num_seqs} prefills of --reference-prompt-tokens "
                f"{self.reference_prompt_tokens} at --prefill-ms-per-1k-tokens "
                f"{self.prefill_ms_per_1k_tokens:g}: no time is left for decoding",
            )

    def prefill_s(
        self, prompt_tokens: int, context_tokens: int = 0, first: bool | None = None
    ) -> float:
        """Wall seconds of prefill for ``prompt_tokens`` that follow ``context_tokens`` already
        computed (a later chunk, or a cached prefix; scaled): linear, plus the quadratic
        term's share, plus the fixed cost for an admission's first chunk (``first``; by
        default, ``context_tokens`` 0)."""
        linear_s = prompt_tokens / 1000.0 * self.prefill_ms_per_1k_tokens / 1000.0
        if first is None:
            first = not context_tokens
        if self.prefill_fixed_ms and first:
            linear_s += self.prefill_fixed_ms / 1000.0
        if self.prefill_ms_per_1k_tokens_sq:
            end_k, start_k = (context_tokens + prompt_tokens) / 1000.0, context_tokens / 1000.0
            linear_s += (end_k * end_k - start_k * start_k) * self.prefill_ms_per_1k_tokens_sq / 1e3
        return linear_s * self.time_scale

    @cached_property
    def kv_blocks(self) -> int:
        """vLLM's ``num_gpu_blocks``: the set value, else enough for every slot's longest
        sequence (⌈max_num_seqs × max_model_len ÷ block_size⌉ + the null block)."""
        if self.num_gpu_blocks:
            return self.num_gpu_blocks
        return -(-self.max_num_seqs * self.max_model_len // self.block_size) + 1

    @cached_property
    def usable_blocks(self) -> int:
        """Blocks sequences can hold: all but vLLM's null block (the router admits
        against the same, ``inflight.kv_blocks``)."""
        return vllm_kv.usable_blocks(self.kv_blocks)

    @property
    def kv_cache_size_tokens(self) -> int:
        """vLLM's ``kv_cache_size_tokens`` label: blocks × block size (null block included)
        when ``max_model_len`` is a whole number of blocks (:func:`vllm_kv.size_tokens`)."""
        return vllm_kv.size_tokens(self.kv_blocks, self.block_size, self.max_model_len)

    @cached_property
    def watermark_blocks(self) -> int:
        """Blocks a waiting sequence must leave free (vLLM: ``int(watermark × blocks)``)."""
        return int(self.watermark * self.kv_blocks)

    @cached_property
    def token_budget(self) -> int:
        """Tokens one step may compute: ``max_num_batched_tokens``, else no limit."""
        return self.max_num_batched_tokens or 1 << 62

    @property
    def step_full_s(self) -> float:
        """Wall seconds of one decode step at a full batch (scaled)."""
        prefills_s = self.max_num_seqs * self.prefill_s(self.reference_prompt_tokens)
        return (self.service_s * self.time_scale - prefills_s) / self.reference_output_tokens

    def step_s(self, running: int) -> float:
        """Wall seconds of one decode step with ``running`` sequences (scaled)."""
        f = self.step_base_fraction
        return self.step_full_s * (f + (1.0 - f) * running / self.max_num_seqs)

    @property
    def startup_wall_s(self) -> float:
        return self.startup_s * self.time_scale

    @property
    def predicted_throughput_rps(self) -> float:
        """Wall requests/s at saturation for reference requests: slots ÷ service time."""
        return self.max_num_seqs / (self.service_s * self.time_scale)
