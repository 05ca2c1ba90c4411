"""The subcommands that need an extra, run where it is not installed: each says which extra
to install and exits 2. The extra is made missing in a subprocess whose sys.modules maps
its modules to None (``import`` then raises ModuleNotFoundError), so nothing is
uninstalled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inflight import extras

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from inflight.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_without(modules: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, ",".join(modules), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("extra", "argv"),
    [
        ("bench", ["bench", "run", "--url", "http://127.0.0.1:9", "--results-file", "{tmp}/r"]),
        ("bench", ["bench", "compare", "--out-dir", "{tmp}/cmp", "--state-root", "{tmp}/st"]),
        ("dashboards", ["dashboards", "build", "--check"]),
    ],
)
@pytest.mark.parametrize("which", ["all", "one"])
def test_a_missing_extra_is_named_with_exit_code_2(
    extra: str, argv: list[str], which: str, tmp_path: Path
) -> None:
    modules = extras.EXTRAS[extra] if which == "all" else extras.EXTRAS[extra][-1:]
    done = run_without(modules, *(a.format(tmp=tmp_path) for a in argv))
    assert done.returncode == 2, done.stderr
    assert f"pip install 'inflight[{extra}]'" in done.stderr
    assert f"missing: {', '.join(modules)}" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # stopped before doing anything
