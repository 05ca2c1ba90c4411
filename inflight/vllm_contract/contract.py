"""The committed contract file: what a vLLM release registers, with where it was read from.

One file, ``inflight/emulator/vllm_metrics.json``; refreshing for a new release rewrites it (the
previous release stays in git history). ``build`` turns a :class:`~.static.Reading` into
the file's JSON; ``load`` and ``by_series`` are what the tests read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inflight.vllm_contract.static import Metric, Reading, Unresolved

CONTRACT_PATH = Path(__file__).resolve().parents[1] / "emulator" / "vllm_metrics.json"
FORMAT = 1

LIMITS = (
    "Read statically with ast from every vllm/**/*.py in the wheel; vLLM is never imported.",
    "A metric is listed where a prometheus_client metric class is called (directly, or "
    "through a class attribute such as PrometheusStatLogger._gauge_cls).",
    "only_if lists the if-tests around the call; an early return before it is not seen, "
    "so a listed metric may be registered only under some configuration.",
    "Histogram buckets are the defaults; vLLM's --custom-histogram-buckets may replace them.",
    "Values passed in by a caller or computed at run time are listed under unresolved, "
    "with the reason, instead of being guessed.",
    "other_names lists vllm:-prefixed strings of the source that no listed metric carries: "
    "most are names of registrations static reading could not follow (see unresolved).",
    "Metrics registered outside vllm/ (prometheus_fastapi_instrumentator's http_* "
    "series on the API server) are not read.",
)


def _metric(m: Metric) -> dict[str, Any]:
    return {
        "name": m.name,
        "type": m.type,
        "family": m.family,
        "series": m.series,
        "labels": None if m.labels is None else list(m.labels),
        "help": m.help,
        "buckets": None if m.buckets is None else list(m.buckets),
        "where": m.where,
        "scope": m.scope,
        "only_if": list(m.only_if),
    }


def _unresolved(u: Unresolved) -> dict[str, Any]:
    out = {"where": u.where, "scope": u.scope, "type": u.type, "what": u.what}
    if u.name is not None:
        out["name"] = u.name
    out.update({"expr": u.expr, "reason": u.reason})
    return out


def build(
    reading: Reading,
    *,
    version: str,
    wheel: str,
    sha256: str,
    constants: dict[str, Any],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "vllm_version": version,
        "wheel": wheel,
        "wheel_sha256": sha256,
        "refresh": f"make vllm-contract VLLM={version}",
        "limits": list(LIMITS),
        "constants": constants,
        "metrics": [_metric(m) for m in reading.metrics],
        "unresolved": [_unresolved(u) for u in reading.unresolved],
        "other_names": [{"name": n, "where": w} for n, w in reading.other_names],
    }


def dumps(contract: dict[str, Any]) -> str:
    return json.dumps(contract, indent=1, ensure_ascii=False) + "\n"


def load(path: Path = CONTRACT_PATH) -> dict[str, Any]:
    """The contract file; raises ValueError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read the vLLM metric contract: {e}") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a vLLM metric contract of format {FORMAT}")
    return data


def by_series(contract: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Registrations by the name a query uses (a counter's ``_total`` name)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for m in contract["metrics"]:
        out.setdefault(m["series"], []).append(m)
    return out
