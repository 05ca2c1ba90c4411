"""The scale-down fault's plan, from the trigger's own windows (pure).

The fault must see the replica count fall while long streams are open, whatever the
policy's defaults. It does not drive the fleet: it waits for the policy's own scale-down,
on a condition the policy is guaranteed to reach, and keeps the streams open until then.

* **The condition.** After the load drops, only ``streams`` long streams stay in flight
  (each one that ends is replaced), and ``streams`` fits in one replica fewer than the
  count wanted before (``streams ≤ (desired − 1) × target``, the target being slots ×
  ``targetSaturation``). The policy's value is built from L over its memory only
  (:attr:`inflight.control.policy.PolicySpec.memory_s`: the scale-down maximum, the floor's
  window and the recurrence's, the excursions'), so once that memory holds nothing above
  ``streams`` the value is at most ``streams`` and the count wanted falls (the HPA's
  tolerance cannot hold it: ``streams ÷ (target × desired) ≤ (desired − 1) ÷ desired``).
* **The deadline** (wall seconds, counted from the moment the load's own requests have
  ended): that memory, the HPA's scale-down stabilization window, two HPA syncs (one to read
  the value, one for the phase of the loop) and the scrape-gap limit (L's newest sample may
  be that old). Every term is read from what ``inflight up`` runs with (:func:`plan_for`:
  the trigger metadata it sends, :func:`inflight.control.trigger.scaler_metadata`, read by
  the scaler's own parser; the HPA's shipped behaviour and sync period,
  :mod:`inflight.control.hpa`, × time-scale as ``inflight up`` scales them), not a
  constant.

Worked example, the shipped defaults at time-scale 0.2, 4 slots, target saturation 1:
memory max(60 + 10, 2 × 900 + 10, …) × 0.2 = 362 s, stabilization 0, syncs 2 × 3 s,
scrape gap 3 × 1 s → deadline 371 s; desired 3 → min(4, 2 × 4) = 4 streams.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from external_scaler.metadata import parse_metadata
from inflight.control import hpa
from inflight.control.policy import SAMPLE_GAP_SCRAPES, PolicySpec
from inflight.control.trigger import scaler_metadata


@dataclass(frozen=True)
class ScaleDownPlan:
    streams: int  # long streams kept open until the count falls
    deadline_s: float  # wall s from the load's end until the fall is overdue
    why: str  # the deadline's terms, for the fault's report


def plan(
    spec: PolicySpec,
    *,
    stabilization_s: float,
    hpa_sync_s: float,
    scrape_interval_s: float,
    desired_before: int,
    long_streams: int,
) -> ScaleDownPlan:
    """The streams and the deadline (module docstring); ValueError when the count wanted
    cannot fall (at the minimum) or no stream fits in one replica fewer.

    Without the floor and the late scale-up, the memory is the scale-down maximum of the
    scale-up means (60 + 10 s):

    >>> spec = PolicySpec(floor_window_s=0, startup_s=0, min_replicas=1)
    >>> p = plan(spec, stabilization_s=0.0, hpa_sync_s=15.0, scrape_interval_s=5.0,
    ...          desired_before=2, long_streams=8)
    >>> p.streams, p.deadline_s
    (4, 115.0)
    """
    if desired_before <= spec.min_replicas:
        raise ValueError(
            f"the stack wants {desired_before} replica(s), its minimum is {spec.min_replicas}: "
            "nothing to scale down from (raise --rate)"
        )
    fits = math.floor((desired_before - 1) * spec.target + 1e-9)
    streams = min(long_streams, fits)
    if streams < 1:
        raise ValueError(f"no long stream fits in {desired_before - 1} replica(s)")
    syncs = 2 * hpa_sync_s
    gap = SAMPLE_GAP_SCRAPES * scrape_interval_s
    deadline = spec.memory_s + stabilization_s + syncs + gap
    why = (
        f"the policy's memory {spec.memory_s:g} s + the HPA's scale-down stabilization "
        f"{stabilization_s:g} s + 2 HPA syncs {syncs:g} s + {SAMPLE_GAP_SCRAPES} scrapes "
        f"{gap:g} s"
    )
    return ScaleDownPlan(streams, deadline, why)


def plan_for(
    *,
    slots: int,
    time_scale: float,
    min_replicas: int,
    max_replicas: int,
    desired_before: int,
    long_streams: int,
    overrides: Mapping[str, str] | None = None,
) -> ScaleDownPlan:
    """:func:`plan` for the ``inflight up`` the fault runs against (the saturation policy,
    ``overrides`` its ``--scaler-metadata``): the trigger metadata it sends, read by the
    scaler's parser; its local HPA's shipped behaviour and sync period, × time-scale."""
    metadata = scaler_metadata(
        slots, time_scale, "saturation", overrides,
        min_replicas=min_replicas, max_replicas=max_replicas,
    )  # fmt: skip
    spec = parse_metadata(metadata)
    behavior = hpa.SHIPPED_BEHAVIOR.scaled(time_scale)
    return plan(
        spec.policy,
        stabilization_s=behavior.scale_down.stabilization_window_s,
        hpa_sync_s=hpa.HPA_SYNC_PERIOD_S * time_scale,
        scrape_interval_s=spec.scrape_interval_s,
        desired_before=desired_before,
        long_streams=long_streams,
    )
