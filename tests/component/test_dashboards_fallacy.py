"""The "what a QPS rule would do beside what saturation does" panel computes what it says.

promtool evaluates the panel's two PromQL expressions (from ``dashboards.signals``, the
same text the committed dashboard holds) on the seed's two failure scenarios
(docs/workload.md):

* concurrency 8 on 2 replicas of 4 slots (saturation 1.0): batches of 4 finish together,
  so in the gaps the last 10 s hold no arrival, QPS reads 0 < 0.05 and the QPS rule asks
  for 1 replica at 100% saturation, while the saturation rule holds 2;
* concurrency 4 on 1 replica (saturation 1.0, no queue) at 0.88 req/s: the QPS rule asks
  for a second replica for nothing; the saturation rule stays at 1.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from dashboards import build as b
from dashboards import signals as s

ROUTER = 'job="router",instance="r1"'


def _series(name: str, values: str, extra: str = "") -> dict[str, str]:
    labels = ROUTER + ("," + extra if extra else "")
    return {"series": f"{name}{{{labels}}}", "values": values}


def _expect(expr: str, at_s: int, value: float) -> dict[str, object]:
    sample = {"labels": "{}", "value": value}
    return {"expr": expr, "eval_time": f"{at_s}s", "exp_samples": [sample]}


def _scenario(
    name: str, inflight: int, ready: int, received: str, checks: list[dict[str, object]]
) -> dict[str, object]:
    return {
        "name": name,
        "interval": "1s",
        "input_series": [
            _series("router_inflight_requests", f"{inflight}x90"),
            _series("router_endpoints", f"{ready}x90", 'state="ready"'),
            _series("router_slots_per_endpoint", "4x90"),
            _series("router_requests_received_total", received),
        ],
        "promql_expr_test": checks,
    }


def test_qps_rule_flaps_where_saturation_holds(promtool: str, tmp_path: Path) -> None:
    qps, sat = s.qps_desired_expr(""), s.saturation_desired_expr("")
    # The committed dashboard shows exactly these expressions (with its selector).
    board = json.loads((b.REPO_ROOT / b.DASHBOARD_DIR / "saturation.json").read_text())
    [panel] = [p for p in board["panels"] if p["title"].startswith("What a QPS rule")]
    sel = 'namespace=~"$namespace",job=~"$job",model=~"$model"'
    assert [t["expr"] for t in panel["targets"][:2]] == [
        s.qps_desired_expr(sel),
        s.saturation_desired_expr(sel),
    ]

    # A batch of 4 arrivals at t = 5, 22, 39, 56, 73 s (W ≈ 33 s, 8 in flight).
    batches = "0x4 4x16 8x16 12x16 16x16 20x16"
    tests = [
        _scenario(
            "c8 on 2 replicas, full: QPS scales down in the gaps",
            inflight=8,
            ready=2,
            received=batches,
            checks=[
                _expect(qps, 30, 2),  # 8 s after a batch: qps ≈ 0.44, between thresholds
                _expect(qps, 37, 1),  # 15 s after it: qps 0 < 0.05 -> scale down at 100%
                _expect(sat, 37, 2),  # ceil(8 / 4)
                _expect(sat, 60, 2),
            ],
        ),
        _scenario(
            "c4 on 1 replica, full without a queue: QPS scales up for nothing",
            inflight=4,
            ready=1,
            received="0+0.88x90",
            checks=[_expect(qps, 60, 2), _expect(sat, 60, 1)],
        ),
    ]
    path = tmp_path / "fallacy_test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1s", "tests": tests}))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_above_can_fail(promtool: str, tmp_path: Path) -> None:
    """Claiming the QPS rule holds 2 replicas in a gap must be rejected by promtool."""
    test = _scenario(
        "wrong expectation",
        inflight=8,
        ready=2,
        received="0x4 4x16 8x16 12x16 16x16 20x16",
        checks=[_expect(s.qps_desired_expr(""), 37, 2)],
    )
    path = tmp_path / "wrong_test.yaml"
    doc = {"rule_files": [], "evaluation_interval": "1s", "tests": [test]}
    path.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
