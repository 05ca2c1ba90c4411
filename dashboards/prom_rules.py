"""The Prometheus rules, defined once: recording rules for L, λ, W, capacity, saturation,
and the alerts that page on saturation, never on traffic.

``inflight dashboards build`` renders these into the Prometheus rule file
(``dashboards/rules/inflight.rules.yaml``, which promtool tests) and into the
PrometheusRule manifest (``manifests/generated/prometheusrule.yaml``), so the two can
not drift. Every alert names its runbook section in ``docs/runbook.md``.

Why these ``for:`` durations (production, 1.0 time-scale):

* a vLLM replica of the reference model takes about 30 s to several minutes to start,
  and the scaler holds L for 60 s before scaling down, so saturation above 1.0 for a
  few minutes is the autoscaler working; 10 m is the autoscaler failing;
* imbalance and Little's Law drift are slow, ticket-level faults (15 m);
* scaler errors turn into KEDA's fallback replica count at once, so 5 m;
* no ready endpoint while requests arrive is an outage; 5 m covers a scale-from-zero
  start of the reference model;
* the router's prefix index drifting from what the engines cache costs latency, not
  requests: 30 m of it (over 15 m rates) is a ticket;
* the KV cache binding instead of the slots is a sizing fact, not an outage (the scaler
  adds replicas for it under ``capacity: auto``): 15 m of it is a ticket; the same at a
  ceiling (the scaler asking for more than are ready) pages like
  InflightSaturatedAtMaxReplicas, which cannot see it (L ÷ slots reads 1.0 while half the
  requests wait for KV in vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from dashboards import signals as s
from inflight import names as n
from inflight.control.capacity import DIMENSION_KV

RUNBOOK_PATH: Final = "docs/runbook.md"
#: InflightPrefixIndexDiverges: the two hit rates this far apart (absolute). The router
#: counts whole blocks and vLLM every prompt token, so vLLM's rate reads a little lower even
#: when the index is right; a quarter is far past that.
PREFIX_DIVERGENCE: Final = 0.25
GROUP_RECORDING: Final = "inflight.recording"
GROUP_ALERTS: Final = "inflight.alerts"


@dataclass(frozen=True)
class Recording:
    """A recording rule: ``record`` is the new series name, ``expr`` its PromQL."""

    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    """An alerting rule; ``for_s`` in seconds; ``description`` may use ``$value``."""

    name: str
    expr: str
    for_s: int
    severity: str
    summary: str
    description: str

    @property
    def runbook_anchor(self) -> str:
        """GitHub's anchor for the runbook heading, which is the alert name."""
        return self.name.lower()


RECORDINGS: Final = (
    Recording(n.REC_L, s.rec_l()),
    Recording(n.REC_QUEUED, s.rec_queued()),
    Recording(n.REC_LAMBDA, s.rec_lambda()),
    Recording(n.REC_W, s.rec_w()),
    Recording(n.REC_READY, s.rec_ready()),
    Recording(n.REC_CAPACITY, s.rec_capacity()),
    Recording(n.REC_SATURATION, s.rec_saturation()),
    Recording(n.REC_SPREAD, s.rec_spread()),
    Recording(n.REC_LITTLE, s.rec_little()),
)

# A model pool's series (router/model_pools.py) say which model: "ns/job model m".
_WHERE = "{{ $labels.namespace }}/{{ $labels.job }}{{ with $labels.model }} model {{ . }}{{ end }}"

