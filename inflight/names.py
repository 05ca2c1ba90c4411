"""Every name that crosses a boundary between the parts, defined once.

Router metrics, scaler metrics, vLLM's metric names, the ScaledObject metadata
keys and their defaults, the PromQL for the derived signals and the recording rules' series names.
Dashboards, rules, manifests and tests import from here; contract tests fail when a
file drifts from it. See ``docs/ARCHITECTURE.md`` for what each signal means.
"""

from __future__ import annotations

from typing import Final

# --- Router (Prometheus text at GET /metrics on the router port) -----------------------
ROUTER_INFLIGHT: Final = "router_inflight_requests"  # gauge: L at the router (held included)
ROUTER_QUEUED: Final = "router_queued_requests"  # gauge: held at the router, not dispatched
ROUTER_ENDPOINT_INFLIGHT: Final = "router_endpoint_inflight_requests"  # gauge{endpoint}
ROUTER_ENDPOINTS: Final = "router_endpoints"  # gauge{state=ready|draining|unhealthy}
ROUTER_SLOTS_PER_ENDPOINT: Final = "router_slots_per_endpoint"  # gauge
ROUTER_REQUESTS_RECEIVED: Final = "router_requests_received_total"  # counter: arrivals (λ)
ROUTER_REQUESTS: Final = "router_requests_total"  # counter{endpoint,code}: finished
ROUTER_REQUEST_DURATION: Final = "router_request_duration_seconds"  # histogram: W
ROUTER_TTFB: Final = "router_time_to_first_byte_seconds"  # histogram
ROUTER_UPSTREAM_ERRORS: Final = "router_upstream_errors_total"  # counter{endpoint,reason}
ROUTER_RETRIES: Final = "router_retries_total"  # counter
# counter: held requests that waited past --hold-deadline-s (served after on-time ones)
ROUTER_HELD_LATE: Final = "router_held_late_total"
# Priority classes (--priority-class; one class, "default", without): held requests now,
# gauge{class}; and counter{class,outcome}: held (no slot free at once), late (held past the
# class's deadline), too_long (503: the lateness bound), shed (429: a sheddable class).
ROUTER_CLASS_QUEUED: Final = "router_class_queued_requests"
ROUTER_CLASS_HELD: Final = "router_class_held_total"
# counter{class}: work requests by class (with --priority-class only); histogram{class}: the
# hold wait of held requests that got a slot (with a deadline or a bound only).
ROUTER_CLASS_REQUESTS: Final = "router_class_requests_total"
ROUTER_CLASS_WAIT: Final = "router_class_wait_seconds"
CLASS_OUTCOMES: Final = ("held", "late", "too_long", "shed")
# Token admission (--kv-tokens, --discover-kv-tokens; router/dispatch.py): gauge{endpoint},
# the KV tokens (prompt + output budget) of the requests dispatched there and not finished;
# gauge{endpoint}, its capacity in tokens (0: none known, slots only); gauge, the demand of
# the requests held at the router. All 0 without token admission.
ROUTER_ENDPOINT_INFLIGHT_TOKENS: Final = "router_endpoint_inflight_tokens"
ROUTER_ENDPOINT_KV_TOKENS: Final = "router_endpoint_kv_tokens"
ROUTER_QUEUED_TOKENS: Final = "router_queued_tokens"
# counter: reads of an endpoint's KV capacity (--discover-kv-tokens: on add and each round)
# that gave none; alert on its increase (router/kv_discovery.py says what then applies).
ROUTER_KV_READ_FAILURES: Final = "router_kv_capacity_read_failures_total"
# counters (--dispatch prefix, router/prefix_index.py; 0 without): prompt blocks of the
# requests sent with their prompt hashed, and of those the ones the router's index held on
# the endpoint chosen: the router's estimated hit rate, beside vLLM's prefix_cache_hits /
# queries.
ROUTER_PREFIX_QUERIES: Final = "router_prefix_cache_queries_total"
ROUTER_PREFIX_HITS: Final = "router_prefix_cache_hits_total"
# counter{reason}: requests and connections the router refused or ended for what the client
# sent or did (issue 39): the limits at the door (CLIENT_ERROR_REASONS), a budget or body it
# would not forward (vLLM's BadRequestError, bad_request_body), a reader that stalled.
ROUTER_CLIENT_ERRORS: Final = "router_client_errors_total"
CLIENT_ERROR_REASONS: Final = (
    "url_too_long",  # 414: --max-url-bytes
    "header_too_large",  # 431: --max-header-bytes
    "too_many_headers",  # 431: --max-headers
    "header_timeout",  # 408: --header-timeout-s
    "body_timeout",  # 408: --body-timeout-s
    "too_many_connections",  # 503: --max-connections
    "held_bytes",  # 503: --max-held-bytes
    "write_stall",  # connection cut: --write-stall-s
    "bad_budget",  # 400: a budget vLLM would refuse (router/tokens.py)
    "bad_body",  # 400: a body nested too deeply to read
)
# gauge: bytes of request bodies waiting to be admitted (held for a slot; --max-held-bytes)
ROUTER_HELD_BYTES: Final = "router_held_bytes"
# A router with several model pools (router/model_pools.py) labels every series above with the
# pool's model; a single-pool router has no such label. Sums over it give the router's whole.
ROUTER_MODEL_LABEL: Final = "model"

