"""The dashboards' derived replica count holds where the HPA holds.

promtool evaluates ``dashboards.signals.saturation_desired_expr`` (the "saturation rule"
line of the "what a QPS rule would do" panel) on constant L and ready counts, and each
answer must equal ``inflight.control.hpa_math.replicas_for_average_value``, the one Python
implementation of the HPA's arithmetic. Before the tolerance was accounted for the
PromQL said ceil(44 / 4) = 11 at 10 replicas, where the HPA stays at 10.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards import signals as s
from inflight.control.hpa_math import HPA_TOLERANCE, replicas_for_average_value

ROUTER = 'job="router",instance="r1"'
SLOTS = 4

# (L, ready): the hold above and below 1, its edges, no ready replica, idle.
CASES = [(44, 10), (45, 10), (36, 10), (35, 10), (8, 2), (5, 1), (9, 1), (8, 0), (0, 2), (21, 20)]


def _scenario(inflight: int, ready: int, expected: int) -> dict[str, object]:
    def series(name: str, value: int, extra: str = "") -> dict[str, str]:
        labels = ROUTER + ("," + extra if extra else "")
        return {"series": f"{name}{{{labels}}}", "values": f"{value}x90"}

    return {
        "name": f"L {inflight} on {ready} ready",
        "interval": "1s",
        "input_series": [
            series("router_inflight_requests", inflight),
            series("router_endpoints", ready, 'state="ready"'),
            series("router_slots_per_endpoint", SLOTS),
        ],
        "promql_expr_test": [
            {
                "expr": s.saturation_desired_expr(""),
                "eval_time": "80s",
                "exp_samples": [{"labels": "{}", "value": expected}],
            }
        ],
    }


def _run(promtool: str, tmp_path: Path, tests: list[dict[str, object]]) -> str:
    path = tmp_path / "tolerance_test.yaml"
    doc = {"rule_files": [], "evaluation_interval": "1s", "tests": tests}
    path.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promql_derived_replicas_equal_the_hpa_arithmetic(promtool: str, tmp_path: Path) -> None:
    expected = {
        (inflight, ready): replicas_for_average_value(inflight, SLOTS, ready, HPA_TOLERANCE)
        for inflight, ready in CASES
    }
    # The worked examples, so a change in the shared function cannot pass silently.
    assert expected[(44, 10)] == 10 and expected[(45, 10)] == 12 and expected[(8, 0)] == 2
    _run(promtool, tmp_path, [_scenario(*case, want) for case, want in expected.items()])


def test_the_plain_ceiling_would_be_rejected(promtool: str, tmp_path: Path) -> None:
    """The check can fail: claiming ceil(44 / 4) = 11 at 10 ready is refused."""
    with pytest.raises(AssertionError):
        _run(promtool, tmp_path, [_scenario(44, 10, 11)])
