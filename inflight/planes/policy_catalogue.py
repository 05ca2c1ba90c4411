"""The policies a comparison runs, by name: ``fixed:N`` or a control plane ``inflight up
--policy`` runs, with optional saturation trigger metadata.

One reading of ``--policies``, shared by the live comparison (``inflight bench compare``,
which starts one ``inflight up`` per policy: :meth:`Policy.up_args`) and the simulated one
(``inflight sim compare``/``tune``/``calibrate``), and the comparisons' default policy sets.
Pure: names and settings only; the variants' values are judged by the scaler's own reading
of its metadata (:func:`external_scaler.metadata.parse_metadata`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from inflight.control.trigger import check_override_key, format_overrides, policy_settings
from inflight.names import (
    META_ANTICIPATE_S,
    META_EXCURSION_FLEET_CHANGE,
    META_EXCURSION_FLEETS,
    META_EXCURSION_MARGIN,
    META_FLOOR_SINGLE_FRACTION,
    META_FLOOR_SINGLE_WINDOW_S,
    META_FLOOR_STATISTIC,
    META_FLOOR_WINDOW_S,
    META_SLO_TTFT_S,
    META_STARTUP_S,
    METADATA_DEFAULTS,
)
from inflight.planes.peers.catalog import POLICY_NAMES

# The closed-loop comparison's policies (--scenario sweep|slowing) when --policies is not given.
CLOSED_LOOP_POLICIES = "fixed:1,fixed:2,qps,saturation"
# The open-loop comparison's (--scenario ramp|spike|diurnal, --arrivals, --trace); MAX: the
# scenario's --max-replicas (:func:`resolve_policies`).
OPEN_LOOP_POLICIES = "fixed:MAX,saturation,kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps"

# The autoscaled policies ``inflight up --policy`` takes: ours, the seed's, and the peers'
# control planes (issue #13).
AUTOSCALED = POLICY_NAMES
# ``saturation[sloTtftSeconds=run;startupSeconds=run]``: what the operator of the run knows,
# its own TTFT SLO and replica start-up (:func:`with_run`).
RUN_VALUE = "run"
_VARIANT = re.compile(r"^saturation\[(?P<settings>[^\]]*)\]$")
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Policy:
    """A policy of the comparison: ``fixed:N`` (frozen N replicas), or one ``inflight up
    --policy`` runs (:data:`AUTOSCALED`), with optional saturation trigger ``metadata``
    (``saturation[targetSaturation=0.8;scaleDownWindowSeconds=120]``)."""

    name: str
    kind: str  # "fixed" or one of AUTOSCALED
    replicas: int  # start (and, for fixed, the only) replica count
    metadata: tuple[tuple[str, str], ...] = ()  # --scaler-metadata KEY=VALUE overrides

    @property
    def frozen(self) -> bool:
        return self.kind == "fixed"

    @property
    def slug(self) -> str:
        """A file-name-safe name: ``fixed:2`` → ``fixed2``,
        ``saturation[targetSaturation=0.8;…]`` → ``saturation-targetSaturation0.8-…``."""
        text = self.name.replace(":", "").replace("=", "")
        return _SLUG_UNSAFE.sub("-", text).strip("-")

    def up_args(self, max_replicas: int, min_replicas: int | None = None) -> list[str]:
        if self.frozen:
            return ["--replicas", str(self.replicas), "--no-autoscale"]
        args = ["--policy", self.kind]
        if min_replicas is not None:
            args += ["--min-replicas", str(min_replicas)]
        args += ["--replicas", str(self.replicas), "--max-replicas", str(max_replicas)]
        if self.metadata:
            args += ["--scaler-metadata", format_overrides(self.metadata)]
        return args


def _variant_metadata(raw: str, settings: str) -> tuple[tuple[str, str], ...]:
    """``targetSaturation=0.8;scaleDownWindowSeconds=120`` → pairs; keys from
    inflight/names.py ``METADATA_DEFAULTS`` but those ``inflight up`` sets from its flags
    (:func:`inflight.control.trigger.check_override_key`); errors name ``--policies`` and the
    item."""
    pairs: list[tuple[str, str]] = []
    for item in (x.strip() for x in settings.split(";")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise ValueError(f"--policies: {raw!r}: expected KEY=VALUE, got {item!r}")
        try:  # as ``inflight up --scaler-metadata`` judges it, each variant running one
            check_override_key(key)
        except ValueError as exc:
            raise ValueError(f"--policies: {raw!r}: {exc}") from None
        if _SLUG_UNSAFE.search(value):
            raise ValueError(
                f"--policies: {raw!r}: the value {value!r} of {key} may hold only letters, "
                "digits, '.', '_' and '-'"
            )
        if key in (k for k, _ in pairs):
            raise ValueError(f"--policies: {raw!r}: {key} given twice")
        pairs.append((key, value))
    try:  # the scaler's own reading of its metadata judges the values (the settings tried
        # and not adopted too: a live run's scaler refuses those at its start, naming them)
        parse_metadata({**METADATA_DEFAULTS, **dict(with_run(pairs, 1.0, 1.0))}, experimental=True)
    except MetadataError as exc:
        raise ValueError(f"--policies: {raw!r}: {exc}") from None
    return tuple(pairs)


def with_run(
    pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]], ttft_s: float, startup_s: float
) -> tuple[tuple[str, str], ...]:
    """``pairs`` with ``sloTtftSeconds=run`` read as ``ttft_s`` and ``startupSeconds=run``
    as ``startup_s``: in the simulator, a variant whose operator knows the run's own SLO
    (``--slo-ttft-s``) and replica start-up (``--startup-s``); the generalization harness
    draws both per workload."""
    known = {META_SLO_TTFT_S: ttft_s, META_STARTUP_S: startup_s}
    return tuple((k, f"{known[k]:g}" if v == RUN_VALUE and k in known else v) for k, v in pairs)


def parse_policies(text: str, start_replicas: int = 1) -> list[Policy]:
    """``"fixed:1,fixed:2,qps,saturation,kpa,saturation[targetSaturation=0.8]"`` →
    policies; autoscaled ones start at ``start_replicas``; errors name ``--policies``."""
    out: list[Policy] = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        if raw in AUTOSCALED:
            out.append(Policy(raw, raw, start_replicas))
        elif (m := _VARIANT.match(raw)) is not None:
            out.append(
                Policy(raw, "saturation", start_replicas, _variant_metadata(raw, m["settings"]))
            )
        elif raw.startswith("fixed:") and raw[6:].isdigit() and int(raw[6:]) >= 1:
            out.append(Policy(raw, "fixed", int(raw[6:])))
        else:
            raise ValueError(
                f"--policies: unknown policy {raw!r}; use fixed:N (N >= 1), "
                f"{', '.join(AUTOSCALED)} or saturation[KEY=VALUE;...]"
            )
    if not out:
        raise ValueError("--policies: no policy given")
    if len({p.name for p in out}) != len(out):
        raise ValueError(f"--policies: a policy is listed twice in {text!r}")
    if len({p.slug for p in out}) != len(out):
        raise ValueError(f"--policies: two policies would share a file name in {text!r}")
    return out


#: When the floor learned from recent peaks (``floorWindowSeconds``, ``floorFraction``)
#: became the saturation policy's default (results/2026-12-02-frontier-warm). A live run
#: recorded before it ran without the floor, and its runs name the policy only
#: ("saturation"), not its metadata.
FLOOR_DEFAULT_SINCE = "2026-12-02T10:00:00+00:00"
#: When the floor's level became the recurring one, a lone peak held at 0.3 of it
#: (``floorStatistic`` recurrent, ``floorSingleWindowSeconds`` 900, ``floorSingleFraction``
#: 0.3; results/2026-12-02-single-fraction). A live run recorded between the two held the
#: highest peak at ``floorFraction`` (``floorStatistic`` peak).
RECURRENT_FLOOR_DEFAULT_SINCE = "2026-12-02T17:30:00+00:00"
#: When bursts that come back on a period became met ahead (``anticipateSeconds`` 130;
#: results/2026-12-02-anticipate). A live run recorded before it did not anticipate.
ANTICIPATE_DEFAULT_SINCE = "2026-12-02T22:30:00+00:00"
#: When a scale-up that cannot arrive in time became held by default (``startupSeconds``
#: 30; results/2026-12-03-startup-default). A live run recorded before it had it off.
STARTUP_DEFAULT_SINCE = "2026-12-03T04:20:00+00:00"
#: When a late scale-up's evidence widened (``excursionFleets`` any, ``excursionFleetChange``
#: own, ``excursionMargin`` 1.5; results/2026-12-03-fleet-change). A live run recorded
#: before it read only the ready fleet's excursions, any fleet change as a scale-up in
#: time, at margin 1.
EVIDENCE_DEFAULT_SINCE = "2026-12-03T21:00:00+00:00"
#: When ``excursionMargin`` went back to 1, the wider evidence kept
#: (results/2026-12-03-margin). A live run recorded between the two ran at 1.5.
MARGIN_DEFAULT_SINCE = "2026-12-03T23:30:00+00:00"
#: When the SLO stage became the default (``sloTtftSeconds`` 2, ``sloGoal`` 0.99;
#: results/2026-12-07-slo-fixed-report). Every run that did not record its settings is older
#: (runs record them since a21dd75) and ran without it: the table's last row.
SLO_DEFAULT_SINCE = "2026-12-07T07:45:00+00:00"
_AS_RECORDED: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (FLOOR_DEFAULT_SINCE, ((META_FLOOR_WINDOW_S, "0"),)),
    (
        RECURRENT_FLOOR_DEFAULT_SINCE,
        (
            (META_FLOOR_STATISTIC, "peak"),
            (META_FLOOR_SINGLE_WINDOW_S, "0"),
            (META_FLOOR_SINGLE_FRACTION, "0"),
        ),
    ),
    (ANTICIPATE_DEFAULT_SINCE, ((META_ANTICIPATE_S, "0"),)),
    (STARTUP_DEFAULT_SINCE, ((META_STARTUP_S, "0"),)),
    (
        EVIDENCE_DEFAULT_SINCE,
        (
            (META_EXCURSION_FLEETS, "same"),
            (META_EXCURSION_FLEET_CHANGE, "any"),
            (META_EXCURSION_MARGIN, "1"),
        ),
    ),
    (MARGIN_DEFAULT_SINCE, ((META_EXCURSION_MARGIN, "1.5"),)),
    (SLO_DEFAULT_SINCE, ((META_SLO_TTFT_S, "0"),)),
)


def as_recorded(policy: Policy, created_at: str | None) -> Policy:
    """``policy`` as a live run created at ``created_at`` (ISO 8601, UTC) that did not record
    its trigger settings ran it (a run that did goes through :func:`as_run`; the table is
    frozen: the runs it describes all predate the recording, and no later change of a
    default needs a row): a
    saturation run from before :data:`FLOOR_DEFAULT_SINCE` without the floor, one from
    before :data:`RECURRENT_FLOOR_DEFAULT_SINCE` with the floor of the highest peak
    (``floorStatistic`` peak), one from before :data:`ANTICIPATE_DEFAULT_SINCE` without
    ``anticipateSeconds``, one from before :data:`STARTUP_DEFAULT_SINCE` without
    ``startupSeconds``, one from before :data:`EVIDENCE_DEFAULT_SINCE` with a late
    scale-up's evidence as it was (``excursionFleets`` same, ``excursionFleetChange`` any,
    ``excursionMargin`` 1), one from before :data:`MARGIN_DEFAULT_SINCE` at
    ``excursionMargin`` 1.5, one from before :data:`SLO_DEFAULT_SINCE` without the SLO stage
    (``sloTtftSeconds`` 0: every run without recorded settings); a key is set by the earliest
    switch the run came before (a run from before both margins' switches ran at 1), and a
    key its metadata names stays as named (what ``inflight sim calibrate`` re-simulates).
    None: as today."""
    if policy.kind != "saturation" or created_at is None:
        return policy
    seen = {k for k, _ in policy.metadata}
    added: list[tuple[str, str]] = []
    for since, then in _AS_RECORDED:  # in time order: the earliest switch's value first
        if created_at >= since:
            continue
        for k, v in then:
            if k not in seen:
                seen.add(k)
                added.append((k, v))
    return replace(policy, metadata=(*policy.metadata, *added)) if added else policy


def as_run(policy: Policy, recorded: Mapping[str, str] | None, created_at: str | None) -> Policy:
    """``policy`` as a run ran it. A run that kept its trigger settings (``recorded``: every
    key resolved, :func:`inflight.control.trigger.resolved`) is re-simulated with them, the
    keys its own flags and stack set left to the re-simulation
    (:func:`~inflight.control.trigger.policy_settings`) and the keys its name gives kept as
    given: today's defaults do not matter. An older run (None) goes through
    :func:`as_recorded`'s table, which no run that keeps its settings needs: it is frozen."""
    if policy.kind != "saturation" or recorded is None:
        return as_recorded(policy, created_at)
    named = {k for k, _ in policy.metadata}
    kept = tuple((k, v) for k, v in policy_settings(recorded) if k not in named)
    return replace(policy, metadata=(*policy.metadata, *kept)) if kept else policy


def resolve_policies(text: str | None, max_replicas: int, start_replicas: int) -> list[Policy]:
    """The open-loop comparison's ``--policies`` (default :data:`OPEN_LOOP_POLICIES`), with
    ``fixed:MAX`` the static maximum ``fixed:<max_replicas>``."""
    chosen = (text or OPEN_LOOP_POLICIES).replace("fixed:MAX", f"fixed:{max_replicas}")
    return parse_policies(chosen, start_replicas=start_replicas)
