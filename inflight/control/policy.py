"""The scaling decision: a pure function of the window of samples, the spec and ``now_s``.

No I/O, no clock, no logging: the scaler, the local stack (``inflight up``) and the simulator
all call the same core, and tests step ``now_s`` instead of sleeping.

Two policies:

* ``saturation`` (the product). The value handed to KEDA is the *stabilized* L:

      value = max over τ in [now − down, now] of  mean(L over (τ − up, τ])

  and the target is ``slots_per_replica × target_saturation``, so the HPA's
  ``desired = ceil(value / target)`` (KEDA's AverageValue arithmetic) gives the replica
  count. Scale-up is immediate (only the short ``up`` smoothing stands between L and
  the value); scale-down happens only when the maximum over the whole ``down`` window
  fits in fewer replicas. Worked example, 4 slots, target saturation 1.0: 8 requests in
  flight for the last 10 s → value 8, target 4, desired 2. Load stops: L reads 0, but
  the 60 s maximum stays 8 until 60 s have passed, then the value falls to 0.
  The HPA keeps its current count while ``value ÷ (target × current)`` is within its
  tolerance (10 %): at 10 replicas of 4 slots, L = 44 (four requests queued) does not
  scale up. ``Decision.desired_replicas`` predicts that hold (``inflight.control.hpa_math``).
  With ``growthHorizonSeconds`` set (off by default), each L in that maximum is padded
  with :func:`growth_headroom`: the L that the arrivals' current growth brings over the
  horizon (a replica's start-up and the loop's lag), for open-loop traffic.
  **The floor learned from recent peaks** (on by default: ``floorWindowSeconds`` 900 and
  ``floorFraction`` 0.6, chosen out of sample in results/2026-12-02-default-vs-frontier,
  judged with trace windows warmed up in results/2026-12-02-frontier-warm; a window of 0
  turns it off): the value is at least the fraction × the highest
  smoothed L of the floor window, that peak capped at ``maxReplicaCount × target`` (L
  beyond the largest fleet is queue, not demand to remember). A burst shorter than a
  replica's start-up is over before the replicas it asks for are up; the floor keeps
  part of them for the next one, and lets go once no peak is left in the window. Worked
  example, target 4, at most 8 replicas: a 60 s burst reads L 20 at t = 160 s, then L 2;
  at 300 s the 60 s maximum is 2 but the floor is 0.6 × 20 = 12 → 3 replicas, until
  t ≈ 1060 s, when the burst leaves the 900 s window (→ 1 replica). A burst that read L 100
  is remembered as 32 (8 × 4): floor 19.2 → 5 replicas. Partial data (gaps, a target
  down) is judged over the decision's span only (``PolicySpec.decision_span_s``: the
  scale-down + scale-up windows), not the floor's memory: the floor remembers the peaks
  of the data it has, and a peak missed by older partial data can only leave it lower, as
  without the floor. So a router blip keeps the count from falling for 70 s, not 15 min.
  Which level of the window's peaks the floor holds is ``floorStatistic``: "peak", the
  highest (the default until results/2026-12-02-single-fraction); "quantile", the level L
  exceeded for at most ``floorQuantile`` of the window (time-weighted,
  :func:`floor_quantile`); "recurrent" (**the default**), the highest level L reached in
  ``floorRecurrences`` (2) separate peaks (:func:`floor_recurrent`), so bursts that come
  back hold what they reached, and, with ``floorSingleWindowSeconds`` (default 900), a peak
  that has not come back yet is held too, at ``floorSingleFraction`` (default 0.3; 0:
  ``floorFraction``'s) of it. Chosen on 16 in-sample rows and judged on 18 held-out rows
  by a rule written before them (results/2026-12-02-single-fraction): one surge no longer
  holds 0.6 of its peak for 15 minutes. Worked example, target 4, at most 8 replicas,
  fraction 0.6, the defaults: a 300 s surge of L 20 and then L 2 → 0.3 × 20 = 6, 2
  replicas, for 900 s (the peak floor: 12, 3 replicas; recurrent alone: 1 replica once
  the 60 s maximum has let go); bursts of L 20 every 200 s → 2 replicas after the first,
  3 from the second on.
  **Bursts that come back on a period, met ahead** (on by default: ``anticipateSeconds``
  130; 0 off; :mod:`inflight.control.recurrence`, results/2026-12-02-anticipate): when the
  latest four separate peaks of L, read over two floor windows, began at regular times (each
  gap within 10 % of their median, the period), the value is at least the highest L they
  reached from ``anticipateSeconds`` before the next is due until it comes (or 10 % of a
  period late), and through a burst for its typical duration. The floor keeps part of a
  burst's fleet; this asks for all of it a start-up ahead. Worked example, target 4:
  bursts of L 16 for 60 s at 100, 400, 700 and 1,000 s, the floor at 9.6 (3 replicas)
  between them → from 1,170 s (1,300 − 130) the value is 16 (4 replicas), through the
  burst at 1,300 s, then back to the floor when the scale-down window lets it go.
  **No scale-up that cannot arrive in time** (``startupSeconds``, a replica's start-up,
  by default 30 s, a lower bound on one; 0 off; :func:`late_scale_up`): while L's recent
  excursions above the ready fleet's capacity all ended sooner than a start-up, a new one
  like them (no longer, no higher, × ``excursionMargin``, 1.5) leaves the value's maximum,
  so the count stays at the ready fleet, the floor or what stood before it began; one that
  outlasts or outgrows them scales. The evidence is every fleet's excursions
  (``excursionFleets`` any), and one a change of the fleet ended sooner than a start-up
  after it began says nothing (``excursionFleetChange`` own: its replica was asked for
  before it); chosen in results/2026-12-03-fleet-change. Worked example, target 4, 3
  ready, start-up 100 s: bursts held L above 12 for 55 s each; the next one, 50 s in,
  answers 12 (3 replicas), not its L 20 (5).
  Opt-in, not adopted (results/2026-12-03-rebound): ``reboundWindowSeconds``, a level L came
  back to within that window of falling below it held that long (:func:`rebound_level`),
  and ``floorSmoothingSeconds``, the window L is smoothed over before the floor remembers it;
  ``floorTolerance`` (results/2026-12-03-floor-window-tolerance): the floor keeps a ready
  replica it nearly fills (:func:`floor_hold`); ``floorShortFraction``
  (results/2026-12-03-floor-short): the recurrent level of peaks shorter than a start-up
  held at its own fraction (:func:`inflight.control.recurrence.short_recurrent`).

* ``qps`` (the seed's arrival-rate rule, kept only as the benchmark's comparison
  baseline). qps = requests received in the last 10 s ÷ 10; qps > 0.5 → current + 1,
  qps < 0.05 → current − 1, else current. It returns ``desired × target`` so the HPA's
  ``ceil(value / target)`` lands on that count. It scales down a full system: 8 in
  flight at 33 s each is λ ≈ 0.24/s, "below 0.5", although half the requests queue.

``time_scale`` multiplies every window and divides every rate, so a stack running the
emulator at time-scale 0.1 sees the seed's dynamics ten times faster.

**Partial data** (:func:`guard`, for both policies). A window that may understate L — a
router down at some step of its decision span (``PolicySpec.decision_span_s``), samples
missing for a stretch of it (a gap, a history shorter than the window, a frozen or stale
series) — can only read L low. So its answer may raise
the replica count or keep it, never lower it: when the count KEDA and the HPA would settle
on (``minReplicaCount``/``maxReplicaCount`` applied) is below the ready count, the answer
is ``ready × target`` instead, which the HPA reads as "keep the current count". Only
when the ready count is unknown, and the window's answer is below the maximum, is there
no answer known to be safe: NoSamples (UNAVAILABLE; KEDA's fallback decides).
Worked example, 4 slots, 3 ready, a router down for part of the window: the window reads
L 6 → 2 replicas, a scale-down on data that missed a router's share, so the answer is
12 (3 × 4); had it read L 20 → 5 replicas, 20 is answered (scaling up on a partial L
is safe: the true L is higher still).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise
from typing import Final, Literal

from inflight import names
from inflight.control.hpa_math import HPA_TOLERANCE, replicas_for_average_value
from inflight.control.keda import replicas_settled
from inflight.control.recurrence import (
    Recurrence,
    anticipating,
    floor_recurrent,
    rebound_level,
    recurrence,
    short_recurrent,
)
from inflight.control.samples import Sample as Sample  # the policy's callers name it here
from inflight.control.slo_sizing import SloFleet, slo_fleet, undrained_share

PolicyName = Literal["saturation", "qps"]
POLICIES: Final[tuple[PolicyName, ...]] = ("saturation", "qps")
# How the floor weighs a remembered peak (``floorDecay``): "none", its full height until it
# leaves the window; "linear", its height x (1 - age / floorWindowSeconds).
FloorDecay = Literal["none", "linear"]
FLOOR_DECAYS: Final[tuple[FloorDecay, ...]] = ("none", "linear")
# What the floor remembers at each step (``floorPeak``): "inflight", L (smoothed over the
# scale-up window); "demand", L capped at the L the arrivals needed, their rate over the
# scale-up window x the served requests' mean service time (:func:`service_time`).
FloorPeak = Literal["inflight", "demand"]
FLOOR_PEAKS: Final[tuple[FloorPeak, ...]] = ("inflight", "demand")
# Which level of those remembered values the floor holds (``floorStatistic``): "peak", the
# highest; "quantile", the level exceeded for at most ``floorQuantile`` of the floor window
# (:func:`floor_quantile`); "recurrent", the highest level reached in ``floorRecurrences``
# separate peaks (:func:`floor_recurrent`).
FloorStatistic = Literal["peak", "quantile", "recurrent"]
FLOOR_STATISTICS: Final[tuple[FloorStatistic, ...]] = ("peak", "quantile", "recurrent")

# Which fleets' excursions above the ready fleet's capacity are a late scale-up's evidence
# (``excursionFleets``): "same", the fleet ready now only; "larger", a larger one's too;
# "any", every fleet's (a smaller one's L is swollen by its queue: longer, and higher).
ExcursionFleets = Literal["same", "larger", "any"]
EXCURSION_FLEETS: Final[tuple[ExcursionFleets, ...]] = ("same", "larger", "any")
# Which excursions a change of the ready count ended turn a late scale-up's hold off
# (``excursionFleetChange``): "any", every one (a replica that came while L was above: a
# scale-up in time); "own", only one that lasted ``startupSeconds`` or more (a replica
# asked for in it could have come); one a change ended sooner (a replica asked for before
# it began, ``startupSeconds`` being a lower bound on a start-up, or one that went) is no
# evidence either way.
ExcursionFleetChange = Literal["any", "own"]
EXCURSION_FLEET_CHANGES: Final[tuple[ExcursionFleetChange, ...]] = ("any", "own")

# The bursts' recurrence looks this many floor windows back (``anticipateSeconds``).
RECURRENCE_MEMORY_WINDOWS: Final = 2

# A rebound (``reboundWindowSeconds``) is looked for this many of its windows back: the
# gap, the stretch L came back in, and the hold since it ended.
REBOUND_MEMORY_WINDOWS: Final = 3

# ``floorTolerance``'s highest value: the floor's hold divides by 1 − the tolerance.
MAX_FLOOR_TOLERANCE: Final = 0.9

# The seed's rule, in seed time (seconds, requests per second).
QPS_WINDOW_S: Final = 10.0
QPS_UP_THRESHOLD: Final = 0.5
QPS_DOWN_THRESHOLD: Final = 0.05

# Values are rounded to this many decimals before ceil(), so a mean that is 8.0000000001
# by floating-point accident does not ask for a third replica.
_DECIMALS: Final = 6


# L's samples may be this many scrape intervals apart (or old) before the window stops
# being a record of L: the source's staleness limit and the policy's gap limit.
SAMPLE_GAP_SCRAPES: Final = 3


class NoSamples(ValueError):
    """The window holds no sample to decide on ("no data yet" is not a 0)."""


@dataclass(frozen=True)
class PolicySpec:
    """What the policy needs from the ScaledObject metadata, windows already time-scaled.

    The defaults are the metadata's (``inflight.names.DEFAULT_*``, at time-scale 1).

    ``scale_up_window_s`` and ``scale_down_window_s`` are in wall seconds (the metadata's
    seconds × time_scale); ``time_scale`` is kept for the qps rule's window and thresholds.
    """

    slots_per_replica: int = names.DEFAULT_SLOTS_PER_REPLICA
    target_saturation: float = names.DEFAULT_TARGET_SATURATION
    scale_up_window_s: float = float(names.DEFAULT_SCALE_UP_WINDOW_S)
    scale_down_window_s: float = float(names.DEFAULT_SCALE_DOWN_WINDOW_S)
    activation_inflight: float = float(names.DEFAULT_ACTIVATION_INFLIGHT)
    policy: PolicyName = "saturation"
    time_scale: float = names.DEFAULT_TIME_SCALE
    # The HPA's tolerances (its ``behavior.scaleUp/scaleDown.tolerance``, 10 % unless
    # set): only for predicting the count the HPA derives, never for the value.
    hpa_scale_up_tolerance: float = HPA_TOLERANCE
    hpa_scale_down_tolerance: float = HPA_TOLERANCE
    # The longest gap (wall s) between samples of L, or between the window's ends and its
    # nearest sample, that still lets the window decide a scale-down. Metadata sets
    # SAMPLE_GAP_SCRAPES x ``scrapeIntervalSeconds``; infinite: never checked.
    max_sample_gap_s: float = math.inf
    # Start-up-aware headroom (``growthHorizonSeconds``, wall s; 0: off) and the window
    # the arrival rate's growth is measured over (``growthWindowSeconds``, wall s).
    growth_horizon_s: float = float(names.DEFAULT_GROWTH_HORIZON_S)
    growth_window_s: float = float(names.DEFAULT_GROWTH_WINDOW_S)
    # The bounds KEDA and its HPA clamp the count to (the ScaledObject's minReplicaCount
    # and maxReplicaCount): an answer below the minimum does not lower a count at it.
    min_replicas: int = names.DEFAULT_MIN_REPLICA_COUNT
    max_replicas: int = names.DEFAULT_MAX_REPLICA_COUNT
    # The floor learned from recent peaks (``floorWindowSeconds``, wall s; 0: off, and
    # ``floorFraction``): the value is at least this fraction of the highest smoothed L
    # over the floor window (the module docstring).
    floor_window_s: float = float(names.DEFAULT_FLOOR_WINDOW_S)
    floor_fraction: float = names.DEFAULT_FLOOR_FRACTION
    floor_decay: FloorDecay = names.DEFAULT_FLOOR_DECAY
    floor_peak: FloorPeak = names.DEFAULT_FLOOR_PEAK
    # Which level of the remembered peaks (``floorStatistic``, ``floorQuantile``,
    # ``floorRecurrences``): :func:`floor_quantile`, :func:`floor_recurrent`.
    floor_statistic: FloorStatistic = names.DEFAULT_FLOOR_STATISTIC
    floor_quantile: float = names.DEFAULT_FLOOR_QUANTILE
    floor_recurrences: int = names.DEFAULT_FLOOR_RECURRENCES
    # With "recurrent": the highest peak of this last stretch (wall s) is held too, so a
    # burst that has not come back yet still holds (``floorSingleWindowSeconds``; 0: not).
    floor_single_window_s: float = float(names.DEFAULT_FLOOR_SINGLE_WINDOW_S)
    # ... held at this fraction of it (``floorSingleFraction``; 0: ``floor_fraction``).
    floor_single_fraction: float = float(names.DEFAULT_FLOOR_SINGLE_FRACTION)
    # L remembered by the floor is smoothed over this (wall s; None: the scale-up window;
    # 0: each sample as scraped) (``floorSmoothingSeconds``).
    floor_smoothing_s: float | None = None
    # The floor lets a ready replica go only when what it holds fits in one fewer with this
    # fraction of their capacity to spare (``floorTolerance``; 0: off): :func:`floor_hold`.
    floor_tolerance: float = 0.0
    # The fraction held of the recurrent level of peaks that each ended sooner than
    # ``startup_s`` (``floorShortFraction``; 0: off): :func:`short_recurrent`.
    floor_short_fraction: float = 0.0
    # The floor keeps the largest fleet L filled in this many separate flashes of the floor
    # window, each over sooner than ``startup_s`` (``floorFilledFlashes``; 0: off):
    # :func:`filled_fleet`.
    floor_filled_flashes: int = 0
    # No scale-up that cannot arrive in time (``startupSeconds``, wall s; 0: off;
    # ``excursionWindowSeconds``, the memory of L's excursions above capacity):
    # :func:`late_scale_up`.
    startup_s: float = float(names.DEFAULT_STARTUP_S)
    # Bursts that come back on a period, met ahead (``anticipateSeconds``, wall s; 0: off):
    # :mod:`inflight.control.recurrence`, in the floor's memory (the floor on).
    anticipate_s: float = float(names.DEFAULT_ANTICIPATE_S)
    excursion_window_s: float = float(names.DEFAULT_EXCURSION_WINDOW_S)
    excursion_margin: float = names.DEFAULT_EXCURSION_MARGIN
    # Which fleets' excursions are evidence (``excursionFleets``): "same", only the fleet
    # ready now's; "larger", also a larger one's; "any", every one's (:func:`excursions`).
    excursion_fleets: ExcursionFleets = names.DEFAULT_EXCURSION_FLEETS
    # Which excursions a fleet change ended turn the hold off (``excursionFleetChange``):
    # "any", every one; "own", only one a start-up long (others are no evidence).
    excursion_fleet_change: ExcursionFleetChange = names.DEFAULT_EXCURSION_FLEET_CHANGE
    # Levels L came back to sooner than a replica could, held this long (wall s) after L
    # last reached them (``reboundWindowSeconds``; 0: off): :func:`rebound_level`.
    rebound_window_s: float = float(names.DEFAULT_REBOUND_WINDOW_S)
    # A backlog that grows because the arrivals outrun the fleet is asked for as the
    # arrivals' offered load plus what drains it in this long, not as its whole size
    # (``backlogDrainSeconds``; 0: off): :func:`drain_level`.
    backlog_drain_s: float = float(names.DEFAULT_BACKLOG_DRAIN_S)
    # Square-root staffing's headroom over the peak of L (``queueHeadroom``, beta; 0: off;
    # experimental): the peak stage asks for L + beta x min(sqrt(L), its rise above its
    # mean) (:func:`queue_headroom`).
    queue_headroom: float = names.DEFAULT_QUEUE_HEADROOM
    # The operator's SLO (``sloTtftSeconds``, wall s; 0: off; ``sloGoal``; on by default):
    # the fleet is at least the one Erlang C says keeps all but 1 - goal of the requests
    # from waiting longer than the TTFT at the arrivals and service time measured
    # (:func:`_slo`, :mod:`inflight.control.slo_sizing`).
    slo_ttft_s: float = float(names.DEFAULT_SLO_TTFT_S)
    slo_goal: float = names.DEFAULT_SLO_GOAL

    @property
    def late_scale_up_on(self) -> bool:
        """Whether scale-ups that cannot arrive in time are held (a start-up and a window)."""
        return self.startup_s > 0 and self.excursion_window_s > 0

    @property
    def floor_on(self) -> bool:
        """Whether the learned floor is in force (a window and a fraction above 0)."""
        return self.floor_window_s > 0 and self.floor_fraction > 0

    @property
    def floor_smoothing_window_s(self) -> float:
        """The window (wall s) L is smoothed over before the floor remembers it:
        ``floor_smoothing_s``, or the scale-up window when that is None."""
        if self.floor_smoothing_s is None:
            return self.scale_up_window_s
        return self.floor_smoothing_s

    @property
    def recurrence_memory_s(self) -> float:
        """How far back (wall s) bursts are looked for when ``anticipate_s`` is on (the
        floor on): ``RECURRENCE_MEMORY_WINDOWS`` floor windows, so four bursts up to about
        half a floor window apart are all in it when the next is due; 0 when off."""
        if not (self.floor_on and self.anticipate_s > 0):
            return 0.0
        return RECURRENCE_MEMORY_WINDOWS * self.floor_window_s

    @property
    def target(self) -> float:
        """L per replica the HPA aims for (requests in flight)."""
        return self.slots_per_replica * self.target_saturation

    @property
    def lookback_s(self) -> float:
        """How far back (wall seconds) samples are needed for any policy: the decision's
        span, the floor's memory when the floor is on, and the excursions' when
        :func:`late_scale_up` is on."""
        return max(self.decision_span_s, self.memory_s)

    @property
    def memory_s(self) -> float:
        """How far back (wall seconds) :func:`decide` reads L: the scale-down maximum of
        the scale-up means, the floor's window when the floor is on (the recurrence's
        longer one with ``anticipate_s``) or the SLO stage is, and the excursions' when
        :func:`late_scale_up` is on (each behind a scale-up mean)."""
        up_s = self.scale_up_window_s
        floor_s = (
            max(self.floor_window_s, self.recurrence_memory_s) + self.floor_smoothing_window_s
            if self.floor_on
            else 0.0
        )
        late_s = self.excursion_window_s + up_s if self.late_scale_up_on else 0.0
        rebound_s = REBOUND_MEMORY_WINDOWS * self.rebound_window_s + up_s
        # The SLO stage reads its memory, the floor on or off (:func:`_slo`, :func:`_undrained`).
        slo_s = self.slo_memory_s if self.slo_ttft_s > 0 else 0.0
        return max(self.scale_down_window_s + up_s, floor_s, late_s, rebound_s, slo_s)

    @property
    def slo_memory_s(self) -> float:
        """How far back (wall s) the SLO stage reads the arrivals' dispersion, the most in
        flight, a longer count (:func:`counted_span`) and the service time the peak stage's
        discount takes (:func:`_undrained`): the floor's window, never under the scale-down
        and scale-up windows."""
        return max(self.scale_down_window_s + self.scale_up_window_s, self.floor_window_s)

    @property
    def decision_span_s(self) -> float:
        """The span (wall seconds back from now) whose L, arrivals and gaps the count rests
        on: the scale-down maximum of the scale-up means, the qps window, the growth's two
        windows. Partial data is judged over it (a target down, a gap), not over the
        floor's longer memory: the floor only remembers the peaks it saw, and a peak
        missed in a stretch of partial data older than this span can only leave the floor
        lower, as it would be without the floor (:func:`guard`, the sources).

        Worked example: scale-down 60 s, scale-up 10 s, floor 900 s → span 70 s (lookback
        910 s): a router down 100 s ago no longer keeps the count from falling.
        """
        growth_s = 2 * self.growth_window_s if self.growth_horizon_s > 0 else 0.0
        return max(self.scale_down_window_s + self.scale_up_window_s, self.qps_window_s, growth_s)

    @property
    def qps_window_s(self) -> float:
        """The seed's 10 s arrival window, in wall seconds."""
        return QPS_WINDOW_S * self.time_scale

    @property
    def counting_s(self) -> float:
        """The shortest span (wall s) arrivals are counted over: the scale-up window, or one
        scrape interval (``max_sample_gap_s`` ÷ ``SAMPLE_GAP_SCRAPES``) when that is
        longer. A counter scraped every 30 s moves in 30 s steps, whatever the step of the
        samples read back: counts over a shorter span are the scrapes' rhythm, not the
        arrivals'."""
        if math.isfinite(self.max_sample_gap_s):
            return max(self.scale_up_window_s, self.max_sample_gap_s / SAMPLE_GAP_SCRAPES)
        return self.scale_up_window_s


