"""ScaledObject trigger metadata → a validated, frozen ``ScalerSpec`` (defaults → parse → validate).

KEDA passes the trigger's metadata as strings (``scalerMetadata``). Keys and defaults are
``inflight.names.META_*`` / ``METADATA_DEFAULTS``. KEDA's own keys (``scalerAddress``,
``enableTLS``, …) are ignored. ``<key>FromEnv`` carries the value KEDA resolved from the
target's environment and stands for ``<key>``. Every other key, and every bad value,
raises MetadataError naming the key and the accepted form (→ INVALID_ARGUMENT).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

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


def parse_metadata(metadata: Mapping[str, str], experimental: bool = False) -> ScalerSpec:
    """Validate KEDA's ``scalerMetadata``; raise MetadataError naming the key at fault.

    ``experimental``: also take the settings that were tried and not adopted (the table's
    experimental rows, :func:`_refuse_experimental`): the simulator's option, never the
    scaler's, which refuses them naming the key.

    KEDA sends the same metadata with every call, so a spec once parsed is kept
    (:func:`_parsed`, pure, bounded): a call pays a dict's hash, not the table (41 µs)."""
    try:
        key = tuple(metadata.items())
        hash(key)
    except TypeError:  # a value that is not a string (refused by _resolve, naming its key)
        return _parse_uncached(metadata, experimental)
    return _parsed(key, experimental)


@functools.lru_cache(maxsize=256)
def _parsed(items: tuple[tuple[str, str], ...], experimental: bool) -> ScalerSpec:
    return _parse_uncached(dict(items), experimental)


def _parse_uncached(metadata: Mapping[str, str], experimental: bool) -> ScalerSpec:
    raw, given_as = _resolve(metadata)
    try:
        return _parse(raw, experimental)
    except MetadataError as exc:
        if given_as.get(exc.key, exc.key) != exc.key:
            raise exc.for_key(given_as[exc.key]) from None
        raise


# --- the table: one row per key ---------------------------------------------------------
#
# Each key is read by one row: the ``PolicySpec``/``ScalerSpec`` field it sets, how its text
# is read (the reader names the accepted form in its error), and whether it is seconds of
# seed time (× ``timeScale``). The rules between keys come after the table
# (:func:`_check_across`); :func:`_parse` is the table read in order, those rules, and the
# spec built. Defaults: ``inflight.names.METADATA_DEFAULTS``.


@dataclass(frozen=True)
class Reader:
    """How one key's text is read: ``read(key, text)`` → value, or MetadataError naming the
    key; ``form`` is what it accepts, in words (the reference table's column)."""

    form: str
    read: Callable[[str, str], Any]

    def __call__(self, key: str, text: str) -> Any:
        return self.read(key, text)


@dataclass(frozen=True)
class Row:
    key: str
    field: str  # the field it sets (PolicySpec's, else ScalerSpec's)
    read: Reader
    seconds: bool = False  # seed seconds: × timeScale in the spec
    # Tried and not adopted (docs/decisions.md): the simulator takes the key at any value
    # (``experimental``) or these values of it (``experimental_values``); the scaler
    # takes only the default, and refuses the rest naming the key.
    experimental: bool = False
    experimental_values: tuple[str, ...] = ()


def _number(form: str, *, positive: bool = False, low: float = 0.0, high: float = 1e9) -> Reader:
    return Reader(
        form, lambda key, text: _decimal(key, text, form, positive=positive, low=low, high=high)
    )


def _count(form: str, *, low: int = 0, high: int, not_whole: str | None = None) -> Reader:
    """A whole number from ``low`` to ``high`` ("2", "2.0"); a fraction is refused naming
    ``not_whole`` (``form`` when None)."""

    def read(key: str, text: str) -> int:
        number = _decimal(key, text, form, low=low, high=high)
        if number != int(number):
            raise MetadataError(key, not_whole or form, text)
        return int(number)

    return Reader(form, read)


def _one_of(allowed: tuple[str, ...]) -> Reader:
    return Reader(
        "one of " + ", ".join(f'"{a}"' for a in allowed),
        lambda key, text: _choice(key, text, allowed),
    )


_NAME_FORM = "a name of letters, digits, '_', '.', '-' starting with a letter (≤ 63 chars)"
_MODEL_FORM = "a model name as requests give it (printable, ≤ 256 chars)"


def _metric_name(key: str, text: str) -> str:
    name = text.strip()
    if not _METRIC_NAME.match(name):
        raise MetadataError(key, _NAME_FORM, name)
    return name