ENDPOINT_STATES: Final = ("ready", "draining", "unhealthy")

ROUTER_METRICS: Final[dict[str, str]] = {
    ROUTER_INFLIGHT: "gauge",
    ROUTER_QUEUED: "gauge",
    ROUTER_ENDPOINT_INFLIGHT: "gauge",
    ROUTER_ENDPOINTS: "gauge",
    ROUTER_SLOTS_PER_ENDPOINT: "gauge",
    ROUTER_REQUESTS_RECEIVED: "counter",
    ROUTER_REQUESTS: "counter",
    ROUTER_REQUEST_DURATION: "histogram",
    ROUTER_TTFB: "histogram",
    ROUTER_UPSTREAM_ERRORS: "counter",
    ROUTER_RETRIES: "counter",
    ROUTER_HELD_LATE: "counter",
    ROUTER_CLASS_QUEUED: "gauge",
    ROUTER_CLASS_HELD: "counter",
    ROUTER_CLASS_REQUESTS: "counter",
    ROUTER_CLASS_WAIT: "histogram",
    ROUTER_ENDPOINT_INFLIGHT_TOKENS: "gauge",
    ROUTER_ENDPOINT_KV_TOKENS: "gauge",
    ROUTER_QUEUED_TOKENS: "gauge",
    ROUTER_KV_READ_FAILURES: "counter",
    ROUTER_PREFIX_QUERIES: "counter",
    ROUTER_PREFIX_HITS: "counter",
    ROUTER_CLIENT_ERRORS: "counter",
    ROUTER_HELD_BYTES: "gauge",
}

# --- Scaler (Prometheus text at GET /metrics on the scaler's --metrics-port) -----------
SCALER_METRIC_VALUE: Final = "inflight_scaler_metric_value"  # gauge{metric_name}: sent to KEDA
SCALER_METRIC_TARGET: Final = "inflight_scaler_metric_target"  # gauge{metric_name}
SCALER_DESIRED_REPLICAS: Final = "inflight_scaler_desired_replicas"  # gauge{metric_name}
SCALER_SATURATION: Final = "inflight_scaler_saturation"  # gauge{metric_name}
SCALER_ACTIVE: Final = "inflight_scaler_active"  # gauge{metric_name}: 1 active, 0 idle
SCALER_DECISIONS: Final = "inflight_scaler_decisions_total"  # counter{metric_name,direction}
SCALER_QUERY_DURATION: Final = "inflight_scaler_query_duration_seconds"  # histogram
SCALER_ERRORS: Final = "inflight_scaler_errors_total"  # counter{kind}
SCALER_GRPC_REQUESTS: Final = "inflight_scaler_grpc_requests_total"  # counter{method,code}
# gauge{metric_name,dimension}: 1 for the capacity dimension that binds over the scale-up
# window (requests, kv_tokens: inflight.control.capacity), 0 for the others
SCALER_CAPACITY_BINDING: Final = "inflight_scaler_capacity_binding"
# gauge{metric_name,dimension}: mean L in each capacity dimension over the scale-up window
# (requests: L; kv_tokens: the KV-equivalent L); a dimension not measured has no series
SCALER_DIMENSION_INFLIGHT: Final = "inflight_scaler_dimension_inflight"
# gauge{metric_name}: 1 while the latest decision held a scale-up that could not arrive in
# time (startupSeconds: inflight.control.policy.late_scale_up), 0 otherwise; a hold changes
# no replica count, so this is where it shows
SCALER_SCALE_UP_HELD: Final = "inflight_scaler_scale_up_held"
# counter{metric_name}: GetMetrics decisions that held such a scale-up (the gauge's 1s,
# counted: rate() is the share of KEDA's polls held, on any scrape interval)
SCALER_HELD_DECISIONS: Final = "inflight_scaler_held_decisions_total"

SCALER_METRICS: Final[dict[str, str]] = {
    SCALER_METRIC_VALUE: "gauge",
    SCALER_METRIC_TARGET: "gauge",
    SCALER_DESIRED_REPLICAS: "gauge",
    SCALER_SATURATION: "gauge",
    SCALER_ACTIVE: "gauge",
    SCALER_DECISIONS: "counter",
    SCALER_QUERY_DURATION: "histogram",
    SCALER_ERRORS: "counter",
    SCALER_GRPC_REQUESTS: "counter",
    SCALER_CAPACITY_BINDING: "gauge",
    SCALER_DIMENSION_INFLIGHT: "gauge",
    SCALER_SCALE_UP_HELD: "gauge",
    SCALER_HELD_DECISIONS: "counter",
}