# The scaler's error kinds that mean "no trustworthy window of L from its source", so KEDA
# is answered UNAVAILABLE and scales on its fallback: the source failed, timed out or had
# no data (``no_samples``: the policy found none in its window), or, with the direct
# source, a poll of a router failed (the same failure without Prometheus: an incomplete
# poll is dropped, and with none complete the calls answer ``source_empty``).
# ``source_rejected`` and ``invalid_argument`` are metadata faults, ``deadline`` is the
# caller's, ``internal`` is a bug: not this alert. Nor are ``source_partial`` and
# ``source_stale``: a window that may understate L is answered (a raise or a hold, never a
# drop; external_scaler/README.md), so KEDA does not fall back on it.
SOURCE_FAILURE_KINDS: Final = (
    n.SCALER_ERROR_SOURCE,
    n.SCALER_ERROR_SOURCE_TIMEOUT,
    n.SCALER_ERROR_SOURCE_EMPTY,
    n.SCALER_ERROR_NO_SAMPLES,
    n.SCALER_ERROR_ROUTER_POLL,
)
_SOURCE_KINDS_RE = "|".join(sorted(SOURCE_FAILURE_KINDS))
# Answered, but on a window that may understate L: the deployment can scale up, not down.
PARTIAL_DATA_KINDS: Final = (n.SCALER_ERROR_SOURCE_PARTIAL, n.SCALER_ERROR_SOURCE_STALE)
_PARTIAL_KINDS_RE = "|".join(sorted(PARTIAL_DATA_KINDS))

# The scaler's binding gauge says the KV dimension sets its value (docs/capacity.md).
_KV_BINDS = (
    f"max by (namespace, job, metric_name) "
    f'({n.SCALER_CAPACITY_BINDING}{{dimension="{DIMENSION_KV}"}}) == 1'
)
_SCALER_WHERE = (
    "Scaler {{ $labels.namespace }}/{{ $labels.job }} (trigger {{ $labels.metric_name }})"
)

