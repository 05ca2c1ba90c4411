"""ScaledObject trigger metadata → a validated, frozen ``ScalerSpec`` (defaults → parse → validate).

KEDA passes the trigger's metadata as strings (``scalerMetadata``). Keys and defaults are
``inflight.names.META_*`` / ``METADATA_DEFAULTS``. KEDA's own keys (``scalerAddress``,
``enableTLS``, …) are ignored. ``<key>FromEnv`` carries the value KEDA resolved from the
target's environment and stands for ``<key>``. Every other key, and every bad value,
raises MetadataError naming the key and the accepted form (→ INVALID_ARGUMENT).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from external_scaler.errors import MetadataError
from external_scaler.selector import parse_selector
from inflight import names
from inflight.control.capacity import CAPACITY_MODES, CapacityMode
from inflight.control.policy import (
    EXCURSION_FLEET_CHANGES,
    EXCURSION_FLEETS,
    FLOOR_DECAYS,
    FLOOR_PEAKS,
    FLOOR_STATISTICS,
    MAX_FLOOR_TOLERANCE,
    POLICIES,
    SAMPLE_GAP_SCRAPES,
    ExcursionFleetChange,
    ExcursionFleets,
    FloorDecay,
    FloorPeak,
    FloorStatistic,
    PolicyName,
    PolicySpec,
    default_anticipate_s,
)

_T = TypeVar("_T", bound=str)

SourceName = Literal["router", "vllm"]
SOURCES: tuple[SourceName, ...] = ("router", "vllm")

# Keys KEDA itself reads from the trigger metadata (pkg/scalers/external_scaler.go) or
# that belong to the ScaledObject machinery; they reach us and mean nothing here.
KEDA_KEYS = frozenset(
    {
        "scalerAddress",
        "enableTLS",
        "unsafeSsl",
        "caCert",
        "tlsCertFile",
        "tlsClientCert",
        "tlsClientKey",
        "metricType",
        "useCachedMetrics",
    }
)
_FROM_ENV = "FromEnv"

# Bounds that keep a Prometheus range query sane (≤ 11,000 points) and a typo visible.
MAX_WINDOW_S = 86_400.0
MIN_TIME_SCALE, MAX_TIME_SCALE = 0.001, 1000.0
_METRIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
_DECIMAL = re.compile(r"^\s*(\d+(\.\d*)?|\.\d+)\s*$")


@dataclass(frozen=True)
class ScalerSpec:
    """One trigger's configuration: what to query, and how to decide."""

    metric_name: str
    selector: str  # canonical PromQL label matchers, "" for none
    source: SourceName
    policy: PolicySpec
    # Prometheus' scrape interval for the routers (wall seconds): bounds the age of L.
    scrape_interval_s: float = float(names.DEFAULT_SCRAPE_INTERVAL_S)
    # One model pool's series (``model`` key): "" for the router's whole L.
    model: str = ""
    # Saturation's capacity dimensions (``capacity`` key, docs/capacity.md) and the label
    # matchers for vLLM's series (``capacitySelector``; "" for ``selector``'s).
    capacity: CapacityMode = "auto"
    capacity_selector: str = ""


def parse_metadata(metadata: Mapping[str, str]) -> ScalerSpec:
    """Validate KEDA's ``scalerMetadata``; raise MetadataError naming the key at fault."""
    raw, given_as = _resolve(metadata)
    try:
        return _parse(raw)
    except MetadataError as exc:
        if given_as.get(exc.key, exc.key) != exc.key:
            raise exc.for_key(given_as[exc.key]) from None
        raise