@dataclass(frozen=True)
class Partial:
    """Why a window may understate L: ``kind`` is the scaler's error kind for it
    (``names.SCALER_ERROR_SOURCE_PARTIAL``: a target feeding L was down;
    ``names.SCALER_ERROR_SOURCE_STALE``: samples of L missing for a stretch), ``detail``
    says which and when, for the reason and the log."""

    kind: str
    detail: str


@dataclass(frozen=True)
class Window:
    """Samples over the lookback, as a source delivers them.

    ``inflight``: L (requests running + queued); ``arrivals_total``: requests received, a
    running total over the routers that never falls (each router's counter resets already
    corrected by the source, ``sources/counters.py``), so a difference of two samples is
    the arrivals between them; ``ready_replicas``: endpoints ready.
    The last two may be empty when the source has no such signal (plain vLLM).
    ``partial``: what the source found that makes L a lower bound (empty: L is whole);
    the policy answers such a window through :func:`guard`.
    """

    inflight: tuple[Sample, ...]
    arrivals_total: tuple[Sample, ...] = ()
    ready_replicas: tuple[Sample, ...] = ()
    partial: tuple[Partial, ...] = ()


@dataclass(frozen=True)
class Decision:
    """What the scaler answers, and why.

    ``value``: the metric value for KEDA (requests in flight); ``target``: the per-replica
    target; ``desired_replicas``: what the HPA will derive from them before its
    stabilization, rate policies and min/max clamps: ``ceil(value / target)``, except
    that the HPA holds the current count while ``value ÷ (target × current)`` is within
    its tolerance (``inflight.control.hpa_math``; the ready count stands for current, ``ceil``
    alone when it is unknown); ``inflight``: the latest L;
    ``ready_replicas``: the latest ready count (None when unknown); ``saturation``: latest
    L ÷ (slots × ready), None when ready is unknown or 0; ``direction``: desired vs ready
    (``up``/``down``/``hold``, ``unknown`` without a ready count); ``partial``: why the
    window may understate L (empty when it is whole): the answer then raises or keeps the
    count, never lowers it (:func:`guard`); ``held_scale_up``: the value was kept below L's
    maximum because a replica asked for now would be ready only after the excursion
    (:func:`late_scale_up`; the scaler exports it: a hold changes no count).
    """

    policy: PolicyName
    value: float
    target: float
    desired_replicas: int
    active: bool
    inflight: float
    ready_replicas: int | None
    saturation: float | None
    direction: Literal["up", "down", "hold", "unknown"]
    reason: str
    partial: tuple[Partial, ...] = ()
    held_scale_up: bool = False


