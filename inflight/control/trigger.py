"""The trigger metadata inflight's own runs send the scaler, defined once (pure).

``inflight up`` sends it to its scaler (``inflight.up.stack``), ``inflight sim`` to the
simulated one (``inflight.sim.core``), and the chaos run asks the scaler with it: the
ScaledObject's defaults (``inflight.names.METADATA_DEFAULTS``) for the policy's own keys,
the replicas' slots, the run's time-scale and policy, its replica bounds (KEDA's
``minReplicaCount``/``maxReplicaCount``, which the policy needs to tell a scale-down from a
count already at its minimum), and the local Prometheus' scrape interval
(:data:`SCRAPE_INTERVAL_S`). The keys set from the run's flags are no override's
(:func:`check_override_key`: ``inflight up --scaler-metadata`` and ``--policies``' variants
alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from inflight import names

#: The local stack's Prometheus scrapes every 5 s (seed seconds, × time-scale): the seed's
#: sampling period. ``inflight up`` configures its Prometheus with it; ``inflight sim``
#: scrapes its simulated router at it.
SCRAPE_INTERVAL_S: Final = 5.0

#: Keys :func:`scaler_metadata` sets from the run's own flags (``inflight up``'s, which
#: ``inflight bench compare`` passes on): overrides may not set them.
FROM_FLAGS: Final = {
    names.META_SLOTS_PER_REPLICA: "--slots-per-replica",
    names.META_TIME_SCALE: "--time-scale",
    names.META_POLICY: "--policy",
    names.META_MIN_REPLICA_COUNT: "--min-replicas",
    names.META_MAX_REPLICA_COUNT: "--max-replicas",
}

#: Keys :func:`scaler_metadata` states at their defaults, so a recorded run names them.
_STATED_DEFAULTS: Final = (
    names.META_TARGET_SATURATION,
    names.META_SCALE_UP_WINDOW_S,
    names.META_SCALE_DOWN_WINDOW_S,
)


def scaler_metadata(
    slots_per_replica: int,
    time_scale: float,
    policy: str,
    overrides: Mapping[str, str] | None = None,
    *,
    min_replicas: int = names.DEFAULT_MIN_REPLICA_COUNT,
    max_replicas: int = names.DEFAULT_MAX_REPLICA_COUNT,
) -> dict[str, str]:
    """The trigger metadata ``inflight up`` sends the scaler (the bench and the simulator
    send the same); ``overrides`` (``--scaler-metadata``) replace or add keys.
    ``min_replicas``/``max_replicas``: the bounds the run's KEDA and HPA apply (KEDA's
    defaults when a caller has none)."""
    stated = {key: names.METADATA_DEFAULTS[key] for key in _STATED_DEFAULTS}
    return {
        names.META_SLOTS_PER_REPLICA: str(slots_per_replica),
        **stated,
        names.META_TIME_SCALE: str(time_scale),
        names.META_POLICY: policy,
        names.META_MIN_REPLICA_COUNT: str(min_replicas),
        names.META_MAX_REPLICA_COUNT: str(max_replicas),
        # Prometheus' scrape interval here (wall seconds): L older than 3 of them is refused.
        # At least 1 s, so a loaded machine at a tiny time-scale does not refuse good data.
        names.META_SCRAPE_INTERVAL_S: f"{max(1.0, SCRAPE_INTERVAL_S * time_scale):g}",
        **(overrides or {}),
    }


def resolved(sent: Mapping[str, str]) -> dict[str, str]:
    """The fully resolved trigger settings of a run: every key the scaler reads, at the value
    ``sent`` gives it or at its default (:data:`inflight.names.METADATA_DEFAULTS`), what a
    run's results record so that a later change of a default cannot change what the run
    ran (``inflight sim calibrate`` re-simulates it with these).

    >>> r = resolved({"targetSaturation": "0.8"})
    >>> r["targetSaturation"], r["scaleDownWindowSeconds"]
    ('0.8', '60')
    """
    return {**names.METADATA_DEFAULTS, **sent}


#: The keys a run's own flags and stack set (the local scrape interval, the replicas' KV
#: series): re-simulating a recorded run takes every other key from its record.
SET_BY_THE_STACK: Final = frozenset(
    {
        *FROM_FLAGS,
        names.META_SCRAPE_INTERVAL_S,
        names.META_CAPACITY,
        names.META_CAPACITY_SELECTOR,
    }
)


def policy_settings(recorded: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The policy's own keys of a recorded run's resolved settings (:func:`resolved`): the
    overrides that give a re-simulation the same policy whatever today's defaults are.

    >>> policy_settings({"policy": "saturation", "timeScale": "0.1", "startupSeconds": "30"})
    (('startupSeconds', '30'),)
    """
    return tuple((k, v) for k, v in recorded.items() if k not in SET_BY_THE_STACK)


def parse_overrides(text: str) -> tuple[tuple[str, str], ...]:
    """``--scaler-metadata``'s ``KEY=VALUE[,KEY=VALUE…]`` → pairs; ValueError naming the bad
    item (keys are checked by :func:`check_override_key`, values by the scaler's parser).

    >>> parse_overrides("targetSaturation=0.8, scaleDownWindowSeconds=120")
    (('targetSaturation', '0.8'), ('scaleDownWindowSeconds', '120'))
    """
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"{item.strip()!r} is not KEY=VALUE")
        if any(k == key for k, _ in pairs):
            raise ValueError(f"key {key!r} given twice")
        pairs.append((key, value))
    return tuple(pairs)


def format_overrides(pairs: Sequence[tuple[str, str]]) -> str:
    """Pairs as ``--scaler-metadata``'s value, :func:`parse_overrides` read backwards.

    >>> format_overrides((("floorWindowSeconds", "300"), ("targetSaturation", "0.9")))
    'floorWindowSeconds=300,targetSaturation=0.9'
    """
    return ",".join(f"{k}={v}" for k, v in pairs)


def check_override_key(key: str) -> None:
    """ValueError naming ``key`` when an override of :func:`scaler_metadata` (``inflight up
    --scaler-metadata``, a ``saturation[KEY=VALUE]`` variant of ``--policies``) may not set
    it: a key set from a flag (:data:`FROM_FLAGS`, the flag named), or no metadata key (the
    keys an override may set listed)."""
    if key in FROM_FLAGS:
        raise ValueError(f"key {key!r} is set by inflight up from {FROM_FLAGS[key]}; use that flag")
    if key not in names.METADATA_DEFAULTS:
        valid = ", ".join(k for k in names.METADATA_DEFAULTS if k not in FROM_FLAGS)
        raise ValueError(f"unknown key {key!r}; valid keys: {valid}")
