"""The settings the unit tests of the policy's stages were written for, named: no
``queueHeadroom`` and a 60 s ``scaleDownWindowSeconds`` (the defaults; 2026-12-06 tried
headroom 1 and 180 s as the default and did not adopt them, docs/decisions.md). Each test's
figures were worked out for those settings, and they test a stage (the floor, the late
scale-up, the growth, the sources' windows), not the default, so a change of the default
leaves them be. The headroom stage has its own tests (``test_queue_headroom.py``); the
defaults themselves are held by ``test_names.py``."""

from __future__ import annotations

from inflight import names
from inflight.control.policy import PolicySpec

#: Trigger metadata: the defaults, with the headroom off and the 60 s scale-down window.
PRE_HEADROOM_METADATA: dict[str, str] = {
    **names.METADATA_DEFAULTS,
    names.META_QUEUE_HEADROOM: "0",
    names.META_SCALE_DOWN_WINDOW_S: "60",
}
#: The same as PolicySpec keywords.
PRE_HEADROOM_SPEC = {"queue_headroom": 0.0, "scale_down_window_s": 60.0}
#: Just the two keys, to put in front of a test's own metadata.
PRE_HEADROOM = {names.META_QUEUE_HEADROOM: "0", names.META_SCALE_DOWN_WINDOW_S: "60"}

#: The same with the SLO stage off (``sloTtftSeconds`` 0), for a test of another stage whose
#: figures count L in full: on, the stage counts a peak of L at S ÷ (S + the TTFT) of itself
#: and may set the count from the arrivals.
STAGE_ALONE_SPEC = PolicySpec(**PRE_HEADROOM_SPEC, slo_ttft_s=0.0)  # type: ignore[arg-type]
#: The same as trigger metadata keys.
STAGE_ALONE = {**PRE_HEADROOM, names.META_SLO_TTFT_S: "0"}