def _model(key: str, text: str) -> str:
    model = text.strip()
    if not all(ch.isprintable() for ch in model) or len(model) > 256:
        raise MetadataError(key, _MODEL_FORM, model)
    return model


_SELECTOR = Reader('PromQL label matchers, e.g. `namespace="llm"` (empty: none)', parse_selector)


def _open_fraction(form: str) -> Reader:
    """A fraction strictly between 0 and 1."""

    def read(key: str, text: str) -> float:
        number = _decimal(key, text, form, high=1.0)
        if not 0 < number < 1:
            raise MetadataError(key, form, text)
        return number

    return Reader(form, read)


def _or_unset(reader: Reader) -> Reader:
    """``reader``, or None for "" (the key's own default applies)."""
    return Reader(reader.form, lambda key, text: None if text == "" else reader(key, text))


_WINDOW = f'seconds from 0 to {MAX_WINDOW_S:g}, e.g. "60"'
_TOLERANCE = 'a fraction from 0 to 10, e.g. "0.1" (the HPA\'s tolerance)'
_GROWTH = f'seconds from 0 to {MAX_WINDOW_S:g}, e.g. "120"'
_COUNT = "a whole number of replicas, as the ScaledObject's {}, e.g. {!r}"
_M = names

ROWS: tuple[Row, ...] = (
    Row(_M.META_METRIC_NAME, "metric_name", Reader(_NAME_FORM, _metric_name)),
    Row(_M.META_SELECTOR, "selector", _SELECTOR),
    Row(_M.META_MODEL, "model", Reader(_MODEL_FORM, _model)),
    Row(_M.META_SOURCE, "source", _one_of(SOURCES)),
    Row(_M.META_CAPACITY, "capacity", _one_of(CAPACITY_MODES)),
    Row(_M.META_CAPACITY_SELECTOR, "capacity_selector", _SELECTOR),
    Row(_M.META_POLICY, "policy", _one_of(POLICIES)),
    Row(_M.META_SLOTS_PER_REPLICA, "slots_per_replica",
        _count('a whole number ≥ 1, e.g. "4"', low=1, high=1_000_000)),
    Row(_M.META_TARGET_SATURATION, "target_saturation",
        _number('a number > 0, e.g. "1.0"', positive=True)),
    Row(_M.META_TIME_SCALE, "time_scale",
        _number(f'a number from {MIN_TIME_SCALE:g} to {MAX_TIME_SCALE:g}, e.g. "0.1"',
                low=MIN_TIME_SCALE, high=MAX_TIME_SCALE)),
    Row(_M.META_SCALE_UP_WINDOW_S, "scale_up_window_s", _number(_WINDOW, high=MAX_WINDOW_S), True),
    Row(_M.META_SCALE_DOWN_WINDOW_S, "scale_down_window_s",
        _number(_WINDOW, high=MAX_WINDOW_S), True),
    Row(_M.META_ACTIVATION_INFLIGHT, "activation_inflight",
        _number('a number ≥ 0, e.g. "0"', high=1e9)),
    Row(_M.META_HPA_SCALE_UP_TOLERANCE, "hpa_scale_up_tolerance", _number(_TOLERANCE, high=10.0)),
    Row(_M.META_HPA_SCALE_DOWN_TOLERANCE, "hpa_scale_down_tolerance",
        _number(_TOLERANCE, high=10.0)),
    Row(_M.META_SCRAPE_INTERVAL_S, "scrape_interval_s",
        _number('seconds > 0 and ≤ 3600, as in the routers\' scrape config, e.g. "15"',
                positive=True, high=3600.0)),
    Row(_M.META_GROWTH_HORIZON_S, "growth_horizon_s", _number(_GROWTH, high=MAX_WINDOW_S), True),
    Row(_M.META_GROWTH_WINDOW_S, "growth_window_s",
        _number(_GROWTH, positive=True, high=MAX_WINDOW_S), True),
    Row(_M.META_FLOOR_WINDOW_S, "floor_window_s",
        _number('seconds from 0 to 86400, e.g. "600"', high=MAX_WINDOW_S), True),
    Row(_M.META_FLOOR_FRACTION, "floor_fraction",
        _number('a fraction from 0 to 1, e.g. "0.5"', high=1.0)),
    Row(_M.META_FLOOR_DECAY, "floor_decay", _one_of(FLOOR_DECAYS), experimental=True),
    Row(_M.META_FLOOR_PEAK, "floor_peak", _one_of(FLOOR_PEAKS), experimental_values=("demand",)),
    Row(_M.META_FLOOR_STATISTIC, "floor_statistic", _one_of(FLOOR_STATISTICS),
        experimental_values=("quantile",)),
    Row(_M.META_FLOOR_QUANTILE, "floor_quantile",
        _open_fraction('a fraction of the floor window above 0 and below 1, e.g. "0.1"'),
        experimental=True),
    Row(_M.META_FLOOR_RECURRENCES, "floor_recurrences",
        _count('a whole number of peaks from 1 to 100, e.g. "2"', low=1, high=100)),
    Row(_M.META_FLOOR_SINGLE_WINDOW_S, "floor_single_window_s",
        _number('seconds from 0 to 86400, e.g. "300"', high=MAX_WINDOW_S), True),
    Row(_M.META_FLOOR_SINGLE_FRACTION, "floor_single_fraction",
        _number('a fraction from 0 (floorFraction\'s) to 1, e.g. "0.4"', high=1.0)),
    Row(_M.META_FLOOR_SMOOTHING_S, "floor_smoothing_s", _or_unset(_number(
        'seconds from 0 (each sample) to 86400, or "" (the scale-up window), e.g. "0"',
        high=MAX_WINDOW_S)), True, experimental=True),
    Row(_M.META_FLOOR_TOLERANCE, "floor_tolerance",
        _number('a fraction from 0 (off) to 0.9, e.g. "0.1"', high=MAX_FLOOR_TOLERANCE),
        experimental=True),
    Row(_M.META_FLOOR_SHORT_FRACTION, "floor_short_fraction",
        _number('a fraction from 0 (off) to 1, above floorFraction to hold more, e.g. "0.8"',
                high=1.0), experimental=True),
    Row(_M.META_FLOOR_FILLED_FLASHES, "floor_filled_flashes",
        _count('a whole number of flashes from 0 (off) to 100, e.g. "2"', high=100),
        experimental=True),
    Row(_M.META_STARTUP_S, "startup_s", _number(
        'a replica\'s start-up in seconds from 0 (unknown: off) to 86400, e.g. "100"',
        high=MAX_WINDOW_S), True),
    # given or not, read; when not given, the default follows the start-up (_check_across)
    Row(_M.META_ANTICIPATE_S, "anticipate_s", _number(
        'seconds ahead of a recurring burst, from 0 (off) to 86400, e.g. "150"',
        high=MAX_WINDOW_S), True),
    Row(_M.META_EXCURSION_WINDOW_S, "excursion_window_s",
        _number('seconds above 0 and up to 86400, e.g. "900"', positive=True, high=MAX_WINDOW_S),
        True),
    Row(_M.META_REBOUND_WINDOW_S, "rebound_window_s", _number(
        'seconds from 0 (off) to 86400, e.g. "190" (the scale-down window plus a start-up)',
        high=MAX_WINDOW_S), True, experimental=True),
    Row(_M.META_BACKLOG_DRAIN_S, "backlog_drain_s", _number(
        'seconds from 0 (off) to 86400 a growing backlog is drained in, e.g. "60"',
        high=MAX_WINDOW_S), True, experimental=True),
    Row(_M.META_QUEUE_HEADROOM, "queue_headroom", _number(
        'beta from 0 (off) to 10 in L + beta x sqrt(L), e.g. "1"', high=10.0),
        experimental=True),
    Row(_M.META_SLO_TTFT_S, "slo_ttft_s", _number(
        'seconds from 0 (off) to 3600: your time-to-first-token SLO, e.g. "2"',
        high=3600.0), True),
    Row(_M.META_SLO_GOAL, "slo_goal", _open_fraction(
        'the share of requests that meet the TTFT, strictly between 0 and 1, e.g. "0.99"')),
    Row(_M.META_EXCURSION_MARGIN, "excursion_margin", _number(
        'a factor from 1 to 100 on the longest recent excursion, e.g. "1.5"', low=1.0,
        high=100.0)),
    Row(_M.META_EXCURSION_FLEETS, "excursion_fleets", _one_of(EXCURSION_FLEETS),
        experimental_values=("larger",)),
    Row(_M.META_EXCURSION_FLEET_CHANGE, "excursion_fleet_change",
        _one_of(EXCURSION_FLEET_CHANGES)),
    Row(_M.META_MIN_REPLICA_COUNT, "min_replicas", _count(
        _COUNT.format(_M.META_MIN_REPLICA_COUNT, "1"), high=1_000_000,
        not_whole="a whole number of replicas")),
    Row(_M.META_MAX_REPLICA_COUNT, "max_replicas", _count(
        _COUNT.format(_M.META_MAX_REPLICA_COUNT, "10") + " (≥ 1)", low=1, high=1_000_000,
        not_whole="a whole number of replicas")),
)  # fmt: skip

