"""vLLM's KV cache in blocks: what a cache of ``num_gpu_blocks`` can hold, and what a
request's tokens take (vLLM 0.32's v1 ``kv_cache_manager.py``, docs/vllm-cpu.md).

One implementation for the emulator's engine (``inflight/emulator/profile.py``) and the
router's token admission (``router/dispatch.py``, ``router/kv_discovery.py``), so the
router admits against the blocks the engine can give.
"""

from __future__ import annotations


def usable_blocks(num_gpu_blocks: int) -> int:
    """Blocks sequences can hold: all but vLLM's null block (``cache_config_info``'s
    ``num_gpu_blocks`` counts it).

    >>> usable_blocks(40)
    39
    """
    return num_gpu_blocks - 1


def blocks_for(tokens: int, block_size: int) -> int:
    """Whole blocks ``tokens`` take (vLLM allocates a block at a time).

    >>> blocks_for(2000, 128), blocks_for(128, 128), blocks_for(0, 128)
    (16, 1, 0)
    """
    return -(-tokens // block_size)