def default_anticipate_s(startup_s: float) -> float:
    """``anticipateSeconds`` when the metadata leaves it out: the default (130 s: the
    scenarios' 100 s start-up plus 30 s of the loop's lag), or a longer ``startupSeconds``
    plus that lag, so replicas asked for a burst due next start soon enough to serve it.

    >>> default_anticipate_s(30), default_anticipate_s(100), default_anticipate_s(600)
    (130.0, 130.0, 630.0)
    """
    return float(max(names.DEFAULT_ANTICIPATE_S, startup_s + names.ANTICIPATE_LOOP_LAG_S))


def evaluate(window: Window, spec: PolicySpec, now_s: float) -> Decision:
    """Run the policy ``spec.policy`` names; a partial window's answer goes through
    :func:`guard`."""
    ready = latest(window.ready_replicas, now_s)
    ready_count = None if ready is None else max(0, round(ready))
    if spec.policy == "qps":
        if ready_count is None:
            raise NoSamples("the qps policy needs the ready replica count; none in the window")
        decision = decide_qps(window.arrivals_total, window.inflight, ready_count, spec, now_s)
        return guard(decision, window.partial, spec)
    return decide(
        window.inflight,
        spec,
        now_s,
        ready_replicas=ready_count,
        arrivals=window.arrivals_total,
        partial=window.partial,
        ready_series=window.ready_replicas,
    )


def guard(decision: Decision, partial: Sequence[Partial], spec: PolicySpec) -> Decision:
    """``decision`` made on a window that may understate L: raise or keep, never lower.

    The count the answer leads to is what KEDA and the HPA settle on
    (:func:`inflight.control.keda.replicas_settled`: ``minReplicaCount`` and
    ``maxReplicaCount`` applied, 0 for an inactive trigger that may scale to zero). At or
    above the ready count (capped at the maximum) the decision stands: a partial L can only
    be low, so the true answer is higher still. Below it, the answer keeps the ready
    count: ``ready × target``, active, which the HPA reads as its current count. Without a
    ready count nothing but the maximum is known not to lower it: NoSamples.

    Worked example, target 4, min 1, max 5: ready 3, the window reads 6 → 2 replicas →
    answered 12 (hold 3); reads 20 → 5 → answered 20 (up); ready 1 and idle (0 → 0,
    settled at the minimum 1) → answered 0 (nothing lowers). ``partial`` empty: as is.
    """
    if not partial:
        return decision
    partial = tuple(partial)
    why = "; ".join(p.detail for p in partial)
    ready = decision.ready_replicas
    settled = replicas_settled(
        decision.desired_replicas, decision.active, spec.min_replicas, spec.max_replicas
    )
    if ready is None:
        if settled >= spec.max_replicas:
            return replace(
                decision,
                partial=partial,
                reason=f"{decision.reason} (on partial data: {why}; at "
                f"{names.META_MAX_REPLICA_COUNT} {spec.max_replicas}, it cannot lower the count)",
            )
        raise NoSamples(
            f"{why}; the ready replica count is unknown, so no answer below "
            f"{names.META_MAX_REPLICA_COUNT} ({spec.max_replicas}) is known not to lower "
            f"the count (this one would settle at {settled})"
        )
    keep = min(ready, spec.max_replicas)
    if settled >= keep:
        return replace(
            decision,
            partial=partial,
            reason=f"{decision.reason} (on partial data: {why}; it raises or keeps the count)",
        )
    target = decision.target
    return replace(
        decision,
        value=round(keep * target, _DECIMALS),
        desired_replicas=keep,
        active=True,
        direction=_direction(keep, ready),
        partial=partial,
        reason=(
            f"holding {keep} replicas ({keep} x {target:g}) on partial data: {why}; the "
            f"window alone reads {decision.value:g}, which would lower the count to {settled}"
        ),
    )


def growth_headroom(
    inflight: Sequence[Sample], arrivals_total: Sequence[Sample], spec: PolicySpec, now_s: float
) -> float:
    """The L that the arrivals' current growth adds over ``growth_horizon_s`` (0 if none).

    A replica asked for now serves only after its start-up; on a rising open-loop load
    the L it meets then is larger than the L that asked for it. With ``T`` =
    ``growth_window_s``: n₁ arrivals in (now − 2T, now − T], n₂ in (now − T, now]; if the
    rate grew (n₂ > n₁), λ' = (n₂ − n₁) / T² and, by Little's Law with W = mean L over the
    last T ÷ (n₂ / T), the headroom is W · λ' · horizon. A steady or falling rate adds
    nothing, so a closed loop at constant concurrency is never padded once its rate has
    settled. Worked example: T = 60 s, 240 then 300 arrivals (4 → 5 req/s), mean L 20 →
    W = 4 s, λ' = 60 / 3600 = 1/60 req/s², horizon 120 s → 4 · 120 / 60 = 8 more in L.
    """
    horizon_s, window_s = spec.growth_horizon_s, spec.growth_window_s
    if horizon_s <= 0 or window_s <= 0:
        return 0.0
    a_now = latest(arrivals_total, now_s)
    a_mid = latest(arrivals_total, now_s - window_s)
    a_old = latest(arrivals_total, now_s - 2 * window_s)
    if a_now is None or a_mid is None or a_old is None:
        return 0.0
    recent, before = max(0.0, a_now - a_mid), max(0.0, a_mid - a_old)
    if recent <= before:
        return 0.0
    span = _in_span(inflight, now_s - window_s, now_s)
    if not span:
        return 0.0
    mean_l = sum(s.value for s in span) / len(span)
    w_s = mean_l / (recent / window_s)
    rate_growth = (recent - before) / window_s / window_s
    return w_s * rate_growth * horizon_s