#: The fields that are ScalerSpec's own (the rest are PolicySpec's).
_SCALER_FIELDS = frozenset(f.name for f in fields(ScalerSpec)) - {"policy"}


def _parse(raw: Mapping[str, str], experimental: bool = False) -> ScalerSpec:
    """The table read in order, the rules between keys, the spec built."""
    values = {**names.METADATA_DEFAULTS, **raw}
    got = {row.field: row.read(row.key, values[row.key]) for row in ROWS}
    if not experimental:
        _refuse_experimental(got, values)
    if names.META_ANTICIPATE_S not in raw:  # follows a long start-up
        got["anticipate_s"] = default_anticipate_s(got["startup_s"])
    _check_across(got, values)
    scale = got["time_scale"]
    for row in ROWS:
        if row.seconds and got[row.field] is not None:
            got[row.field] *= scale
    got["max_sample_gap_s"] = SAMPLE_GAP_SCRAPES * got["scrape_interval_s"]
    scaler = {k: v for k, v in got.items() if k in _SCALER_FIELDS}
    policy = {k: v for k, v in got.items() if k not in _SCALER_FIELDS}
    return ScalerSpec(**scaler, policy=PolicySpec(**policy))


@functools.cache
def _experimental() -> tuple[tuple[Row, Any], ...]:
    """The rows of settings tried and not adopted, and each one's default as read."""
    return tuple(
        (row, row.read(row.key, names.METADATA_DEFAULTS[row.key]))
        for row in ROWS
        if row.experimental or row.experimental_values
    )