def _parse(raw: Mapping[str, str]) -> ScalerSpec:
    values = {**names.METADATA_DEFAULTS, **raw}
    metric_name = values[names.META_METRIC_NAME].strip()
    if not _METRIC_NAME.match(metric_name):
        raise MetadataError(
            names.META_METRIC_NAME,
            "a name of letters, digits, '_', '.', '-' starting with a letter (≤ 63 chars)",
            metric_name,
        )
    selector = parse_selector(names.META_SELECTOR, values[names.META_SELECTOR])
    model = values[names.META_MODEL].strip()
    if not all(ch.isprintable() for ch in model) or len(model) > 256:
        raise MetadataError(
            names.META_MODEL, "a model name as requests give it (printable, ≤ 256 chars)", model
        )
    source = _choice(names.META_SOURCE, values[names.META_SOURCE], SOURCES)
    capacity: CapacityMode = _choice(
        names.META_CAPACITY, values[names.META_CAPACITY], CAPACITY_MODES
    )
    capacity_selector = parse_selector(
        names.META_CAPACITY_SELECTOR, values[names.META_CAPACITY_SELECTOR]
    )
    policy: PolicyName = _choice(names.META_POLICY, values[names.META_POLICY], POLICIES)
    slots = _decimal(names.META_SLOTS_PER_REPLICA, values, 'a whole number ≥ 1, e.g. "4"')
    if slots != int(slots) or slots < 1 or slots > 1_000_000:
        raise MetadataError(
            names.META_SLOTS_PER_REPLICA,
            'a whole number ≥ 1, e.g. "4"',
            values[names.META_SLOTS_PER_REPLICA],
        )
    target_saturation = _decimal(
        names.META_TARGET_SATURATION, values, 'a number > 0, e.g. "1.0"', positive=True
    )
    time_scale = _decimal(
        names.META_TIME_SCALE,
        values,
        f'a number from {MIN_TIME_SCALE:g} to {MAX_TIME_SCALE:g}, e.g. "0.1"',
        low=MIN_TIME_SCALE,
        high=MAX_TIME_SCALE,
    )
    window_form = f'seconds from 0 to {MAX_WINDOW_S:g}, e.g. "60"'
    up_s = _decimal(names.META_SCALE_UP_WINDOW_S, values, window_form, high=MAX_WINDOW_S)
    down_s = _decimal(names.META_SCALE_DOWN_WINDOW_S, values, window_form, high=MAX_WINDOW_S)
    activation = _decimal(
        names.META_ACTIVATION_INFLIGHT, values, 'a number ≥ 0, e.g. "0"', high=1e9
    )
    tolerance_form = 'a fraction from 0 to 10, e.g. "0.1" (the HPA\'s tolerance)'
    up_tol = _decimal(names.META_HPA_SCALE_UP_TOLERANCE, values, tolerance_form, high=10.0)
    down_tol = _decimal(names.META_HPA_SCALE_DOWN_TOLERANCE, values, tolerance_form, high=10.0)
    for key, seconds in (
        (names.META_SCALE_UP_WINDOW_S, up_s),
        (names.META_SCALE_DOWN_WINDOW_S, down_s),
    ):
        if seconds * time_scale > MAX_WINDOW_S:
            raise MetadataError(
                key,
                f"a window that is ≤ {MAX_WINDOW_S:g} s once multiplied by {names.META_TIME_SCALE}",
                values[key],
                f"x {names.META_TIME_SCALE} {time_scale:g} = {seconds * time_scale:g} s",
            )
    scrape_interval_s = _decimal(
        names.META_SCRAPE_INTERVAL_S,
        values,
        'seconds > 0 and ≤ 3600, as in the routers\' scrape config, e.g. "15"',
        positive=True,
        high=3600.0,
    )
    growth_form = f'seconds from 0 to {MAX_WINDOW_S:g}, e.g. "120"'
    growth_horizon_s = _decimal(names.META_GROWTH_HORIZON_S, values, growth_form, high=MAX_WINDOW_S)
    growth_window_s = _decimal(
        names.META_GROWTH_WINDOW_S, values, growth_form, positive=True, high=MAX_WINDOW_S
    )
    floor_window_s = _decimal(
        names.META_FLOOR_WINDOW_S, values, 'seconds from 0 to 86400, e.g. "600"', high=MAX_WINDOW_S
    )
    floor_fraction = _decimal(
        names.META_FLOOR_FRACTION, values, 'a fraction from 0 to 1, e.g. "0.5"', high=1.0
    )
    floor_decay: FloorDecay = _choice(
        names.META_FLOOR_DECAY, values[names.META_FLOOR_DECAY], FLOOR_DECAYS
    )
    floor_peak: FloorPeak = _choice(
        names.META_FLOOR_PEAK, values[names.META_FLOOR_PEAK], FLOOR_PEAKS
    )
    floor_statistic: FloorStatistic = _choice(
        names.META_FLOOR_STATISTIC, values[names.META_FLOOR_STATISTIC], FLOOR_STATISTICS
    )
    quantile_form = 'a fraction of the floor window above 0 and below 1, e.g. "0.1"'
    floor_quantile = _decimal(names.META_FLOOR_QUANTILE, values, quantile_form, high=1.0)
    if not 0 < floor_quantile < 1:
        raise MetadataError(
            names.META_FLOOR_QUANTILE, quantile_form, values[names.META_FLOOR_QUANTILE]
        )
    recurrences_form = 'a whole number of peaks from 1 to 100, e.g. "2"'
    floor_recurrences = _whole(
        names.META_FLOOR_RECURRENCES, values, recurrences_form, low=1, high=100
    )
    floor_single_window_s = _decimal(
        names.META_FLOOR_SINGLE_WINDOW_S,
        values,
        'seconds from 0 to 86400, e.g. "300"',
        high=MAX_WINDOW_S,
    )
    floor_single_fraction = _decimal(
        names.META_FLOOR_SINGLE_FRACTION,
        values,
        'a fraction from 0 (floorFraction\'s) to 1, e.g. "0.4"',
        high=1.0,
    )
    floor_smoothing_s = (
        _decimal(
            names.META_FLOOR_SMOOTHING_S,
            values,
            'seconds from 0 (each sample) to 86400, or "" (the scale-up window), e.g. "0"',
            high=MAX_WINDOW_S,
        )
        if values[names.META_FLOOR_SMOOTHING_S] != ""
        else None
    )
    floor_tolerance = _decimal(
        names.META_FLOOR_TOLERANCE,
        values,
        'a fraction from 0 (off) to 0.9, e.g. "0.1"',
        high=MAX_FLOOR_TOLERANCE,
    )
    floor_short_fraction = _decimal(
        names.META_FLOOR_SHORT_FRACTION,
        values,
        'a fraction from 0 (off) to 1, above floorFraction to hold more, e.g. "0.8"',
        high=1.0,
    )
    floor_filled_flashes = _whole(
        names.META_FLOOR_FILLED_FLASHES,
        values,
        'a whole number of flashes from 0 (off) to 100, e.g. "2"',
        high=100,
    )
    startup_s = _decimal(
        names.META_STARTUP_S,
        values,
        'a replica\'s start-up in seconds from 0 (unknown: off) to 86400, e.g. "100"',
        high=MAX_WINDOW_S,
    )
    anticipate_s = (
        _decimal(
            names.META_ANTICIPATE_S,
            values,
            'seconds ahead of a recurring burst, from 0 (off) to 86400, e.g. "150"',
            high=MAX_WINDOW_S,
        )
        if names.META_ANTICIPATE_S in raw
        else default_anticipate_s(startup_s)  # follows a long start-up
    )
    excursion_window_s = _decimal(
        names.META_EXCURSION_WINDOW_S,
        values,
        'seconds above 0 and up to 86400, e.g. "900"',
        positive=True,
        high=MAX_WINDOW_S,
    )
    rebound_window_s = _decimal(
        names.META_REBOUND_WINDOW_S,
        values,
        'seconds from 0 (off) to 86400, e.g. "190" (the scale-down window plus a start-up)',
        high=MAX_WINDOW_S,
    )
    margin_form = 'a factor from 1 to 100 on the longest recent excursion, e.g. "1.5"'
    excursion_margin = _decimal(
        names.META_EXCURSION_MARGIN, values, margin_form, low=1.0, high=100.0
    )
    excursion_fleets: ExcursionFleets = _choice(
        names.META_EXCURSION_FLEETS, values[names.META_EXCURSION_FLEETS], EXCURSION_FLEETS
    )
    excursion_fleet_change: ExcursionFleetChange = _choice(
        names.META_EXCURSION_FLEET_CHANGE,
        values[names.META_EXCURSION_FLEET_CHANGE],
        EXCURSION_FLEET_CHANGES,
    )
    if startup_s > 0 and excursion_window_s < startup_s:
        raise MetadataError(
            names.META_EXCURSION_WINDOW_S,
            f"a window at least {names.META_STARTUP_S} ({startup_s:g} s) long",
            values[names.META_EXCURSION_WINDOW_S],
            "a shorter one cannot see an excursion as long as a start-up",
        )
    count_form = "a whole number of replicas, as the ScaledObject's {}, e.g. {!r}"
    min_count = _decimal(
        names.META_MIN_REPLICA_COUNT,
        values,
        count_form.format(names.META_MIN_REPLICA_COUNT, "1"),
        high=1_000_000,
    )
    max_count = _decimal(
        names.META_MAX_REPLICA_COUNT,
        values,
        count_form.format(names.META_MAX_REPLICA_COUNT, "10") + " (≥ 1)",
        low=1,
        high=1_000_000,
    )
    for key, count in (
        (names.META_MIN_REPLICA_COUNT, min_count),
        (names.META_MAX_REPLICA_COUNT, max_count),
    ):
        if count != int(count):
            raise MetadataError(key, "a whole number of replicas", values[key])
    if min_count > max_count:
        raise MetadataError(
            names.META_MIN_REPLICA_COUNT,
            f"a count ≤ {names.META_MAX_REPLICA_COUNT} ({max_count:g})",
            values[names.META_MIN_REPLICA_COUNT],
        )
    if policy == "qps" and source != "router":
        raise MetadataError(
            names.META_POLICY,
            f'"saturation" when {names.META_SOURCE} is "{source}"',
            policy,
            "the qps baseline counts arrivals at the router",
        )
    return ScalerSpec(
        metric_name=metric_name,
        selector=selector,
        model=model,
        source=source,
        capacity=capacity,
        capacity_selector=capacity_selector,
        policy=PolicySpec(
            slots_per_replica=int(slots),
            target_saturation=target_saturation,
            scale_up_window_s=up_s * time_scale,
            scale_down_window_s=down_s * time_scale,
            activation_inflight=activation,
            policy=policy,
            time_scale=time_scale,
            hpa_scale_up_tolerance=up_tol,
            hpa_scale_down_tolerance=down_tol,
            max_sample_gap_s=SAMPLE_GAP_SCRAPES * scrape_interval_s,
            growth_horizon_s=growth_horizon_s * time_scale,
            growth_window_s=growth_window_s * time_scale,
            floor_window_s=floor_window_s * time_scale,
            floor_fraction=floor_fraction,
            floor_decay=floor_decay,
            floor_peak=floor_peak,
            floor_statistic=floor_statistic,
            floor_quantile=floor_quantile,
            floor_recurrences=floor_recurrences,
            floor_single_window_s=floor_single_window_s * time_scale,
            floor_single_fraction=floor_single_fraction,
            floor_smoothing_s=None if floor_smoothing_s is None else floor_smoothing_s * time_scale,
            floor_tolerance=floor_tolerance,
            floor_short_fraction=floor_short_fraction,
            floor_filled_flashes=floor_filled_flashes,
            startup_s=startup_s * time_scale,
            anticipate_s=anticipate_s * time_scale,
            excursion_window_s=excursion_window_s * time_scale,
            excursion_margin=excursion_margin,
            excursion_fleets=excursion_fleets,
            excursion_fleet_change=excursion_fleet_change,
            rebound_window_s=rebound_window_s * time_scale,
            min_replicas=int(min_count),
            max_replicas=int(max_count),
        ),
        scrape_interval_s=scrape_interval_s,
    )


