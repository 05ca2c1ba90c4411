"""SLO attainment by priority class: one run's outcomes split by the class each request
was held in (``--priority-class``, :mod:`inflight.control.hold_order`), each part judged
by :func:`inflight.measure.slo.slo_measures` as a whole run is.

Shared by ``inflight sim`` (each simulated request's class) and ``inflight bench``
(each sent request's priority): the same figures a class, so a class's attainment here is
the fraction of its requests that met the SLO, refusals (429, 503) counted as misses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inflight.measure.slo import Outcome, SloSpec, slo_measures

#: Miss causes that are the router's refusals: a sheddable class's 429, the bound's 503.
REFUSALS = ("http_429", "http_503")


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


def class_table(runs: Mapping[str, Mapping[str, Any]]) -> str:
    """A Markdown table of each run's ``by_class`` (policy × class: requests, attainment,
    TTFT p50 and p99 in seconds, refusals); "" when no run has classes.

    >>> from inflight.measure.slo import DEFAULT_SLO
    >>> by = class_measures([Outcome(0.0, 0.5, 0.6, 10, True)], ["high"], ["high"], DEFAULT_SLO)
    >>> print(class_table({"fixed:1": {"by_class": by}}).splitlines()[-1])
    | fixed:1 | high | 1 | 100.0 % | 0.50 | 0.50 | 0 |
    """
    rows = [
        "| policy | class | requests | SLO attainment | TTFT p50 s | TTFT p99 s | refused |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for policy, run in runs.items():
        for name, m in (run.get("by_class") or {}).items():
            ttft = m.get("ttft_s") or {}
            refused = sum(n for cause, n in m["misses"].items() if cause in REFUSALS)
            rows.append(
                f"| {policy} | {name} | {m['requests_sent']} | {_pct(m['slo_attainment'])} | "
                f"{_s(ttft.get('p50'))} | {_s(ttft.get('p99'))} | {refused} |"
            )
    return "\n".join(rows) + "\n" if len(rows) > 2 else ""


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _s(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"