def decide(
    samples: Sequence[Sample],
    spec: PolicySpec,
    now_s: float,
    ready_replicas: int | None = None,
    arrivals: Sequence[Sample] = (),
    partial: Sequence[Partial] = (),
    ready_series: Sequence[Sample] = (),
) -> Decision:
    """The saturation policy: the stabilized L and the replica count HPA derives from it.

    ``samples`` are L over at least ``[now − down − up, now]`` (older and future ones are
    ignored). Raises NoSamples when none falls in that span. With ``growth_horizon_s``
    set, ``arrivals`` (the arrivals running total) pads the current L with
    :func:`growth_headroom`. A gap in the samples over ``max_sample_gap_s`` adds to
    ``partial`` (what the source found), and a partial window is answered through
    :func:`guard`. ``ready_series`` (the ready count over time) serves only the floor's
    ``demand`` peak (:func:`service_time`).

    The stages, each a pure function of what came before: the window of L
    (:class:`_Levels`); the SLO stage's fleet for the arrivals, with the rise planned over
    a start-up (:func:`_slo`, :func:`planned_rise`); the service time S over the memory,
    by which the peak stage counts L at S ÷ (S + the TTFT) of itself (:func:`_undrained`,
    :func:`undrained_share`: a queue the fleet drains within the TTFT buys no replica; the
    floor holds recent peaks in full); the peak, L's maximum over the
    scale-down window, padded by the arrivals' growth (:func:`_peak`); the floor from
    recent peaks, with the bursts' recurrence, the filled fleet and the tolerance
    (:func:`_floor`); the rebound
    (:func:`_rebound`) and the backlog drain (:func:`_drain`), both off by default; the
    hold of a scale-up that cannot arrive in time (:func:`_late`); then the HPA's count
    and the one stage that set the value (:func:`_reason`).
    """
    span_s = spec.scale_up_window_s + spec.scale_down_window_s
    points = _in_span(samples, now_s - spec.memory_s, now_s)
    if not any(p.t_s >= now_s - span_s for p in points):
        raise NoSamples(
            f"no sample of L in the last {span_s:g} s (scale-down + scale-up windows)"
            + "".join(f"; {p.detail}" for p in partial)
        )
    levels = _Levels(points, samples, arrivals, spec)
    # A peak beyond the largest fleet is queue, not demand for the floor or rebound to hold.
    cap = spec.max_replicas * spec.target
    slo = _slo(levels, ready_series, now_s)
    share, served_s = _undrained(levels, ready_series, now_s)
    peak = _counted_peak(_peak(levels, now_s), share)
    floor = _floor(levels, now_s, cap, ready_replicas, ready_series) if spec.floor_on else _NO_FLOOR
    rebound = _rebound(levels, spec, now_s, max(peak.value, floor.value), cap)
    floor_value = max(floor.value, rebound, slo.replicas * spec.target if slo else 0.0)
    value, drained, late = _lowered(
        levels, peak, floor_value, ready_replicas, ready_series, now_s, share
    )
    active = value > spec.activation_inflight
    desired = hpa_replicas(value, spec, ready_replicas) if active else 0
    reason = _reason(
        spec, value, desired, active, ready_replicas, peak, floor, floor_value, rebound, late,
        drained, slo,
    ) + _drain_note(share, served_s, spec)  # fmt: skip
    partial = (*partial, *_gaps(levels.times, spec, now_s))
    inflight = points[-1].value
    decision = Decision(
        policy="saturation",
        value=value,
        target=spec.target,
        desired_replicas=desired,
        active=active,
        inflight=inflight,
        ready_replicas=ready_replicas,
        saturation=_saturation(inflight, spec, ready_replicas),
        direction=_direction(desired, ready_replicas),
        reason=reason,
        held_scale_up=late is not None,
    )
    return guard(decision, partial, spec)


def _lowered(
    levels: _Levels,
    peak: _Peak,
    floor_value: float,
    ready_replicas: int | None,
    ready_series: Sequence[Sample],
    now_s: float,
    share: float = 1.0,
) -> tuple[float, str | None, str | None]:
    """The larger of the peak and the floor's levels, then the stages that may lower it:
    the backlog drain (:func:`_drain`) and the late hold (:func:`_late`, L counted at
    ``share`` of itself as the peak was). (value, the drain's why or None, the hold's why
    or None)."""
    spec = levels.spec
    value = round(max(peak.value, floor_value, 0.0), _DECIMALS)
    value, drained = _drain(
        value, floor_value, levels.points, levels.arrivals, ready_series, ready_replicas, spec,
        now_s,
    )  # fmt: skip
    late = None
    if spec.late_scale_up_on and ready_replicas:
        value, late = _late(levels, now_s, value, floor_value, ready_replicas, ready_series, share)
    return value, drained, late


def _drain(
    value: float,
    floor_value: float,
    points: Sequence[Sample],
    arrivals: Sequence[Sample],
    ready_series: Sequence[Sample],
    ready_replicas: int | None,
    spec: PolicySpec,
    now_s: float,
) -> tuple[float, str | None]:
    """The backlog-drain stage (:func:`drain_level`, ``backlogDrainSeconds``; off at 0):
    ``value`` lowered to the drain's level (never under ``floor_value``) and why, or
    ``value`` and None where it does not lower it."""
    if spec.backlog_drain_s <= 0 or not ready_replicas:
        return value, None
    drained = drain_level(points, arrivals, ready_series, ready_replicas, spec, now_s)
    if drained is None or drained[0] >= value:
        return value, None
    return round(max(drained[0], floor_value), _DECIMALS), drained[1]


def _slo(levels: _Levels, ready_series: Sequence[Sample], now_s: float) -> SloFleet | None:
    """The SLO stage (``sloTtftSeconds``): the fleet Erlang C gives for the arrivals and
    the service time over the decision's span (the scale-down and scale-up windows), the
    TTFT's wait shortened by how much burstier than Poisson the arrivals were over the
    floor's window (:func:`arrival_dispersion`; Allen and Cunneen's (c_a² + c_s²) ÷ 2 with
    exponential service, c_s² = 1), and never more replicas than hold every request L
    counted at once over that window. None when off, or while either rate is unknown (no
    arrivals, or nothing completed in the span)."""
    spec = levels.spec
    if spec.slo_ttft_s <= 0:
        return None
    base_s = spec.scale_down_window_s + spec.scale_up_window_s
    memory_s = spec.slo_memory_s
    measured = _rates(levels, ready_series, now_s, base_s)
    if measured is None:
        return None
    span_s = counted_span(levels.arrivals, now_s, base_s, memory_s, measured, spec)
    if span_s > base_s:
        measured = _rates(levels, ready_series, now_s, span_s) or measured
    rate, served = measured
    horizon_s = spec.startup_s
    rise = planned_rise(levels.arrivals, now_s, base_s, memory_s, horizon_s, spec.counting_s)
    rate += rise
    dispersion = arrival_dispersion(levels.arrivals, now_s - memory_s, now_s, spec.counting_s)
    wait_s = spec.slo_ttft_s * 2.0 / (dispersion + 1.0)
    # No request waits where every request ever in flight at once has a slot: a closed
    # loop of N clients (the seed's sweep) needs no slot beyond N, whatever its rate.
    most = max(p.value for p in levels.points[bisect.bisect_left(levels.times, now_s - memory_s) :])
    held = max(1, _ceil_div(most, spec.slots_per_replica))
    fleet = slo_fleet(
        rate, served, spec.slots_per_replica, wait_s, spec.slo_goal, min(spec.max_replicas, held)
    )
    fleet = replace(fleet, rise=rise, horizon_s=horizon_s)
    if fleet.replicas == held < spec.max_replicas and fleet.late > 1.0 - spec.slo_goal:
        return replace(fleet, most_inflight=most, over_s=memory_s)
    return fleet


# The share of the memory's rises over a start-up that the plan covers.
RISE_QUANTILE: Final = 0.9


def planned_rise(
    arrivals_total: Sequence[Sample],
    now_s: float,
    span_s: float,
    memory_s: float,
    horizon_s: float,
    step_s: float,
) -> float:
    """How much faster (req/s) the arrivals may come a start-up from now: the 0.9 quantile
    (``RISE_QUANTILE``) of the rises the memory saw over ``horizon_s``, each the rate over
    ``span_s`` ending at τ + ``horizon_s`` less the rate over ``span_s`` ending at τ, for τ
    every ``step_s`` back from now − ``horizon_s`` while both spans are in the memory; 0
    where that quantile is no rise, or under two such pairs were read. A replica asked for
    now serves a start-up later; on a load that has risen that much within a start-up
    before, it is asked for now.

    Worked example: a rate that rose from 1 to 2 req/s over the last 600 s (1/600 req/s²)
    rose by 0.05 req/s over every 30 s: planned 0.05.

    >>> from inflight.control.samples import Sample as S
    >>> total = [S(t, t + t * t / 1200) for t in range(0, 601, 5)]
    >>> round(planned_rise(total, 600.0, 70.0, 900.0, 30.0, 10.0), 3)
    0.05
    >>> planned_rise([S(t, 2.0 * t) for t in range(0, 601, 5)], 600.0, 70.0, 900.0, 30.0, 10.0)
    0.0
    """
    if horizon_s <= 0 or step_s <= 0:
        return 0.0
    total = _StepSeries(_in_span(arrivals_total, now_s - memory_s, now_s))

    def rate(end_s: float) -> float | None:
        a, b = total.at(end_s - span_s), total.at(end_s)
        return None if a is None or b is None else (b - a) / span_s

    rises: list[float] = []
    tau = now_s - horizon_s
    while tau - span_s >= now_s - memory_s:
        before, after = rate(tau), rate(tau + horizon_s)
        if before is None or after is None:
            break
        rises.append(after - before)
        tau -= step_s
    if len(rises) < 2:
        return 0.0
    rises.sort()
    return max(0.0, rises[min(len(rises) - 1, int(RISE_QUANTILE * len(rises)))])


def _rates(
    levels: _Levels, ready_series: Sequence[Sample], now_s: float, span_s: float
) -> tuple[float, float] | None:
    """The arrival rate (req/s) and the served requests' mean service time (s) over the
    last ``span_s``; None while either is unknown (no arrivals, or nothing completed)."""
    a_now, a_then = latest(levels.arrivals, now_s), latest(levels.arrivals, now_s - span_s)
    if a_now is None or a_then is None or a_now <= a_then:
        return None
    served = service_time(
        _in_span(levels.points, now_s - span_s, now_s),
        levels.arrivals,
        ready_series,
        levels.spec.slots_per_replica,
        now_s,
    )
    return None if served is None else ((a_now - a_then) / span_s, served)


