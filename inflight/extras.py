"""The optional extras, and the check the subcommands that need one run first.

The image and a plain ``pip install inflight`` carry what the router, scaler and emulator
need; what only ``inflight bench``, ``inflight dashboards`` and ``inflight sim
trace-from-prometheus`` import is in the extras ``inflight[bench]``, ``inflight[dashboards]``
and ``inflight[sim]`` (pyproject.toml). Without its extra, such a
subcommand stops at once with exit code 2 and says what to install, rather than failing
later with an ImportError from deep inside a run.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import TextIO

# extra -> the top-level modules its distributions provide (pyproject.toml's
# [project.optional-dependencies]; tests/unit/test_extras.py keeps the two in step).
EXTRAS: Mapping[str, tuple[str, ...]] = {
    "bench": ("matplotlib", "openai", "tqdm"),
    "dashboards": ("grafana_foundation_sdk",),
    "sim": ("prometheus_api_client",),
    "vllm-cpu": ("tokenizers",),
}

EXIT_MISSING = 2


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here; KeyError for an unknown extra."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def require(extra: str, command: str, stream: TextIO | None = None) -> int | None:
    """None when ``extra`` is installed; else say so on ``stream`` (stderr) and return 2."""
    missing = missing_modules(extra)
    if not missing:
        return None
    print(
        f"{command} needs the {extra!r} extra, which is not installed "
        f"(missing: {', '.join(missing)}); install it with: pip install 'inflight[{extra}]'",
        file=stream if stream is not None else sys.stderr,
    )
    return EXIT_MISSING


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder refused it, or a half-imported module
        return False