ALERTS: Final = (
    Alert(
        name="InflightSustainedQueueing",
        expr=f"{n.REC_SATURATION} > 1",
        for_s=600,
        severity="warning",
        summary="Requests have been queueing for 10 minutes: saturation above 1.0",
        description=(
            f"Saturation (in flight ÷ slots × ready replicas) of {_WHERE} is "
            "{{ $value | humanize }}; above 1.0 every slot is busy and requests wait. "
            "The autoscaler should have added replicas by now."
        ),
    ),
    # The scaler's series carry its own job and a metric_name, not the router's job, so
    # they meet the router's by namespace only (one scaled deployment per namespace).
    # ``desired`` is the count the HPA derives *with its tolerance* (inflight.control.hpa_math):
    # while value ÷ (target × replicas) is within 10 % the HPA holds, desired equals the
    # ready count, and this alert stays quiet (InflightSustainedQueueing still sees it).
    Alert(
        name="InflightSaturatedAtMaxReplicas",
        expr=(
            f"{n.REC_SATURATION} > 1\n"
            f"and on (namespace)\n"
            f"(max by (namespace) ({n.SCALER_DESIRED_REPLICAS})\n"
            f" > on (namespace)\n"
            f" max by (namespace) ({n.REC_READY}))"
        ),
        for_s=900,
        severity="critical",
        summary="Saturated and not scaling: the HPA should add replicas but none arrive",
        description=(
            f"Saturation of {_WHERE} has been {{{{ $value | humanize }}}} for 15 minutes "
            "while the replica count the HPA derives (tolerance included) is above the ready "
            "count: the deployment is at its maxReplicaCount or new replicas cannot start "
            "(no GPU, image pull, quota)."
        ),
    ),
    # The scaler's series only: its value (the KV-equivalent L while kv_tokens binds), per
    # trigger (metric_name), while its binding gauge says kv_tokens.
    Alert(
        name="InflightKvCapacityBinding",
        expr=(
            f"max by (namespace, job, metric_name) ({n.SCALER_METRIC_VALUE})\n"
            f"and on (namespace, job, metric_name)\n"
            f"({_KV_BINDS})"
        ),
        for_s=900,
        severity="warning",
        summary="The replicas' KV cache, not their request slots, has sized the fleet for 15 m",
        description=(
            f"{_SCALER_WHERE}: the {DIMENSION_KV} capacity dimension has bound for 15 "
            "minutes (value {{ $value | humanize }}, the in-flight count that would fill the "
            "replicas' KV caches): long requests fill a replica's cache before its "
            "slotsPerReplica slots, so vLLM runs fewer than --max-num-seqs at once and "
            "queues the rest itself. The scaler adds replicas for it (capacity: auto); "
            "check the prompt lengths, the KV cache size and --max-num-seqs."
        ),
    ),
    Alert(
        name="InflightKvSaturatedAtMaxReplicas",
        expr=(
            f"(max by (namespace, job, metric_name) ({n.SCALER_DESIRED_REPLICAS})\n"
            f" > on (namespace) group_left\n"
            f" max by (namespace) ({n.REC_READY}))\n"
            f"and on (namespace, job, metric_name)\n"
            f"({_KV_BINDS})"
        ),
        for_s=900,
        severity="critical",
        summary="KV-bound and not scaling: the scaler asks for replicas that do not arrive",
        description=(
            f"{_SCALER_WHERE} has asked for {{{{ $value }}}} replicas, more than are ready, "
            f"for 15 minutes with the {DIMENSION_KV} dimension binding: requests wait for KV "
            "blocks in vLLM while the router's saturation (L ÷ slots) may read 1.0, so "
            "InflightSaturatedAtMaxReplicas stays quiet. The deployment is at its "
            "maxReplicaCount or new replicas cannot start."
        ),
    ),
    Alert(
        name="InflightEndpointImbalance",
        expr=(
            f"{n.REC_SPREAD}\n"
            f"> on (namespace, job)\n"
            f"max by (namespace, job) ({n.ROUTER_SLOTS_PER_ENDPOINT})"
        ),
        for_s=900,
        severity="warning",
        summary="One endpoint holds a whole replica's worth more requests than another",
        description=(
            f"The busiest endpoint of {_WHERE} has {{{{ $value | humanize }}}} more "
            "requests in flight than the least busy, more than one replica's slots. "
            "Least-outstanding dispatch keeps this within 1; check dispatch mode, "
            "router replicas and endpoint health."
        ),
    ),
    Alert(
        name="InflightLittlesLawMismatch",
        expr=f"{n.REC_LITTLE} > 1.5\nor\n{n.REC_LITTLE} < 0.67",
        for_s=900,
        severity="warning",
        summary="In-flight count disagrees with λ·W: the saturation signal is untrustworthy",
        description=(
            f"Mean in flight ÷ (arrival rate × mean duration) for {_WHERE} is "
            "{{ $value | humanize }} over 5 minutes (1.0 when the count is honest). "
            "A leaked or lost in-flight count makes the autoscaler scale on a wrong L."
        ),
    ),
    Alert(
        # Was InflightScalerCannotReadPrometheus (it also covers the direct source); the
        # runbook keeps the old heading as a pointer for links in old notifications.
        name="InflightScalerSourceUnavailable",
        expr=(
            "sum by (namespace, job, kind) "
            f'(rate({n.SCALER_ERRORS}{{kind=~"{_SOURCE_KINDS_RE}"}}[5m])) > 0'
        ),
        for_s=300,
        severity="critical",
        summary="The scaler cannot read L from its source; KEDA is scaling on its fallback",
        description=(
            f"Scaler {_WHERE} fails {{{{ $value | humanize }}}} queries/s with "
            "{{ $labels.kind }} for 5 minutes. It answers KEDA with UNAVAILABLE (never a "
            "silent 0), so KEDA holds its fallback replica count instead of following the load."
        ),
    ),
    Alert(
        # Not critical: nothing is lost while it lasts (the scaler still raises on demand),
        # but a router target down for hours would otherwise keep the fleet at its peak
        # size unnoticed.
        name="InflightScalerOnPartialData",
        expr=(
            "sum by (namespace, job, kind) "
            f'(rate({n.SCALER_ERRORS}{{kind=~"{_PARTIAL_KINDS_RE}"}}[5m])) > 0'
        ),
        for_s=1800,
        severity="warning",
        summary="The scaler decides on partial data: it can scale up but not down",
        description=(
            f"Scaler {_WHERE} has answered {{{{ $value | humanize }}}} queries/s on a window "
            "that may understate L ({{ $labels.kind }}) for 30 minutes: a router target is "
            "down or its samples are late, so the replica count may rise or hold, never fall."
        ),
    ),
    # The router's reads of its endpoints' KV capacity (--discover-kv-tokens,
    # router/kv_discovery.py): on add and every round. While they fail, an endpoint is
    # admitted by --kv-tokens or by its slots only, so long requests can queue inside vLLM.
    Alert(
        name="InflightRouterKvCapacityUnread",
        expr=f"sum by (namespace, job, model) (rate({n.ROUTER_KV_READ_FAILURES}[5m])) > 0",
        for_s=600,
        severity="warning",
        summary="The router cannot read its endpoints' KV capacity: token admission is blind",
        description=(
            f"Router {_WHERE} has failed {{{{ $value | humanize }}}} KV capacity reads/s "
            "for 10 minutes (an endpoint's /metrics without vllm:cache_config_info, or not "
            "answering). Those endpoints are admitted by --kv-tokens, or by their slots "
            "only: long requests can wait in vLLM's own queue, out of the router's hold "
            "order and deadline. The router's log names the endpoint and why."
        ),
    ),
    # The router's prefix index (--dispatch prefix, router/prefix_index.py) guesses what each
    # engine caches; the engines report what hit. Apart for long, the guesses are wrong
    # (a block size the router did not read, a cache smaller than it thinks, prompts it
    # renders unlike the chat template): requests go where their prefix is not.
    Alert(
        name="InflightPrefixIndexDiverges",
        expr=f"{s.prefix_divergence_expr('15m')} > {PREFIX_DIVERGENCE}",
        for_s=1800,
        severity="warning",
        summary="The router's prefix-cache estimate is far from the engines' own hit rate",
        description=(
            "In namespace {{ $labels.namespace }} the routers' estimated prefix-cache hit "
            "rate has been {{ $value | humanizePercentage }} away from the engines' "
            "reported rate (vllm:prefix_cache_hits ÷ queries) for 30 minutes: the routers' "
            "prefix index does not match what the engines cache, so --dispatch prefix "
            "sends requests where their prefix is not."
        ),
    ),
    Alert(
        name="InflightNoReadyEndpoints",
        expr=(
            f"{n.REC_READY} == 0\nand on (namespace, job)\n({n.REC_L} > 0 or {n.REC_LAMBDA} > 0)"
        ),
        for_s=300,
        severity="critical",
        summary="Requests arrive but the router has no ready endpoint",
        description=(
            f"Router {_WHERE} has {{{{ $value }}}} ready endpoints while requests arrive; "
            "they are held or refused. Scale-from-zero should have brought a replica up."
        ),
    ),
)