def _refuse_experimental(got: Mapping[str, Any], values: Mapping[str, str]) -> None:
    """The scaler takes an experimental key only at its default (the simulator takes any
    value: ``parse_metadata(..., experimental=True)``)."""
    for row, default in _experimental():
        value = got[row.field]
        if row.experimental and value != default:
            accepted = f"its default {names.METADATA_DEFAULTS[row.key]!r} (or leave it out)"
        elif value in row.experimental_values:
            accepted = f"a value other than {value!r}"
        else:
            continue
        raise MetadataError(
            row.key,
            accepted,
            values[row.key],
            "tried and not adopted (docs/decisions.md): the simulator's experimental option "
            f"(inflight sim --policies 'saturation[{row.key}=...]'), refused by the scaler",
        )


def _check_across(got: Mapping[str, Any], values: Mapping[str, str]) -> None:
    """The rules between keys (seed seconds, before × timeScale)."""
    scale = got["time_scale"]
    for key, field in (
        (names.META_SCALE_UP_WINDOW_S, "scale_up_window_s"),
        (names.META_SCALE_DOWN_WINDOW_S, "scale_down_window_s"),
    ):
        if got[field] * scale > MAX_WINDOW_S:
            raise MetadataError(
                key,
                f"a window that is ≤ {MAX_WINDOW_S:g} s once multiplied by {names.META_TIME_SCALE}",
                values[key],
                f"x {names.META_TIME_SCALE} {scale:g} = {got[field] * scale:g} s",
            )
    startup_s = got["startup_s"]
    if startup_s > 0 and got["excursion_window_s"] < startup_s:
        raise MetadataError(
            names.META_EXCURSION_WINDOW_S,
            f"a window at least {names.META_STARTUP_S} ({startup_s:g} s) long",
            values[names.META_EXCURSION_WINDOW_S],
            "a shorter one cannot see an excursion as long as a start-up",
        )
    if got["min_replicas"] > got["max_replicas"]:
        raise MetadataError(
            names.META_MIN_REPLICA_COUNT,
            f"a count ≤ {names.META_MAX_REPLICA_COUNT} ({got['max_replicas']:g})",
            values[names.META_MIN_REPLICA_COUNT],
        )
    if got["policy"] == "qps" and got["source"] != "router":
        raise MetadataError(
            names.META_POLICY,
            f'"saturation" when {names.META_SOURCE} is "{got["source"]}"',
            got["policy"],
            "the qps baseline counts arrivals at the router",
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


def _decimal(
    key: str,
    text: str,
    form: str,
    *,
    positive: bool = False,
    low: float = 0.0,
    high: float = 1e9,
) -> float:
    """A plain non-negative decimal ("4", "0.5", ".5"); no signs, exponents, nan or inf."""
    if not _DECIMAL.match(text):
        raise MetadataError(key, form, text)
    number = float(text)
    if not math.isfinite(number) or number < low or number > high or (positive and number <= 0):
        raise MetadataError(key, form, text)
    return number
