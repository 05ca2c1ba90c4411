"""inflight.extras against pyproject.toml: the extras the code checks for are the ones
declared, and each extra's modules are exactly what its distributions provide."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from inflight import extras

REPO = Path(__file__).resolve().parents[2]


def _declared() -> tuple[list[str], dict[str, list[str]]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = {k: v for k, v in project["optional-dependencies"].items() if k != "dev"}
    return project["dependencies"], optional


def _dist(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_the_checked_extras_are_the_declared_ones() -> None:
    _runtime, optional = _declared()
    assert set(extras.EXTRAS) == set(optional)


@pytest.mark.parametrize("extra", sorted(extras.EXTRAS))
def test_each_extra_checks_exactly_the_modules_its_distributions_provide(extra: str) -> None:
    runtime, optional = _declared()
    declared = {_dist(r) for r in optional[extra]}
    provided_by = importlib.metadata.packages_distributions()
    checked = {
        _dist(dist) for module in extras.EXTRAS[extra] for dist in provided_by.get(module, [])
    }
    assert checked == declared, f"{extra}: modules checked {extras.EXTRAS[extra]}"
    assert not declared & {_dist(r) for r in runtime}, f"{extra}: also a runtime dependency"


def test_an_installed_extra_passes(capsys: pytest.CaptureFixture[str]) -> None:
    # the dev environment installs every extra (scripts/setup.sh)
    for extra in extras.EXTRAS:
        assert extras.missing_modules(extra) == []
        assert extras.require(extra, f"inflight {extra}") is None
    assert capsys.readouterr().err == ""