def counted_span(
    arrivals_total: Sequence[Sample],
    now_s: float,
    base_s: float,
    memory_s: float,
    measured: tuple[float, float],
    spec: PolicySpec,
) -> float:
    """The span the SLO stage counts its arrivals over: ``base_s``, or longer (at most
    ``memory_s``) until it holds enough arrivals to tell one fleet from the next. A rate
    counted from N arrivals is off by about 1 ÷ √N of itself (Poisson), and one replica is
    1 ÷ r of an offered load of r replicas' worth (rate × service ÷ slots), so the span
    holds at least 4r² arrivals: the rate's error at most half a replica. The newest
    reading of the running total at or before each instant counts.

    Worked example: 0.5 req/s of 40 s requests on 4-slot replicas (5 replicas' worth)
    needs 100 arrivals; 70 s holds 35, the last 200 s hold 100: 200 s.

    >>> from inflight.control.samples import Sample as S
    >>> total = [S(t, 0.5 * t) for t in range(0, 1001, 5)]
    >>> counted_span(total, 1000.0, 70.0, 900.0, (0.5, 40.0), PolicySpec())
    200.0
    >>> counted_span(total, 1000.0, 70.0, 900.0, (0.5, 8.0), PolicySpec())  # 1 replica
    70.0
    """
    rate, served = measured
    need = 4.0 * (rate * served / spec.slots_per_replica) ** 2
    a_now = latest(arrivals_total, now_s)
    if a_now is None:
        return base_s
    recent = _in_span(arrivals_total, now_s - memory_s, now_s)
    for p in reversed(recent):  # newest first: the first with enough
        if a_now - p.value >= need:
            return max(base_s, now_s - p.t_s)
    return base_s if len(recent) < 2 else max(base_s, now_s - recent[0].t_s)


def arrival_dispersion(
    arrivals_total: Sequence[Sample], since_s: float, now_s: float, counting_s: float
) -> float:
    """How much burstier than Poisson the arrivals were from ``since_s`` to ``now_s``: the
    index of dispersion of the counts over consecutive spans of ``counting_s`` ending at
    ``now_s`` (the running total read at each span's ends: its last sample at or before),
    Σ (n − λΔ)² ÷ λΔ over the spans, ÷ their number less one (1 for Poisson arrivals, 0
    for arrivals evenly spaced, more for bursts). The spans are never shorter than the
    samples' own spacing allows: a counter scraped every 5 s and read back every second
    moves in 5 s steps, and counts over each second would be the scrapes' rhythm
    (``PolicySpec.counting_s``). 1 when under two spans with a reading at both ends, or no
    arrivals (nothing known: Poisson).

    >>> from inflight.control.samples import Sample as S
    >>> arrival_dispersion([S(0, 0), S(10, 10), S(20, 20), S(30, 30)], 0, 30, 10)
    0.0
    >>> arrival_dispersion([S(0, 0), S(10, 30), S(20, 30), S(30, 60)], 0, 30, 10)
    15.0
    >>> steps = [S(t, 5 * (t // 5)) for t in range(31)]  # 1 a second, scraped every 5 s
    >>> round(arrival_dispersion(steps, 0, 30, 1), 2), arrival_dispersion(steps, 0, 30, 5)
    (4.14, 0.0)
    """
    if counting_s <= 0:
        raise ValueError(f"counting_s must be > 0, got {counting_s!r}")
    total = _StepSeries(_in_span(arrivals_total, since_s, now_s))
    spans = int((now_s - since_s) / counting_s + 1e-9)
    # The running total at each span's end: its last sample at or before.
    read = [total.at(now_s - k * counting_s) for k in range(spans, -1, -1)]
    pairs = [
        (counting_s, max(0.0, b - a)) for a, b in pairwise(read) if a is not None and b is not None
    ]
    total_t, total_n = sum(dt for dt, _ in pairs), sum(n for _, n in pairs)
    if len(pairs) < 2 or total_n <= 0:
        return 1.0
    rate = total_n / total_t
    chi2 = sum((n - rate * dt) ** 2 / (rate * dt) for dt, n in pairs)
    return chi2 / (len(pairs) - 1)


def _rebound(levels: _Levels, spec: PolicySpec, now_s: float, held: float, cap: float) -> float:
    """The rebound stage (:func:`rebound_level`, ``reboundWindowSeconds``; 0 when off) over
    L capped at ``cap``, above the ``held`` level the peak and the floor give."""
    if spec.rebound_window_s <= 0:
        return 0.0
    # The gap, the stretch after it and the hold since: a few rebound windows back.
    rebound_memory_s = REBOUND_MEMORY_WINDOWS * spec.rebound_window_s
    series = [
        Sample(s.t_s, min(s.value, cap)) for s in levels.series(now_s - rebound_memory_s, now_s)
    ]
    return rebound_level(series, now_s, held, spec.scale_down_window_s, spec.rebound_window_s)


class _Levels:
    """The window of L :func:`decide` reads (its memory, in time order) and the means over
    it (prefix sums); with the growth on, L padded by :func:`growth_headroom`."""

    def __init__(
        self,
        points: list[Sample],
        samples: Sequence[Sample],
        arrivals: Sequence[Sample],
        spec: PolicySpec,
    ) -> None:
        self.points, self.samples, self.arrivals, self.spec = points, samples, arrivals, spec
        self.times = [p.t_s for p in points]
        self.prefix = [0.0, *accumulate(p.value for p in points)]
        self.grows = bool(arrivals) and spec.growth_horizon_s > 0

    def smoothed(self, tau_s: float, over_s: float | None = None) -> float | None:
        """Mean of L over (tau − over, tau] (the scale-up window unless said); the latest
        sample at or before tau if none."""
        over = self.spec.scale_up_window_s if over_s is None else over_s
        times = self.times
        hi = bisect.bisect_right(times, tau_s)
        lo = bisect.bisect_right(times, tau_s - over) if over > 0 else hi
        if hi > lo:
            return (self.prefix[hi] - self.prefix[lo]) / (hi - lo)
        return self.points[hi - 1].value if hi > 0 else None

    def series(self, since_s: float, now_s: float) -> list[Sample]:
        """L (the scale-up window's mean) at every sample time from ``since_s`` on, and at
        now: the levels the floor's flashes, the rebound and the late hold read."""
        taus = [*(t for t in self.times if t >= since_s), now_s]
        return [Sample(t, v) for t in taus if (v := self.smoothed(t)) is not None]

    def spread(self, since_s: float) -> float:
        """How far L's samples from ``since_s`` on rose above their mean while there was
        load: the root mean square of ``max(0, L − mean)``, × √2 so that L spread evenly
        about its mean reads its standard deviation; 0 with fewer than two samples.

        Upward only: a queue forms when L rises above what the fleet holds, and a closed
        loop's L never rises above its concurrency (its dips, a request finished before the
        next is sent, or clients starting one by one, are below). Idle samples (L = 0) are
        left out: they say nothing of how the load varies, and a load that starts from idle
        is a step, not a spread. A spread under one request is none: L counts requests, and
        a loop whose clients send again at once dips by one between an answer and the next
        request, which is the sampling's phase, not arrivals at random."""
        start = bisect.bisect_left(self.times, since_s)
        values = [p.value for p in self.points[start:] if p.value > 0]
        if len(values) < 2:
            return 0.0
        mean = statistics.fmean(values)
        above = sum((v - mean) ** 2 for v in values if v > mean)
        spread = math.sqrt(2.0 * above / len(values))
        return spread if spread >= 1.0 else 0.0

    def padded(self, tau_s: float) -> float | None:
        """L at tau, plus the growth headroom at tau when that is on: the headroom is
        held over the scale-down window like L itself, so a noisy growth estimate cannot
        cancel a replica it asked for a moment ago while that replica starts."""
        v = self.smoothed(tau_s)
        if v is None or not self.grows:
            return v
        return v + growth_headroom(self.samples, self.arrivals, self.spec, tau_s)


@dataclass(frozen=True)
class _Peak:
    """The peak stage: L's maximum over the scale-down window (``plain``), padded by the
    arrivals' growth (``value``), and L now (the scale-up window's mean)."""

    value: float
    plain: float
    current: float
    headroom: float = 0.0  # in value: queue_headroom's
    spread: float = 0.0  # what it was capped by: how far L rose above its mean


def queue_headroom(level: float, beta: float, spread: float = math.inf) -> float:
    """Square-root staffing's headroom over an offered load of ``level`` slots:
    ``beta x sqrt(level)`` (0 at or below 0), at most ``beta x spread``. Halfin and Whitt
    (1981): with ``level + beta sqrt(level)`` servers the chance a request waits tends to
    ``1 / (1 + beta Phi(beta) / phi(beta))``: 0.5 at beta 0.5, 0.22 at 1, 0.03 at 2.
    ``sqrt(level)`` is how much L varies when requests arrive at random (Poisson: its
    variance is its mean); ``spread`` is how much it was seen to rise above its mean over
    the scale-down window (``_Levels.spread``), so L that never rises, as a closed loop's
    does not, is given no room it never uses.

    >>> queue_headroom(16, 1.0), queue_headroom(0, 1.0), queue_headroom(25, 0.0)
    (4.0, 0.0, 0.0)
    >>> queue_headroom(16, 1.0, spread=0.5), queue_headroom(16, 2.0, spread=9.0)
    (0.5, 8.0)
    """
    if level <= 0 or beta <= 0:
        return 0.0
    return beta * min(math.sqrt(level), max(0.0, spread))


def _undrained(
    levels: _Levels, ready_series: Sequence[Sample], now_s: float
) -> tuple[float, float | None]:
    """The share of L the stages that read it count (:func:`undrained_share`), from the
    service time over the SLO stage's whole memory (the floor's window: a mean over many
    requests, as the drain of a queue is, not the last span's, which a few long requests
    swing), and that service time; (1, None) with the SLO stage off or nothing served."""
    spec = levels.spec
    if spec.slo_ttft_s <= 0:
        return 1.0, None
    served = service_time(
        _in_span(levels.points, now_s - spec.slo_memory_s, now_s),
        levels.arrivals,
        ready_series,
        spec.slots_per_replica,
        now_s,
    )
    if served is None or served <= 0:
        return 1.0, None
    return undrained_share(served, spec.slo_ttft_s), served


def _drain_note(share: float, served_s: float | None, spec: PolicySpec) -> str:
    """What the reason adds where L was counted at ``share`` of itself (nothing at 1)."""
    if share >= 1.0 or served_s is None:
        return ""
    return (
        f"; L counted at {share:.3g} of itself, S {served_s:.3g} s over the last "
        f"{spec.slo_memory_s:g} s "
        f"÷ (S + the TTFT {spec.slo_ttft_s:g} s): a queue the fleet drains within the TTFT "
        "needs no replica"
    )