# Values of SCALER_ERRORS' ``kind`` label (external_scaler/errors.py, servicer.py, sources/).
SCALER_ERROR_SOURCE: Final = "source_error"  # source unreachable, error status, bad data
SCALER_ERROR_SOURCE_TIMEOUT: Final = "source_timeout"  # source did not answer in time
SCALER_ERROR_SOURCE_EMPTY: Final = "source_empty"  # source answered with no sample of L
SCALER_ERROR_SOURCE_REJECTED: Final = "source_rejected"  # source refused the query (metadata)
SCALER_ERROR_NO_SAMPLES: Final = "no_samples"  # the policy found no sample in its window
SCALER_ERROR_INVALID_ARGUMENT: Final = "invalid_argument"  # bad ScaledObject metadata
SCALER_ERROR_DEADLINE: Final = "deadline"  # the caller's deadline left no time to ask
SCALER_ERROR_INTERNAL: Final = "internal"  # a bug; logged with its traceback
SCALER_ERROR_ROUTER_POLL: Final = "router_poll"  # direct source: a poll of a router failed
SCALER_ERROR_TOO_MANY_STREAMS: Final = "too_many_streams"  # --max-streams reached
SCALER_ERROR_TOO_MANY_TRIGGERS: Final = "too_many_triggers"  # --max-triggers reached
SCALER_ERROR_TOO_MANY_QUERIES: Final = "too_many_queries"  # --max-queries-per-s reached
# These two are answered, not refused: a window that may understate L raises or keeps the
# replica count, never lowers it (inflight.control.policy.guard); counted per GetMetrics.
SCALER_ERROR_SOURCE_PARTIAL: Final = "source_partial"  # a target feeding L was down in the window
SCALER_ERROR_SOURCE_STALE: Final = "source_stale"  # samples of L missing: a gap, stale or frozen

SCALER_ERROR_KINDS: Final = (
    SCALER_ERROR_SOURCE,
    SCALER_ERROR_SOURCE_TIMEOUT,
    SCALER_ERROR_SOURCE_EMPTY,
    SCALER_ERROR_SOURCE_REJECTED,
    SCALER_ERROR_NO_SAMPLES,
    SCALER_ERROR_INVALID_ARGUMENT,
    SCALER_ERROR_DEADLINE,
    SCALER_ERROR_INTERNAL,
    SCALER_ERROR_ROUTER_POLL,
    SCALER_ERROR_TOO_MANY_STREAMS,
    SCALER_ERROR_TOO_MANY_TRIGGERS,
    SCALER_ERROR_TOO_MANY_QUERIES,
    SCALER_ERROR_SOURCE_PARTIAL,
    SCALER_ERROR_SOURCE_STALE,
)

# --- Prometheus' own series (written by Prometheus for every target it scrapes) ----------
PROMETHEUS_UP: Final = "up"  # gauge{job,instance}: 1 when the last scrape succeeded, else 0

PROMETHEUS_METRICS: Final[dict[str, str]] = {PROMETHEUS_UP: "gauge"}

# --- vLLM (and the emulator, which must be indistinguishable) --------------------------
# Checked against the release pinned in inflight/emulator/vllm_metrics.json (read from vLLM's wheel;
# tests/unit/test_vllm_contract.py). Names are those a query uses: a counter's ``_total``.
# Every series carries {model_name, engine}: engine is the engine core's index ("0" unless
# vLLM runs data-parallel engines behind one API server).
VLLM_RUNNING: Final = "vllm:num_requests_running"  # gauge: in the running batch
VLLM_WAITING: Final = "vllm:num_requests_waiting"  # gauge: queued in the replica
VLLM_KV_CACHE_USAGE: Final = "vllm:kv_cache_usage_perc"  # gauge: 0–1
VLLM_PROMPT_TOKENS: Final = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS: Final = "vllm:generation_tokens_total"
VLLM_REQUEST_SUCCESS: Final = "vllm:request_success_total"  # {finished_reason}
VLLM_E2E_LATENCY: Final = "vllm:e2e_request_latency_seconds"
VLLM_TTFT: Final = "vllm:time_to_first_token_seconds"
VLLM_ITL: Final = "vllm:inter_token_latency_seconds"
VLLM_QUEUE_TIME: Final = "vllm:request_queue_time_seconds"
# histograms of tokens per finished request (buckets: 1-2-5 up to --max-model-len, computed
# at run time: inflight.emulator.metrics.request_tokens_buckets); ``sim trace-from-prometheus``
# reads
# a trace's prompt and output lengths from them
VLLM_REQUEST_PROMPT_TOKENS: Final = "vllm:request_prompt_tokens"
VLLM_REQUEST_GENERATION_TOKENS: Final = "vllm:request_generation_tokens"
# the KV cache: waiting split by why (capacity: no slot or no KV blocks; deferred: LoRA, KV
# transfer), and preemptions, counted when the preempted request next produces output
VLLM_WAITING_BY_REASON: Final = "vllm:num_requests_waiting_by_reason"  # gauge {reason}
VLLM_PREEMPTIONS: Final = "vllm:num_preemptions_total"
# automatic prefix caching, in tokens: each new request's prompt looked up, and the part of
# it found cached (a preempted request's lookups are not counted here)
VLLM_PREFIX_CACHE_QUERIES: Final = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_CACHE_HITS: Final = "vllm:prefix_cache_hits_total"
VLLM_MODEL_LABEL: Final = "model_name"
VLLM_ENGINE_LABEL: Final = "engine"
VLLM_FINISHED_REASON_LABEL: Final = "finished_reason"
VLLM_REASON_LABEL: Final = "reason"
VLLM_WAITING_REASONS: Final = ("capacity", "deferred")
# an info gauge (value 1) whose labels are the engine's cache config and ``engine``, no
# ``model_name``; the labels read here (a live scrape has ~40)
VLLM_CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
VLLM_CACHE_BLOCK_SIZE_LABEL: Final = "block_size"
VLLM_CACHE_NUM_BLOCKS_LABEL: Final = "num_gpu_blocks"
VLLM_CACHE_SIZE_TOKENS_LABEL: Final = "kv_cache_size_tokens"

