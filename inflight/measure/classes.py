"""SLO attainment by priority class: one run's outcomes split by the class each request
was held in (``--priority-class``, :mod:`inflight.control.hold_order`), each part judged
by :func:`inflight.measure.slo.slo_measures` as a whole run is.

Shared by ``inflight sim`` (each simulated request's class) and ``inflight bench``
(each sent request's priority): the same figures a class, so a class's attainment here is
the fraction of its requests that met the SLO, refusals (429, 503) counted as misses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inflight.measure.slo import Outcome, SloSpec, slo_measures


def class_measures(
    outcomes: Sequence[Outcome], classes: Sequence[str], names: Sequence[str], spec: SloSpec
) -> dict[str, dict[str, Any]]:
    """``{class: slo_measures(its outcomes)}`` in ``names``' order (every class, even one
    with no request); ``classes[i]`` is ``outcomes[i]``'s class.

    >>> from inflight.measure.slo import DEFAULT_SLO
    >>> ok = Outcome(0.0, 0.5, 0.6, 10, True)
    >>> late = Outcome(0.0, 9.0, 10.0, 10, True)
    >>> by = class_measures([ok, late], ["high", "low"], ["high", "low"], DEFAULT_SLO)
    >>> by["high"]["slo_attainment"], by["low"]["slo_attainment"]
    (1.0, 0.0)
    """
    if len(outcomes) != len(classes):
        raise ValueError(f"{len(outcomes)} outcomes but {len(classes)} classes")
    unknown = set(classes) - set(names)
    if unknown:
        raise ValueError(f"classes not in {list(names)}: {sorted(unknown)}")
    return {
        name: slo_measures([o for o, c in zip(outcomes, classes, strict=True) if c == name], spec)
        for name in names
    }
