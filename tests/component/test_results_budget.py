"""The committed ``results/`` folder stays within its budget (issue #21, item 4): the files
git lists there (``git ls-files``, a process: so not in the unit tier) total 20 MB at most."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUDGET_BYTES = 20 * 1024 * 1024


def test_results_stay_within_the_budget() -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the committed files are not known")
    listed = subprocess.run(
        [git, "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    files = [ROOT / name.decode() for name in listed if name]
    total = sum(p.stat().st_size for p in files if p.exists())
    assert 0 < total <= BUDGET_BYTES, f"results/ holds {total / 2**20:.1f} MB (budget 20 MB)"