VLLM_METRICS: Final[dict[str, str]] = {
    VLLM_RUNNING: "gauge",
    VLLM_WAITING: "gauge",
    VLLM_KV_CACHE_USAGE: "gauge",
    VLLM_PROMPT_TOKENS: "counter",
    VLLM_GENERATION_TOKENS: "counter",
    VLLM_REQUEST_SUCCESS: "counter",
    VLLM_E2E_LATENCY: "histogram",
    VLLM_TTFT: "histogram",
    VLLM_ITL: "histogram",
    VLLM_QUEUE_TIME: "histogram",
    VLLM_REQUEST_PROMPT_TOKENS: "histogram",
    VLLM_REQUEST_GENERATION_TOKENS: "histogram",
    VLLM_WAITING_BY_REASON: "gauge",
    VLLM_PREEMPTIONS: "counter",
    VLLM_PREFIX_CACHE_QUERIES: "counter",
    VLLM_PREFIX_CACHE_HITS: "counter",
}
# info metrics (labels that describe the engine, not {model_name, engine})
VLLM_INFO_METRICS: Final[dict[str, str]] = {VLLM_CACHE_CONFIG_INFO: "gauge"}

# --- ScaledObject trigger metadata (strings; see external_scaler) -----------------------
META_METRIC_NAME: Final = "metricName"
META_SELECTOR: Final = "selector"
# One model of a router with several model pools (router/model_pools.py): the router's series
# are read with ``model="<this>"`` (vLLM's with ``model_name``), Prometheus' ``up`` without
# it (a down router makes every model's L partial). "" (default): the router's whole L.
META_MODEL: Final = "model"
META_SLOTS_PER_REPLICA: Final = "slotsPerReplica"
META_TARGET_SATURATION: Final = "targetSaturation"
META_SCALE_UP_WINDOW_S: Final = "scaleUpWindowSeconds"
META_SCALE_DOWN_WINDOW_S: Final = "scaleDownWindowSeconds"
META_ACTIVATION_INFLIGHT: Final = "activationInflight"
META_SOURCE: Final = "source"
# Which policy turns the window into a value: "saturation" (the product) or "qps" (the
# seed's arrival-rate rule, kept only as the benchmark's comparison baseline).
META_POLICY: Final = "policy"
# Multiplies every window and divides every rate the scaler uses (1.0 in production;
# set by ``inflight up`` / ``inflight bench`` when the emulator runs at a small time-scale).
META_TIME_SCALE: Final = "timeScale"
# The HPA's tolerances, as the ScaledObject's ``advanced.horizontalPodAutoscalerConfig.
# behavior.scaleUp/scaleDown.tolerance`` set them (Kubernetes' 10 % unless set): the
# scaler only uses them to predict the replica count the HPA derives (its ``desired``
# gauge); the value it returns does not change.
META_HPA_SCALE_UP_TOLERANCE: Final = "hpaScaleUpTolerance"
META_HPA_SCALE_DOWN_TOLERANCE: Final = "hpaScaleDownTolerance"
# Prometheus' scrape interval for the routers (wall seconds, never time-scaled): the
# Prometheus source answers UNAVAILABLE when the newest sample of L is older than
# ``external_scaler.sources.promql.MAX_SAMPLE_AGE_SCRAPES`` of these (30 s → 90 s).
META_SCRAPE_INTERVAL_S: Final = "scrapeIntervalSeconds"
# Start-up-aware headroom (0: off): while arrivals grow, add the L that growth would bring
# over this many seconds (a replica's start-up plus the loop's lag), estimated from the
# change of the arrival rate between the last two ``growthWindowSeconds``.
META_GROWTH_HORIZON_S: Final = "growthHorizonSeconds"
META_GROWTH_WINDOW_S: Final = "growthWindowSeconds"
# A floor learned from recent peaks (0: off): the value is at least ``floorFraction`` x the
# highest L (smoothed over the scale-up window) of the last ``floorWindowSeconds``, so a
# burst shorter than a replica's start-up finds replicas the previous bursts asked for.
META_FLOOR_WINDOW_S: Final = "floorWindowSeconds"
META_FLOOR_FRACTION: Final = "floorFraction"
# How the floor weighs a peak ("none" | "linear": by 1 - age / window) and what it
# remembers ("inflight": L | "demand": L capped at arrival rate x service time).
META_FLOOR_DECAY: Final = "floorDecay"
META_FLOOR_PEAK: Final = "floorPeak"
# Which level of the window's peaks the floor holds ("peak": the highest; "quantile": the
# level exceeded for at most ``floorQuantile`` of the window, time-weighted; "recurrent":
# the highest level reached in ``floorRecurrences`` separate peaks, a dip to half between).
META_FLOOR_STATISTIC: Final = "floorStatistic"
META_FLOOR_QUANTILE: Final = "floorQuantile"
META_FLOOR_RECURRENCES: Final = "floorRecurrences"
# With "recurrent": a peak that has not come back is still held this many seconds (0: not).
META_FLOOR_SINGLE_WINDOW_S: Final = "floorSingleWindowSeconds"
# The fraction that peak is held at (0: ``floorFraction``'s), e.g. a lower one for longer.
META_FLOOR_SINGLE_FRACTION: Final = "floorSingleFraction"
# The window L is smoothed over before the floor remembers it ("": the scale-up window; 0:
# each sample as scraped, so a burst shorter than the scale-up window keeps its height).
META_FLOOR_SMOOTHING_S: Final = "floorSmoothingSeconds"
# The floor lets a replica of the ready fleet go only when what it holds fits in one fewer
# with this fraction of their capacity to spare (0: off), as the HPA's tolerance does for L.
META_FLOOR_TOLERANCE: Final = "floorTolerance"
# The fraction held of the level L reached in floorRecurrences separate peaks that each
# ended sooner than startupSeconds (0: off): peaks no scale-up can meet.
META_FLOOR_SHORT_FRACTION: Final = "floorShortFraction"
# The floor keeps the largest fleet L filled in this many separate flashes of the floor
# window, each over sooner than startupSeconds (0: off).
META_FLOOR_FILLED_FLASHES: Final = "floorFilledFlashes"
# No scale-up that cannot arrive in time (0: off): a replica's start-up (seconds), by default
# a lower bound on it (30);
# while L's excursions above the ready fleet's capacity in the last
# ``excursionWindowSeconds`` all ended sooner than that, a new one adds no replica until it
# has lasted longer (at most a start-up) or risen higher than ``excursionMargin`` x the
# longest or highest of them (inflight.control.policy.late_scale_up).
META_STARTUP_S: Final = "startupSeconds"
# Bursts that come back on a period, met ahead (0: off): from this many seconds before the
# next burst is due (a replica's start-up and the loop's lag) until it comes, the value is at
# least the level the bursts reached (inflight.control.recurrence).
META_ANTICIPATE_S: Final = "anticipateSeconds"
META_EXCURSION_WINDOW_S: Final = "excursionWindowSeconds"
# Levels L came back to sooner than a replica could (0: off): a level L fell below for
# longer than the scale-down window but at most this many seconds, and then reached again,
# is held this many seconds after L last reached it (inflight.control.recurrence.rebound_level).
META_REBOUND_WINDOW_S: Final = "reboundWindowSeconds"
# A backlog that grows because the arrivals outrun the fleet is sized by the arrivals plus
# what drains it in this many seconds, not by its whole size (0: off; experimental).
META_BACKLOG_DRAIN_S: Final = "backlogDrainSeconds"
# Queueing headroom over the peak of L, square-root staffing: L + beta x sqrt(L) (0: off).
META_QUEUE_HEADROOM: Final = "queueHeadroom"
# The operator's SLO, for sizing the fleet with Erlang C on the arrivals and service time
# measured (inflight.control.slo_sizing): the TTFT (seconds; 0: the stage off) and the
# share of requests that must meet it.
META_SLO_TTFT_S: Final = "sloTtftSeconds"
META_SLO_GOAL: Final = "sloGoal"
META_EXCURSION_MARGIN: Final = "excursionMargin"
# Whose excursions are that evidence: "same" (the fleet ready now) or "larger" (a larger
# fleet's too: L above the ready fleet's capacity while more replicas were ready).
META_EXCURSION_FLEETS: Final = "excursionFleets"
# Which excursions a change of the ready count ended turn that hold off: "any" (every one)
# or "own" (only one startupSeconds or longer; a shorter one is no evidence either way).
META_EXCURSION_FLEET_CHANGE: Final = "excursionFleetChange"
# The ScaledObject's ``minReplicaCount`` and ``maxReplicaCount``, repeated in the trigger
# (KEDA does not pass them to an external scaler): the bounds KEDA and its HPA clamp the
# count to, so the policy knows when a lower answer cannot lower the count (already at the
# minimum) and when a higher one is the most it can be (inflight.control.policy.guard).
META_MIN_REPLICA_COUNT: Final = "minReplicaCount"
META_MAX_REPLICA_COUNT: Final = "maxReplicaCount"
# Saturation's capacity dimensions (docs/capacity.md): "auto" (every dimension whose series
# are there: request slots and vLLM's KV tokens) or "requests" (slots only, as before).
# ``capacitySelector``: label matchers for vLLM's series ("": the ``selector``).
META_CAPACITY: Final = "capacity"
META_CAPACITY_SELECTOR: Final = "capacitySelector"

