"""results/README.md lists every folder under results/, and only folders that are there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

RESULTS = Path(__file__).resolve().parents[2] / "results"


def listed() -> set[str]:
    """The folder names in the README's table rows (backquoted, dated)."""
    rows = [
        line for line in (RESULTS / "README.md").read_text().splitlines() if line.startswith("| `")
    ]
    return {
        name
        for row in rows
        for name in re.findall(r"`(\d{4}-\d{2}-\d{2}-[^`/ ]+)`", row.split(" | ")[0])
    }


def test_every_results_folder_is_listed_and_every_listed_folder_is_there() -> None:
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir()}
    names = listed()
    assert sorted(folders - names) == [], "folders missing from results/README.md"
    assert sorted(names - folders) == [], "results/README.md lists folders that are not there"