def _counted_peak(peak: _Peak, share: float) -> _Peak:
    """The peak with L counted at ``share`` of itself (:func:`undrained_share`: the
    requests a queue drained within the TTFT leaves needing a slot); itself at 1."""
    if share >= 1.0:
        return peak
    return replace(
        peak,
        value=peak.value * share,
        plain=peak.plain * share,
        current=peak.current * share,
        headroom=peak.headroom * share,
    )


def _peak(levels: _Levels, now_s: float) -> _Peak:
    # Evaluated at every sample time in the scale-down window, and at now itself.
    down_s = levels.spec.scale_down_window_s
    taus = [t for t in levels.times if t >= now_s - down_s] + [now_s]
    current = levels.smoothed(now_s)
    assert current is not None  # points is non-empty and every point is ≤ now_s
    plain = max(v for v in (levels.smoothed(t) for t in taus) if v is not None)
    value = max(v for v in (levels.padded(t) for t in taus) if v is not None)
    beta = levels.spec.queue_headroom
    spread = levels.spread(now_s - down_s) if beta > 0 else 0.0
    headroom = queue_headroom(value, beta, spread)
    return _Peak(value + headroom, plain, current, headroom, spread)


@dataclass(frozen=True)
class _Floor:
    """The floor stage: its level, how it was read (for the reason) and the recurring
    burst it anticipates, if any."""

    value: float
    how: str
    anticipated: Recurrence | None


_NO_FLOOR = _Floor(0.0, "", None)


def _floor(
    levels: _Levels,
    now_s: float,
    cap: float,
    ready_replicas: int | None,
    ready_series: Sequence[Sample],
) -> _Floor:
    """The floor from recent peaks: the remembered levels (:func:`_remembered`), their
    statistic (:func:`_floor_peak`) × ``floorFraction``, then the recurring burst due, the
    fleet L filled in flashes, and the tolerance around the ready fleet."""
    spec = levels.spec
    window_s = spec.floor_window_s
    kept, recalled, service_s = _remembered(levels, now_s, cap, ready_series)
    floor_peak, how = _floor_peak(kept, spec, now_s)
    floor = spec.floor_fraction * floor_peak
    anticipated = None
    if spec.anticipate_s > 0:
        found = recurrence(recalled)
        due = found is not None and anticipating(found, now_s, spec.anticipate_s)
        if found is not None and due and found.level > floor:
            floor, anticipated = found.level, found
    if spec.floor_filled_flashes > 0 and spec.startup_s > 0:
        filled = filled_fleet(levels.series(now_s - window_s, now_s), ready_series, spec)
        if filled * spec.target > floor:
            floor = filled * spec.target
            how += f", the {filled} replicas L filled in {spec.floor_filled_flashes} flashes"
    if spec.floor_tolerance > 0 and ready_replicas:
        held = floor_hold(floor, spec.floor_tolerance, ready_replicas * spec.target)
        if held > floor:
            how += f", kept within {spec.floor_tolerance:g} of {ready_replicas} ready"
        floor = held
    if spec.floor_decay == "linear":
        how += ", decayed by age"
    if service_s is not None:
        how += f", capped at arrivals x {service_s:.3g} s of service"
    return _Floor(floor, how, anticipated)


def _remembered(
    levels: _Levels, now_s: float, cap: float, ready_series: Sequence[Sample]
) -> tuple[list[Sample], list[Sample], float | None]:
    """The floor's levels: (kept, over its window, decayed when that is on; recalled, over
    the recurrence's longer memory, undecayed; the service time that caps them at the
    arrivals' demand with ``floorPeak: demand``, else None)."""
    spec = levels.spec
    window_s = spec.floor_window_s
    times = levels.times
    # The bursts' recurrence reads a longer memory than the floor's (four bursts).
    recall_s = spec.recurrence_memory_s
    remembered = [t for t in times if t >= now_s - max(window_s, recall_s)] + [now_s]
    service_s = None
    if spec.floor_peak == "demand":
        service_s = service_time(
            [p for p in levels.points if p.t_s >= now_s - window_s],
            levels.arrivals,
            ready_series,
            spec.slots_per_replica,
            now_s,
        )
    rate = _StepSeries(levels.arrivals) if service_s is not None else None
    rate_s = spec.counting_s
    kept: list[Sample] = []
    recalled: list[Sample] = []
    for tau_s in remembered:
        v = levels.smoothed(tau_s, spec.floor_smoothing_window_s)
        if v is None:
            continue
        v = min(v, cap)
        if rate is not None and service_s is not None and rate_s > 0:
            a_now, a_then = rate.at(tau_s), rate.at(tau_s - rate_s)
            if a_now is not None and a_then is not None:
                v = min(v, max(0.0, a_now - a_then) / rate_s * service_s)
        recalled.append(Sample(tau_s, v))
        if tau_s < now_s - window_s:
            continue
        if spec.floor_decay == "linear":
            v *= max(0.0, 1.0 - (now_s - tau_s) / window_s)
        kept.append(Sample(tau_s, v))
    return kept, recalled, service_s


def _floor_peak(kept: Sequence[Sample], spec: PolicySpec, now_s: float) -> tuple[float, str]:
    """The peak the floor is a fraction of (``floorStatistic``), and how it was read."""
    how = ""
    if spec.floor_statistic == "quantile":
        peak = floor_quantile(kept, spec.floor_quantile, spec.floor_window_s)
        return peak, f", the level exceeded {spec.floor_quantile:g} of the time"
    if spec.floor_statistic != "recurrent":
        return max((p.value for p in kept), default=0.0), how
    peak = floor_recurrent(kept, spec.floor_recurrences)
    how += f", the level of {spec.floor_recurrences} separate peaks"
    short_f = spec.floor_short_fraction
    if short_f > spec.floor_fraction and spec.startup_s > 0 and peak > 0:
        # Only a level above fraction / short fraction x the recurrent one can raise the
        # floor, and none is above it (short peaks are peaks).
        short = short_recurrent(
            kept,
            spec.floor_recurrences,
            spec.startup_s,
            spec.floor_fraction / short_f * peak,
            peak,
        )
        if short > 0:
            peak = max(peak, short_f / spec.floor_fraction * short)
            how += f" ({short_f:g} x {short:g}, reached in peaks shorter than {spec.startup_s:g} s)"
    single_s = spec.floor_single_window_s
    if single_s > 0:
        recent = (p.value for p in kept if p.t_s >= now_s - single_s)
        # The single peak at its own fraction (floorSingleFraction; 0: the floor's), in
        # units of the floor's fraction, which multiplies the peak in :func:`_floor`.
        single = spec.floor_single_fraction or spec.floor_fraction
        peak = max(peak, single / spec.floor_fraction * max(recent, default=0.0))
        at = f" at {single:g} x" if single != spec.floor_fraction else ""
        how += f" or{at} of one in the last {single_s:g} s"
    return peak, how


def _late(
    levels: _Levels,
    now_s: float,
    value: float,
    floor: float,
    ready_replicas: int,
    ready_series: Sequence[Sample],
    share: float = 1.0,
) -> tuple[float, str | None]:
    """No scale-up that cannot arrive in time (:func:`late_scale_up`): the held
    excursion's L leaves the maximum; what stood before it began (the maximum then, L
    counted at ``share`` of itself), the floor and the ready count stay. (value, the
    hold's reason or None)."""
    spec = levels.spec
    times = levels.times
    hold = late_scale_up(levels.series(-math.inf, now_s), ready_series, ready_replicas, spec, now_s)
    if hold is None:
        return value, None
    since_s = min(now_s, hold.excursion.start_s) - spec.scale_down_window_s
    others = [
        levels.padded(t) for t in [*times, now_s] if t >= since_s and not hold.excursion.covers(t)
    ]
    counted = (v * share for v in others if v is not None)
    held = max([floor, ready_replicas * spec.target, *counted])
    if value > round(held, _DECIMALS):
        return round(held, _DECIMALS), hold.reason
    return value, None


def _reason(
    spec: PolicySpec,
    value: float,
    desired: int,
    active: bool,
    ready_replicas: int | None,
    peak: _Peak,
    floor: _Floor,
    floor_value: float,
    rebound: float,
    late: str | None,
    drained: str | None = None,
    slo: SloFleet | None = None,
) -> str:
    """The one stage that set the value, and its numbers: the first that applies of the
    late hold, the backlog drain (``drained``: :func:`drain_level`'s why), the rebound,
    the recurring burst anticipated, the floor, inactivity, the HPA's tolerance, the
    growth, then L's maximum (or L now, or idle)."""
    up_s, down_s, target = spec.scale_up_window_s, spec.scale_down_window_s, spec.target
    current = peak.current
    count = f"{desired} x {target:g}"
    above_now = value > round(current, _DECIMALS)
    if late is not None:
        return f"{late}: holding {value:g} = {count}"
    if drained is not None:
        return f"{drained} = {count}"
    if slo is not None and above_now and slo.replicas * target >= floor_value > peak.value:
        return f"{slo.why(spec.slots_per_replica, spec.slo_goal)} = {count} (now {current:g})"
    if rebound > 0 and rebound >= floor_value and above_now:
        return (
            f"rebound: L came back to {rebound:g} within {spec.rebound_window_s:g} s of "
            f"falling below it, held {spec.rebound_window_s:g} s = {count} (now {current:g})"
        )
    if floor_value > peak.value and above_now:
        found = floor.anticipated
        if found is not None:
            return (
                f"anticipating: bursts to L {found.level:g} every {found.period_s:g} s, the "
                f"next due at {found.next_s:g} (held from {spec.anticipate_s:g} s ahead) = "
                f"{count} (now {current:g})"
            )
        return (
            f"floor: {spec.floor_fraction:g} x the peak of L over the last "
            f"{spec.floor_window_s:g} s{floor.how} is {value:g} (now {current:g}) = {count}"
        )
    if not active and value > 0:
        return f"inactive: {value:g} <= activationInflight {spec.activation_inflight:g}"
    if active and desired != _ceil_div(value, target):
        return (
            f"within the HPA's tolerance: L {value:g} on {ready_replicas} x {target:g} "
            f"holds at {desired} (ceil would be {_ceil_div(value, target)})"
        )
    if peak.headroom > 0:
        return (
            f"headroom: max of L over the last {down_s:g} s is {peak.value - peak.headroom:g}"
            f", plus {spec.queue_headroom:g} x min(its square root, its rise above its mean "
            f"{peak.spread:.3g}) = {value:g} (now {current:g}) = {count}"
        )
    if peak.value - peak.plain > 0:
        return (
            f"growing: max of L plus the arrivals' growth over {spec.growth_horizon_s:g} s "
            f"in the last {down_s:g} s is {value:g} (L alone {peak.plain:g}, now {current:g})"
            f" = {count}"
        )
    if value == 0:
        return f"idle: L was 0 over the last {down_s:g} s"
    if above_now:
        return (
            f"holding: max of L over the last {down_s:g} s is {value:g} (now {current:g}) = {count}"
        )
    return f"L {value:g} (mean over {up_s:g} s) = {count}"