# The defaults, typed: the one place they are written. ``METADATA_DEFAULTS`` (what the
# scaler assumes for a key the trigger leaves out) is their text; the policy's own defaults
# (``inflight.control.policy.PolicySpec``), the scaler's (``external_scaler.metadata``), the
# metadata ``inflight up`` and ``inflight sim`` send (``inflight.control.trigger``) and the
# dashboards' thresholds read them; the ScaledObject in ``manifests/`` states some of them
# for its reader, and ``tests/component/test_manifests_contract.py`` holds it to these.
DEFAULT_METRIC_NAME: Final = "inflight"
DEFAULT_SLOTS_PER_REPLICA: Final = 4  # vLLM's --max-num-seqs in the reference setup
DEFAULT_TARGET_SATURATION: Final = 1.0  # add a replica as soon as any request waits
DEFAULT_SCALE_UP_WINDOW_S: Final = 10
DEFAULT_SCALE_DOWN_WINDOW_S: Final = 60
DEFAULT_ACTIVATION_INFLIGHT: Final = 0
DEFAULT_TIME_SCALE: Final = 1.0
#: kube-controller-manager's --horizontal-pod-autoscaler-tolerance default: the HPA keeps
#: its count while |usage ÷ (target × current) − 1| ≤ this (``inflight.control.hpa_math``).
HPA_TOLERANCE: Final = 0.1
# the Prometheus Operator's default scrape interval; Prometheus' own default is 60 s
DEFAULT_SCRAPE_INTERVAL_S: Final = 30
DEFAULT_GROWTH_HORIZON_S: Final = 0  # off
DEFAULT_GROWTH_WINDOW_S: Final = 60
# The floor learned from recent peaks, on by default: chosen out of sample
# (results/2026-12-02-default-vs-frontier: the best mean frontier gap on ramp, spike, bursty
# seed 1 and azure-code's first 20 minutes) and judged on held-out traffic, trace windows
# warmed up (results/2026-12-02-frontier-warm). Partial data is judged over the decision's
# span (PolicySpec.decision_span_s), so its 900 s memory does not stretch a router blip.
DEFAULT_FLOOR_WINDOW_S: Final = 900
PROPOSED_FLOOR_WINDOW_S: Final = DEFAULT_FLOOR_WINDOW_S
DEFAULT_FLOOR_FRACTION: Final = 0.6
DEFAULT_FLOOR_DECAY: Final = "none"
DEFAULT_FLOOR_PEAK: Final = "inflight"
# Which level of those peaks: the level that recurs (two separate peaks) at floorFraction,
# and a peak that has not come back yet at 0.3 of it for the whole window ("C", chosen on
# 16 in-sample rows and judged on 18 held-out rows by a rule written before them:
# results/2026-12-02-single-fraction; before it, "peak": the highest at floorFraction).
DEFAULT_FLOOR_STATISTIC: Final = "recurrent"
DEFAULT_FLOOR_QUANTILE: Final = 0.1
DEFAULT_FLOOR_RECURRENCES: Final = 2
DEFAULT_FLOOR_SINGLE_WINDOW_S: Final = 900
DEFAULT_FLOOR_SINGLE_FRACTION: Final = 0.3  # 0: floorFraction's
# A lower bound on a replica's start-up, not the replica's own (the scaler cannot know it):
# the emulator's and the simulator's 30 s, about what vLLM's CPU build takes here. Below the
# true start-up it holds fewer scale-ups than it could, none whose replica would serve in
# time. Chosen on 16 in-sample rows and adopted on 13 held-out rows by a rule written
# before them (results/2026-12-03-startup-default); set yours, or 0 for off.
DEFAULT_STARTUP_S: Final = 30
# Bursts that come back on a period met 130 s ahead (the scenarios' 100 s start-up plus 30 s
# of the loop's lag), chosen on 16 in-sample rows and adopted on 13 held-out rows by a rule
# written before them (results/2026-12-02-anticipate); 0 turns it off.
DEFAULT_ANTICIPATE_S: Final = 130
# Left out of the metadata, anticipateSeconds follows a longer startupSeconds: the start-up
# plus this much of the loop's lag (as 130 is 100 + 30), never under the default.
ANTICIPATE_LOOP_LAG_S: Final = 30
DEFAULT_EXCURSION_WINDOW_S: Final = 900
DEFAULT_REBOUND_WINDOW_S: Final = 0  # off
DEFAULT_BACKLOG_DRAIN_S: Final = 0  # off
# beta (0: off). Tried with a 180 s scale-down window as the default and not adopted: better
# mean frontier gap on fresh draws, worse on the README's held-out rows and more often
# dominated (results/2026-12-06-headroom-report, docs/decisions.md); experimental.
DEFAULT_QUEUE_HEADROOM: Final = 0.0
# The SLO stage (Erlang C over the slots at the arrivals and service time measured; the
# fleet is at least the one that keeps all but 1 - goal of the requests from waiting
# longer than the TTFT): the default since results/2026-12-07-slo-fixed-report (fresh draws
# and the README's rows, by a rule written before them); the goal was chosen on choose
# draws (results/2026-12-07-slo-fixed-choose). 2 s is the reference SLO; set your own.
DEFAULT_SLO_TTFT_S: Final = 2
DEFAULT_SLO_GOAL: Final = 0.99
# A late scale-up's evidence: every fleet's excursions, an excursion a change of the fleet
# ended sooner than startupSeconds after it began is none (adopted on 27 held-out row-runs
# by a rule written before them, results/2026-12-03-fleet-change; before it "same", "any"),
# and a new one held only while it lasts and rises no more than the recent ones: margin 1
# (1.5 from 2026-12-03T21:00Z until results/2026-12-03-margin: it held a rising load on
# diurnal seeds 14-21, -1.38 against -0.51; tied on 15 new rows and the 15 phase rows).
DEFAULT_EXCURSION_MARGIN: Final = 1.0
DEFAULT_EXCURSION_FLEETS: Final = "any"
DEFAULT_EXCURSION_FLEET_CHANGE: Final = "own"
# KEDA's own defaults for a ScaledObject that leaves them out. Both are the cautious
# assumption for a trigger that does not state them: a minimum of 0 treats every answer
# below the ready count as a scale-down, a maximum of 100 is rarely reached.
DEFAULT_MIN_REPLICA_COUNT: Final = 0
DEFAULT_MAX_REPLICA_COUNT: Final = 100
DEFAULT_CAPACITY: Final = "auto"

