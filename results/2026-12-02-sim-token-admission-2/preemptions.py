"""The engines' preemptions in the runs of this folder: the first folder's script, run as it
is (``results/2026-12-02-sim-token-admission/preemptions.py``; without its ``--admit-tokens``
what-if, the router now admits against the usable blocks itself, it prints the same lines).

    python results/2026-12-02-sim-token-admission-2/preemptions.py POLICY,... -- SIM-COMPARE-FLAGS
"""

from __future__ import annotations

import runpy
from pathlib import Path

FIRST = Path(__file__).resolve().parents[1] / "2026-12-02-sim-token-admission" / "preemptions.py"

if __name__ == "__main__":
    runpy.run_path(str(FIRST), run_name="__main__")
