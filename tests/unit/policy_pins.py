"""The policy's settings before 2026-12-06's default (no ``queueHeadroom``, a 60 s
``scaleDownWindowSeconds``), for the unit tests of the stages beneath it: each test's
figures were worked out for those settings, and they test a stage (the floor, the late
scale-up, the growth, the sources' windows), not the default. The headroom stage has its
own tests (``test_queue_headroom.py``); the defaults themselves are held by
``test_names.py``."""

from __future__ import annotations

from inflight import names

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