METADATA_DEFAULTS: Final[dict[str, str]] = {
    META_METRIC_NAME: DEFAULT_METRIC_NAME,
    META_SELECTOR: "",
    META_MODEL: "",
    META_SLOTS_PER_REPLICA: str(DEFAULT_SLOTS_PER_REPLICA),
    META_TARGET_SATURATION: str(DEFAULT_TARGET_SATURATION),
    META_SCALE_UP_WINDOW_S: str(DEFAULT_SCALE_UP_WINDOW_S),
    META_SCALE_DOWN_WINDOW_S: str(DEFAULT_SCALE_DOWN_WINDOW_S),
    META_ACTIVATION_INFLIGHT: str(DEFAULT_ACTIVATION_INFLIGHT),
    META_SOURCE: "router",
    META_POLICY: "saturation",
    META_TIME_SCALE: str(DEFAULT_TIME_SCALE),
    META_HPA_SCALE_UP_TOLERANCE: str(HPA_TOLERANCE),
    META_HPA_SCALE_DOWN_TOLERANCE: str(HPA_TOLERANCE),
    META_SCRAPE_INTERVAL_S: str(DEFAULT_SCRAPE_INTERVAL_S),
    META_GROWTH_HORIZON_S: str(DEFAULT_GROWTH_HORIZON_S),
    META_GROWTH_WINDOW_S: str(DEFAULT_GROWTH_WINDOW_S),
    META_FLOOR_WINDOW_S: str(DEFAULT_FLOOR_WINDOW_S),
    META_FLOOR_FRACTION: str(DEFAULT_FLOOR_FRACTION),
    META_FLOOR_DECAY: DEFAULT_FLOOR_DECAY,
    META_FLOOR_PEAK: DEFAULT_FLOOR_PEAK,
    META_FLOOR_STATISTIC: DEFAULT_FLOOR_STATISTIC,
    META_FLOOR_QUANTILE: str(DEFAULT_FLOOR_QUANTILE),
    META_FLOOR_RECURRENCES: str(DEFAULT_FLOOR_RECURRENCES),
    META_FLOOR_SINGLE_WINDOW_S: str(DEFAULT_FLOOR_SINGLE_WINDOW_S),
    META_FLOOR_SINGLE_FRACTION: str(DEFAULT_FLOOR_SINGLE_FRACTION),
    META_FLOOR_SMOOTHING_S: "",
    META_FLOOR_TOLERANCE: "0",
    META_FLOOR_SHORT_FRACTION: "0",
    META_FLOOR_FILLED_FLASHES: "0",
    META_STARTUP_S: str(DEFAULT_STARTUP_S),
    META_ANTICIPATE_S: str(DEFAULT_ANTICIPATE_S),
    META_EXCURSION_WINDOW_S: str(DEFAULT_EXCURSION_WINDOW_S),
    META_REBOUND_WINDOW_S: str(DEFAULT_REBOUND_WINDOW_S),
    META_BACKLOG_DRAIN_S: str(DEFAULT_BACKLOG_DRAIN_S),
    META_QUEUE_HEADROOM: str(DEFAULT_QUEUE_HEADROOM),
    META_SLO_TTFT_S: str(DEFAULT_SLO_TTFT_S),
    META_SLO_GOAL: str(DEFAULT_SLO_GOAL),
    META_EXCURSION_MARGIN: str(DEFAULT_EXCURSION_MARGIN),
    META_EXCURSION_FLEETS: DEFAULT_EXCURSION_FLEETS,
    META_EXCURSION_FLEET_CHANGE: DEFAULT_EXCURSION_FLEET_CHANGE,
    META_MIN_REPLICA_COUNT: str(DEFAULT_MIN_REPLICA_COUNT),
    META_MAX_REPLICA_COUNT: str(DEFAULT_MAX_REPLICA_COUNT),
    META_CAPACITY: DEFAULT_CAPACITY,
    META_CAPACITY_SELECTOR: "",
}