def _duration(seconds: int) -> str:
    """Prometheus duration text for the ``for:`` field: 600 -> '10m', 90 -> '90s'."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def rule_groups(runbook_base_url: str = RUNBOOK_PATH) -> dict[str, Any]:
    """The rule file's content (``groups:``), as Prometheus and the Operator read it."""
    alerts = []
    for a in ALERTS:
        alerts.append(
            {
                "alert": a.name,
                "expr": a.expr,
                "for": _duration(a.for_s),
                "labels": {"severity": a.severity},
                "annotations": {
                    "summary": a.summary,
                    "description": a.description,
                    "runbook_url": f"{runbook_base_url}#{a.runbook_anchor}",
                },
            }
        )
    return {
        "groups": [
            {
                "name": GROUP_RECORDING,
                "rules": [{"record": r.record, "expr": r.expr} for r in RECORDINGS],
            },
            {"name": GROUP_ALERTS, "rules": alerts},
        ]
    }


def prometheus_rule_manifest(groups: dict[str, Any]) -> dict[str, Any]:
    """The Prometheus Operator's PrometheusRule wrapping ``groups`` unchanged."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "inflight",
            "labels": {
                "app.kubernetes.io/name": "inflight",
                "app.kubernetes.io/part-of": "inflight",
            },
        },
        "spec": groups,
    }