def _gaps(times: Sequence[float], spec: PolicySpec, now_s: float) -> tuple[Partial, ...]:
    """A gap in L's window over ``max_sample_gap_s``: the window is not a record of L over
    its span (a Prometheus outage or restart, a history that starts inside the window, a
    stale series), so its maximum may miss the peak and it may not remove replicas
    (:func:`guard`). Scaling up, or holding, on it is safe."""
    span_s = spec.scale_down_window_s + spec.scale_up_window_s
    gap = _largest_gap([t for t in times if t >= now_s - span_s], now_s - span_s, now_s)
    if gap <= spec.max_sample_gap_s:
        return ()
    return (
        Partial(
            names.SCALER_ERROR_SOURCE_STALE,
            f"the window of L has a {gap:.1f} s gap (over the {spec.max_sample_gap_s:g} s allowed)",
        ),
    )


def filled_fleet(levels: Sequence[Sample], ready: Sequence[Sample], spec: PolicySpec) -> int:
    """The largest fleet L filled in ``floor_filled_flashes`` separate flashes, or 0.

    A flash fills a fleet: L (``levels``, smoothed) above its capacity while it was ready,
    over (L falling, not a change of the fleet) sooner than ``startup_s``, so no replica
    asked for in it could serve it. Bursts like that come and go faster than the fleet can
    follow; the fleet they keep filling is the one to keep. Worked example, target 4,
    start-up 30 s: with 3 ready, L read 13 for 8 s and 15 for 12 s in the window, 2 low
    between → 3 (with 2 such flashes asked for); a surge that held L 20 for 60 s on 3 is no
    flash.
    """
    if not levels:
        return 0
    fleet = _StepSeries(ready)
    counts = sorted({round(c) for s in levels if (c := fleet.at(s.t_s)) is not None}, reverse=True)
    for count in counts:
        flashes = [
            e
            for e in excursions(levels, ready, count, spec.target)
            if not e.ongoing and not e.fleet_changed and e.duration_s < spec.startup_s
        ]
        if len(flashes) >= spec.floor_filled_flashes:
            return count
    return 0