# --- Derived signals (PromQL). ``{sel}`` is a validated label-matcher list, may be empty.
PROMQL_L: Final = "sum(" + ROUTER_INFLIGHT + "{{{sel}}})"
PROMQL_L_VLLM: Final = "sum(" + VLLM_RUNNING + "{{{sel}}}) + sum(" + VLLM_WAITING + "{{{sel}}})"
PROMQL_LAMBDA: Final = "sum(rate(" + ROUTER_REQUESTS_RECEIVED + "{{{sel}}}[1m]))"
PROMQL_W: Final = (
    "sum(rate(" + ROUTER_REQUEST_DURATION + "_sum{{{sel}}}[1m]))"
    " / sum(rate(" + ROUTER_REQUEST_DURATION + "_count{{{sel}}}[1m]))"
)
# A model pool's slots × its ready endpoints (max over router replicas, which see the
# same endpoints), summed over the pools of a multi-pool router; a single-pool router has
# no ``model`` label, one group: max(slots) × max(ready).
PROMQL_CAPACITY: Final = (
    "sum(max by (" + ROUTER_MODEL_LABEL + ") (" + ROUTER_SLOTS_PER_ENDPOINT + "{{{sel}}})"
    " * on ("
    + ROUTER_MODEL_LABEL
    + ") max by ("
    + ROUTER_MODEL_LABEL
    + ") ("
    + ROUTER_ENDPOINTS
    + '{{state="ready"{comma_sel}}}))'
)

