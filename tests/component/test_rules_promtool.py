"""``promtool check rules`` and ``promtool test rules`` on the generated rule file.

The unit tests in ``dashboards/rules/tests/`` step through every alert's ``for:``
duration: each alert fires when it should and stays quiet when it should not, including
"high QPS but not saturated". A deliberately broken copy of the rules must fail them,
so the promtool tests can fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from dashboards import build as b

ROOT = b.REPO_ROOT
TESTS_DIR = ROOT / "dashboards" / "rules" / "tests"
TEST_FILES = sorted(TESTS_DIR.glob("*_test.yaml"))


def _promtool(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_rule_file_passes_promtool_check(promtool: str) -> None:
    done = _promtool(promtool, "check", "rules", ROOT / b.RULES_FILE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 20 rules found" in done.stdout


def test_prometheusrule_spec_passes_promtool_check(promtool: str, tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / b.PROMETHEUSRULE_FILE).read_text())["spec"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = _promtool(promtool, "check", "rules", path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_pass(promtool: str) -> None:
    assert TEST_FILES, f"no promtool tests in {TESTS_DIR}"
    done = _promtool(promtool, "test", "rules", *TEST_FILES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(TEST_FILES), done.stdout


def _alert_cases() -> dict[str, tuple[int, int]]:
    """alertname -> (checks expecting it to fire, checks expecting silence)."""
    cases: dict[str, tuple[int, int]] = {}
    for path in TEST_FILES:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                fire, quiet = cases.get(check["alertname"], (0, 0))
                if check.get("exp_alerts"):
                    fire += 1
                else:
                    quiet += 1
                cases[check["alertname"]] = (fire, quiet)
    return cases


def test_every_alert_has_firing_and_quiet_cases() -> None:
    rules = yaml.safe_load((ROOT / b.RULES_FILE).read_text())["groups"]
    alerts = {r["alert"] for g in rules for r in g["rules"] if "alert" in r}
    cases = _alert_cases()
    for alert in alerts:
        fire, quiet = cases.get(alert, (0, 0))
        assert fire >= 1 and quiet >= 1, f"{alert}: {fire} firing, {quiet} quiet checks"
    names = [t["name"] for p in TEST_FILES for t in yaml.safe_load(p.read_text())["tests"]]
    assert "high QPS but not saturated stays quiet" in names


def test_broken_rules_fail_the_unit_tests(promtool: str, tmp_path: Path) -> None:
    """An alert on QPS instead of saturation, and shortened for: durations, must be caught."""
    rules_dir = tmp_path / "rules"
    (rules_dir / "tests").mkdir(parents=True)
    text = (ROOT / b.RULES_FILE).read_text()
    broken = text.replace(
        "expr: inflight:saturation:ratio > 1",
        "expr: inflight:router_requests_received:rate1m > 0.5",
    ).replace("for: 15m", "for: 1m")
    assert broken != text
    (rules_dir / b.RULES_FILE.name).write_text(broken)
    for path in TEST_FILES:
        shutil.copy(path, rules_dir / "tests" / path.name)
    done = _promtool(promtool, "test", "rules", *sorted((rules_dir / "tests").iterdir()))
    assert done.returncode != 0
    assert "InflightSustainedQueueing" in done.stdout + done.stderr
    assert "InflightEndpointImbalance" in done.stdout + done.stderr