def floor_hold(floor: float, tolerance: float, ready_capacity: float) -> float:
    """The floor with ``tolerance`` (``floorTolerance``): ``floor ÷ (1 − tolerance)``, but
    never above the ready fleet's capacity, so it keeps a ready replica while the floor
    fits in one fewer with less than ``tolerance`` of their capacity to spare, and asks
    for no replica the plain floor does not.

    Worked example, target 4, tolerance 0.1: a floor of 7.8 on 3 ready (capacity 12) holds
    8.67, so 3 replicas stay (the plain floor: 2 of 4 slots each, 7.8 of 8); on 2 ready it
    holds 8 (2 replicas); a floor of 7 holds 7.78, 2 replicas, on either.
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"floorTolerance must be in [0, 1), got {tolerance:g}")
    return max(floor, min(floor / (1.0 - tolerance), ready_capacity))


def floor_quantile(remembered: Sequence[Sample], quantile: float, window_s: float) -> float:
    """The level the remembered L exceeded for at most ``quantile`` of ``window_s``.

    Time-weighted: each value holds until the next one's time (the last one, at now, holds
    no time). Time before the first value counts as below every level, as if quiet, so a
    history shorter than the window keeps more of its peaks, never fewer. The answer is the
    lowest remembered value (or 0) above which L spent at most ``quantile × window_s``;
    ``quantile`` 0 is the highest value (the plain floor's peak).

    Worked example, window 600 s, values every 10 s: L 20 for 120 s in two bursts of 60 s,
    L 2 otherwise. At ``quantile`` 0.1 (60 s allowed) the level is 20: L spent 120 s above
    2, 0 s above 20. A single burst of 60 s: 60 s above 2, so the level is 2.
    """
    ordered = sorted(remembered, key=lambda s: s.t_s)
    if not ordered:
        return 0.0
    held = [(a.value, b.t_s - a.t_s) for a, b in pairwise(ordered)] + [(ordered[-1].value, 0.0)]
    held.sort(key=lambda vh: vh[0], reverse=True)
    levels = sorted({v for v, _ in held} | {0.0}, reverse=True)
    allowed = quantile * window_s
    answer, above, i = held[0][0], 0.0, 0
    for level in levels:  # from the highest down: the time above only grows
        while i < len(held) and held[i][0] > level:
            above += held[i][1]
            i += 1
        if above > allowed:
            break
        answer = level
    return max(0.0, answer)


@dataclass(frozen=True)
class Excursion:
    """A stretch when L (smoothed) was above the capacity of the fleet ready now, that fleet
    being ready: from its first sample above to its first sample at or below again, or to
    now when it is still ``ongoing``. ``fleet_changed``: it ended because the ready count
    changed while L was still above (a replica came, or went), not because L fell."""

    start_s: float
    end_s: float
    peak: float  # the highest smoothed L in it
    ongoing: bool = False
    fleet_changed: bool = False

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def covers(self, t_s: float) -> bool:
        """Whether L at ``t_s`` is in it (its closing sample, at or below, is not)."""
        return self.start_s <= t_s and (t_s < self.end_s or self.ongoing)


@dataclass(frozen=True)
class LateHold:
    """A scale-up held by :func:`late_scale_up`: the excursion whose L leaves the value's
    maximum, and why."""

    excursion: Excursion
    reason: str


def excursions(
    levels: Sequence[Sample],
    ready: Sequence[Sample],
    ready_now: int,
    target: float,
    fleets: ExcursionFleets = "same",
) -> list[Excursion]:
    """L's excursions above ``ready_now × target`` while ``ready_now`` replicas were ready,
    oldest first.

    ``levels``: L smoothed, ``ready``: the ready count over time (a time with none known
    counts as ``ready_now``). A sample with another ready count is in no excursion: one
    under way there ends ``fleet_changed``. One under way at the first sample counts from
    it (it is leaving the memory); one under way at the last sample is ``ongoing``.
    Worked example, target 4, 3 ready now, L every 10 s: 2, 20, 20, 2, 16, 16 with 3 ready
    throughout → an excursion from 10 to 30 s (20 s, peak 20) and one from 40 s, ongoing at
    50 s (10 s so far, peak 16); had a 4th replica been ready at 20 s, the first would end there,
    ``fleet_changed``.

    ``fleets`` (``excursionFleets``): "same", only samples while ``ready_now`` replicas
    were ready; "larger", L above ``ready_now × target`` while a larger fleet was ready
    counts too (its L is not swollen by a smaller fleet's queue: the demand itself exceeded
    ``ready_now``'s capacity that long); "any", every fleet's (a smaller fleet's excursions
    last longer than the demand's, which only holds fewer scale-ups, and rise higher). A
    change of the ready count while L is above still ends an excursion ``fleet_changed``.
    """
    fleet = _StepSeries(ready)
    capacity = round(ready_now * target, _DECIMALS)
    found: list[Excursion] = []
    start: float | None = None
    peak = last_t = 0.0
    held_count: int | None = None  # the ready count the excursion under way began on
    for sample in sorted(levels, key=lambda s: s.t_s):
        last_t = sample.t_s
        count = fleet.at(sample.t_s)
        now_count = ready_now if count is None else round(count)
        same = (
            now_count == ready_now
            or (fleets == "larger" and now_count > ready_now)
            or fleets == "any"
        )
        if start is not None and now_count != held_count:
            same = False  # the fleet changed while L was above
        if same and round(sample.value, _DECIMALS) > capacity:
            if start is None:
                start, peak, held_count = sample.t_s, sample.value, now_count
            peak = max(peak, sample.value)
        elif start is not None:
            found.append(Excursion(start, sample.t_s, peak, fleet_changed=not same))
            start = None
    if start is not None:
        found.append(Excursion(start, last_t, peak, ongoing=True))
    return found


def late_scale_up(
    levels: Sequence[Sample],
    ready: Sequence[Sample],
    ready_now: int,
    spec: PolicySpec,
    now_s: float,
) -> LateHold | None:
    """The excursion whose scale-up would serve only after it is over, or None when
    nothing says so (``startupSeconds``; by default a lower bound on a start-up, 30 s).

    A replica asked for now serves only after its start-up. ``levels`` (L smoothed over the
    scale-up window) and ``ready`` over the last ``excursion_window_s`` give L's
    :func:`excursions` above the capacity of the ``ready_now`` replicas, seen while they
    were ready. The latest decides now when it is under way or ended within the scale-down
    window (its L is still in the value's maximum); the earlier ones are the evidence. Its
    scale-up is held when there is evidence, every earlier excursion ended, L falling,
    sooner than ``startup_s`` (a replica asked for in one would have come after it), and
    the latest is still like them: it has lasted no longer than ``excursion_margin`` x the
    longest (and less than ``startup_s``) and risen no higher than ``excursion_margin`` x
    the highest. One that lasts longer or rises higher (a ramp, a surge, a burst bigger
    than those seen) scales. An excursion of ``startup_s`` or more in the window, or one
    a change of the fleet ended (a replica that came while L was above: a scale-up in
    time), turns the hold off until it leaves the window; with ``excursion_fleet_change``
    "own", one a change ended sooner than ``startup_s`` after it began is no evidence
    instead (its replica was asked for before it). Excursions seen on another fleet are no
    evidence (a smaller fleet's L is swollen by its queue) unless ``excursion_fleets`` says.

    Worked example, target 4, 3 ready (capacity 12), start-up 100 s, window 900 s, margin
    1: bursts took L above 12 for 80 s (to 40) and 60 s (to 30) in the last 900 s, 3
    ready each time; a new burst has held L above 12 for 50 s, reaching 36 → held (the
    count stays 3: a 4th replica would serve from 150 s on, after every burst seen); at
    90 s it is longer than 80 s → not held; had it reached 41, neither. Had one of the
    earlier excursions lasted 120 s, nothing would be held.
    """
    window_s = spec.excursion_window_s
    recent = [s for s in levels if now_s - window_s <= s.t_s <= now_s]
    found = excursions(recent, ready, ready_now, spec.target, spec.excursion_fleets)
    if not found:
        return None
    last = found[-1]
    if not (last.ongoing or last.end_s >= now_s - spec.scale_down_window_s):
        return None  # nothing above the capacity is in the value: nothing to hold
    earlier = found[:-1]
    if spec.excursion_fleet_change == "own":
        # A replica ready sooner than a start-up after an excursion began was asked for
        # before it (or one went): the change ended it, its own scale-up did not, and how
        # long it would have lasted is unknown: no evidence. A longer one ended by a
        # change is a start-up long: it turns the hold off below, as any that long does.
        earlier = [e for e in earlier if not e.fleet_changed or e.duration_s >= spec.startup_s]
    elif any(e.fleet_changed for e in earlier):
        return None
    if not earlier:
        return None
    longest = max(e.duration_s for e in earlier)
    highest = max(e.peak for e in earlier)
    if longest >= spec.startup_s:
        return None
    allowed_s = min(spec.startup_s, spec.excursion_margin * longest)
    if last.duration_s > allowed_s or last.peak > spec.excursion_margin * highest:
        return None
    return LateHold(
        last,
        f"late scale-up held: L's {len(earlier)} excursion(s) above {ready_now} x "
        f"{spec.target:g} in the last {window_s:g} s all ended within {longest:g} s, sooner "
        f"than a replica's {spec.startup_s:g} s start-up; this one has lasted "
        f"{last.duration_s:g} s of the {allowed_s:g} s allowed",
    )


def service_time(
    inflight: Sequence[Sample],
    arrivals_total: Sequence[Sample],
    ready: Sequence[Sample],
    slots_per_replica: int,
    now_s: float,
) -> float | None:
    """The served requests' mean service time (s) over ``inflight``'s span, or None.

    Little's Law on the requests being served rather than on L: the slot-seconds they
    held, ∫ min(L, ready × slots) dt (L alone where the ready count is unknown), divided
    by the requests completed over the span, arrivals − (L at its end − L at its start).
    A queue makes L high but not the slots in use, so this is the service time, not the
    time in the queue. None when the span holds under two samples of L or of the
    arrivals, or nothing completed. Worked example: 4 slots, 1 ready, L 10 for 100 s
    (6 queued), 40 arrivals and L the same at both ends: 400 slot-s ÷ 40 = 10 s (L ÷
    λ, Little's W, would say 25 s).
    """
    points = _in_span(inflight, -math.inf, now_s)
    if len(points) < 2:
        return None
    counts = _StepSeries(arrivals_total)
    start, end = counts.at(points[0].t_s), counts.at(points[-1].t_s)
    if start is None or end is None:
        return None
    done = (end - start) - (points[-1].value - points[0].value)
    if done <= 0:
        return None
    fleet = _StepSeries(ready)
    held = 0.0
    for p, q in pairwise(points):
        r = fleet.at(p.t_s)
        served = p.value if r is None else min(p.value, max(0.0, r) * slots_per_replica)
        held += served * (q.t_s - p.t_s)
    return held / done


class _StepSeries:
    """A series as a step function: the latest sample at or before a time, by bisection."""

    def __init__(self, samples: Sequence[Sample]) -> None:
        ordered = _in_span(samples, -math.inf, math.inf)
        self._times = [s.t_s for s in ordered]
        self._values = [s.value for s in ordered]

    def at(self, t_s: float) -> float | None:
        i = bisect.bisect_right(self._times, t_s)
        return self._values[i - 1] if i > 0 else None


def drain_level(
    points: Sequence[Sample],
    arrivals_total: Sequence[Sample],
    ready_series: Sequence[Sample],
    ready: int,
    spec: PolicySpec,
    now_s: float,
) -> tuple[float, str] | None:
    """What a backlog that grows because the arrivals outrun the fleet asks for: the
    arrivals' offered load with square-root headroom, plus the slots that drain the
    queue in ``backlog_drain_s``; None when no such backlog (then L stands).

    Over the scale-down window (from its first samples when the window is younger): the
    arrival rate λ, the served requests' mean service time S (:func:`service_time`), and
    ``a = λ × S`` busy slots (Little's Law on the arrivals). The backlog grows when L is
    above the ready fleet's slots and rose over the scale-up window; it is then asked for
    as ``a + √a + queued × S ÷ backlog_drain_s``, not as its whole size (a queue the
    fleet clears buys no replica). A closed loop, whose L steps once and then stays, is
    left to L. Worked example: 1 ready replica of 4 slots, L rose 20 → 40 over the
    scale-up window, 156 arrivals over 60 s (λ 2.6/s), S 5 s, drained in 60 s:
    ``a = 13``, ``13 + 3.6 + 36 × 5 ÷ 60 = 19.6`` (L would ask 40).
    """
    span = _in_span(points, now_s - spec.scale_down_window_s, now_s)
    counts = _in_span(arrivals_total, now_s - spec.scale_down_window_s, now_s)
    if len(span) < 2 or len(counts) < 2:
        return None
    slots = spec.slots_per_replica
    current = span[-1].value
    queued = current - ready * slots
    before = latest(span, now_s - spec.scale_up_window_s)
    if queued <= 0 or before is None or current <= before:
        return None
    elapsed_s = counts[-1].t_s - counts[0].t_s
    arrived = counts[-1].value - counts[0].value
    if elapsed_s < spec.scale_up_window_s or arrived <= 0:
        return None
    service_s = service_time(span, arrivals_total, ready_series, slots, now_s)
    if service_s is None:
        return None
    offered = arrived / elapsed_s * service_s
    need = offered + math.sqrt(offered) + queued * service_s / spec.backlog_drain_s
    why = (
        f"backlog drain: {queued:g} queued and growing; arrivals {arrived / elapsed_s:.3g}/s "
        f"x service {service_s:.3g} s = {offered:.3g} busy slots, + sqrt + the queue in "
        f"{spec.backlog_drain_s:g} s = {need:.3g}"
    )
    return round(need, _DECIMALS), why


def decide_qps(
    arrivals_total: Sequence[Sample],
    inflight: Sequence[Sample],
    ready_replicas: int,
    spec: PolicySpec,
    now_s: float,
) -> Decision:
    """The seed's arrival-rate rule (the benchmark's comparison baseline, not the product).

    qps (seed units) = arrivals in the last ``10 × time_scale`` wall seconds ÷ 10 s.
    Arrivals are the running total's increase between its latest sample at or before
    ``now − window`` and its latest at or before ``now`` (the source corrects counter
    resets before summing, so a restarted router's requests still count). Returns
    ``value = desired × target``. Active when L or the window's arrivals exceed
    ``activation_inflight``; an active answer never asks for fewer than 1 replica.
    """
    window_s = spec.qps_window_s
    end = latest(arrivals_total, now_s)
    start = latest(arrivals_total, now_s - window_s)
    if end is None or start is None:
        raise NoSamples(
            f"the qps policy needs the arrivals counter at now and {window_s:g} s before; "
            "the window does not reach back that far yet"
        )
    arrivals = max(0.0, end - start)
    qps = arrivals / QPS_WINDOW_S  # seed units: requests per seed second
    current_l = latest(inflight, now_s)
    l_now = 0.0 if current_l is None else current_l
    if qps > QPS_UP_THRESHOLD:
        desired, rule = ready_replicas + 1, f"qps {qps:.3g} > {QPS_UP_THRESHOLD:g}: up"
    elif qps < QPS_DOWN_THRESHOLD:
        desired = max(0, ready_replicas - 1)
        rule = f"qps {qps:.3g} < {QPS_DOWN_THRESHOLD:g}: down"
    else:
        desired, rule = ready_replicas, f"qps {qps:.3g} in the dead band: hold"
    active = l_now > spec.activation_inflight or arrivals > spec.activation_inflight
    desired = max(desired, 1) if active else 0
    target = spec.target
    return Decision(
        policy="qps",
        value=round(desired * target, _DECIMALS),
        target=target,
        desired_replicas=desired,
        active=active,
        inflight=l_now,
        ready_replicas=ready_replicas,
        saturation=_saturation(l_now, spec, ready_replicas),
        direction=_direction(desired, ready_replicas),
        reason=f"baseline {rule} from {ready_replicas} -> {desired} replicas",
    )


def hpa_replicas(value: float, spec: PolicySpec, ready: int | None) -> int:
    """The replica count the HPA derives from ``value``, with its tolerance.

    The HPA compares against its current count (pods); the scaler knows the ready count,
    which is the same once pods have started. Without it, ``ceil(value ÷ target)``.
    Worked example, target 4: value 44 on 10 ready → ratio 1.1, the HPA holds 10 (not
    ceil = 11); value 45 → 12.
    """
    if ready is None or spec.target < 0.001:
        # A target under one milli-unit is 0 on KEDA's wire: no HPA arithmetic to mimic.
        return _ceil_div(value, spec.target)
    return replicas_for_average_value(
        value,
        spec.target,
        ready,
        spec.hpa_scale_up_tolerance,
        scale_down_tolerance=spec.hpa_scale_down_tolerance,
    )


def latest(samples: Sequence[Sample], at_s: float) -> float | None:
    """The value of the last sample at or before ``at_s`` (None if there is none)."""
    best: Sample | None = None
    for sample in samples:
        if sample.t_s <= at_s and (best is None or sample.t_s >= best.t_s):
            best = sample
    return None if best is None else best.value


def _largest_gap(times: Sequence[float], start_s: float, end_s: float) -> float:
    """The longest stretch of [start, end] with no sample (``times`` sorted, within it).

    >>> _largest_gap([1.0, 2.0, 6.0], 0.0, 7.0)
    4.0
    >>> _largest_gap([5.0], 0.0, 6.0)  # a history that starts inside the window
    5.0
    """
    edges = [start_s, *times, end_s]
    return max(b - a for a, b in pairwise(edges))


def _in_span(samples: Sequence[Sample], start_s: float, end_s: float) -> list[Sample]:
    """Finite samples with start ≤ t ≤ end, sorted by time."""
    return sorted(
        (s for s in samples if start_s <= s.t_s <= end_s and math.isfinite(s.value)),
        key=lambda s: s.t_s,
    )


def _ceil_div(value: float, target: float) -> int:
    """``ceil(value / target)`` after rounding off float noise; 0 when value is 0."""
    if value <= 0:
        return 0
    return math.ceil(round(value / target, _DECIMALS))


def _direction(desired: int, ready: int | None) -> Literal["up", "down", "hold", "unknown"]:
    if ready is None:
        return "unknown"
    if desired > ready:
        return "up"
    if desired < ready:
        return "down"
    return "hold"


def _saturation(inflight: float, spec: PolicySpec, ready: int | None) -> float | None:
    """Latest L ÷ capacity (slots × ready replicas); None when capacity is unknown or 0."""
    if ready is None or ready <= 0:
        return None
    return round(inflight / (spec.slots_per_replica * ready), _DECIMALS)