# The KV dimension's series (inflight.control.capacity), summed over vLLM's replicas.
PROMQL_KV_USAGE: Final = "sum(" + VLLM_KV_CACHE_USAGE + "{{{sel}}})"
PROMQL_KV_RUNNING: Final = "sum(" + VLLM_RUNNING + "{{{sel}}})"
PROMQL_KV_WAITING: Final = (
    "sum(" + VLLM_WAITING_BY_REASON + "{{" + VLLM_REASON_LABEL + '="capacity"{comma_sel}}})'
)
PROMQL_KV_CONFIG: Final = VLLM_CACHE_CONFIG_INFO + "{{{sel}}}"

# Targets that feed L and are down now: a target whose last scrape failed (``up`` 0) and
# that exposed L in the last TARGET_MEMORY (so it is a router, not a replica or the
# scaler). L summed without them is partial. A target removed from discovery has no
# ``up`` series any more: it is gone, not missing. One series per target (job, instance).
TARGET_MEMORY: Final = "1h"
PROMQL_ROUTERS_DOWN: Final = (
    "(" + PROMETHEUS_UP + "{{{sel}}} == 0) and on (job, instance) "
    "last_over_time(" + ROUTER_INFLIGHT + "{{{sel}}}[" + TARGET_MEMORY + "])"
)
PROMQL_VLLM_DOWN: Final = (
    "(" + PROMETHEUS_UP + "{{{sel}}} == 0) and on (job, instance) "
    "last_over_time(" + VLLM_RUNNING + "{{{sel}}}[" + TARGET_MEMORY + "])"
)


# --- Recording rules (``dashboards/rules``; level:metric:operations, Prometheus' convention).
# Each is grouped ``by (namespace, job)``: one series per deployment in a shared Prometheus.
REC_L: Final = "inflight:router_inflight_requests:sum"
REC_QUEUED: Final = "inflight:router_queued_requests:sum"
REC_LAMBDA: Final = "inflight:router_requests_received:rate1m"
REC_W: Final = "inflight:router_request_duration_seconds:mean1m"
REC_READY: Final = "inflight:router_endpoints_ready:max"
REC_CAPACITY: Final = "inflight:capacity_slots:max"
REC_SATURATION: Final = "inflight:saturation:ratio"
REC_SPREAD: Final = "inflight:endpoint_inflight_spread:max_min"
REC_LITTLE: Final = "inflight:littles_law:ratio5m"

RECORDED_NAMES: Final = (
    REC_L,
    REC_QUEUED,
    REC_LAMBDA,
    REC_W,
    REC_READY,
    REC_CAPACITY,
    REC_SATURATION,
    REC_SPREAD,
    REC_LITTLE,
)


def promql(template: str, selector: str = "") -> str:
    """Fill a PROMQL_* template with a label-matcher list (already validated).

    >>> promql(PROMQL_L, 'namespace="llm"')
    'sum(router_inflight_requests{namespace="llm"})'
    """
    return template.format(sel=selector, comma_sel=("," + selector) if selector else "")