def _resolve(metadata: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Our keys from ``metadata``: KEDA's keys dropped, ``<key>FromEnv`` folded into ``<key>``.

    Returns the values by key, and the key each was given as (for error messages).
    """
    known = set(names.METADATA_DEFAULTS)
    out: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for key, value in metadata.items():
        base = key[: -len(_FROM_ENV)] if key.endswith(_FROM_ENV) else key
        if key in KEDA_KEYS or base in KEDA_KEYS:
            continue
        if base not in known:
            raise MetadataError(
                key,
                "one of " + ", ".join(sorted(known)) + " (or KEDA's own keys)",
                detail="unknown key",
            )
        if base in out:
            raise MetadataError(
                key, f"either {base} or {base}{_FROM_ENV}, not both", detail="given twice"
            )
        if not isinstance(value, str):
            raise MetadataError(key, "a string value", repr(value))
        out[base] = value
        given_as[base] = key
    return out, given_as


def _choice(key: str, value: str, allowed: tuple[_T, ...]) -> _T:
    for option in allowed:
        if value.strip() == option:
            return option
    raise MetadataError(key, "one of " + ", ".join(f'"{a}"' for a in allowed), value)


def _whole(key: str, values: Mapping[str, str], form: str, *, low: int = 0, high: int) -> int:
    """A whole number from ``low`` to ``high`` ("2", "2.0"), refused naming ``form``."""
    number = _decimal(key, values, form, low=low, high=high)
    if number != int(number):
        raise MetadataError(key, form, values[key])
    return int(number)


def _decimal(
    key: str,
    values: Mapping[str, str],
    form: str,
    *,
    positive: bool = False,
    low: float = 0.0,
    high: float = 1e9,
) -> float:
    """A plain non-negative decimal ("4", "0.5", ".5"); no signs, exponents, nan or inf."""
    text = values[key]
    if not _DECIMAL.match(text):
        raise MetadataError(key, form, text)
    number = float(text)
    if not math.isfinite(number) or number < low or number > high or (positive and number <= 0):
        raise MetadataError(key, form, text)
    return number
