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


def max_concurrency(num_gpu_blocks: int, block_size: int, max_model_len: int) -> float:
    """``cache_config_info``'s ``kv_cache_max_concurrency``: requests of ``max_model_len``
    tokens the cache holds, each taking whole blocks (vLLM's
    ``get_max_concurrency_for_kv_cache_config``: blocks ÷ blocks per request, a float).

    >>> max_concurrency(40, 128, 2048), max_concurrency(40, 128, 2432)
    (2.5, 2.1052631578947367)
    """
    return num_gpu_blocks / blocks_for(max_model_len, block_size)


def size_tokens(num_gpu_blocks: int, block_size: int, max_model_len: int) -> int:
    """``cache_config_info``'s ``kv_cache_size_tokens``: vLLM's ``get_kv_cache_capacity``,
    ``int(max_concurrency × max_model_len)``; blocks × block size when ``max_model_len``
    is a whole number of blocks, less when it is not (the last block's unused tail).

    >>> size_tokens(40, 128, 2048), size_tokens(40, 128, 2432), size_tokens(40, 128, 2000)
    (5120, 5120, 5000)
    """
    return int(max_concurrency(num_gpu_blocks, block_size, max_model_len) * max_model_len)
