"""scripts/pins.txt pins the router's hot-path packages to the versions the instruction
guard's baseline was counted with: the guard skips when they differ, so a pin that drifts
from the baseline (or a baseline re-recorded without moving the pin) turns it off in CI."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINS = ROOT / "scripts" / "pins.txt"
BASELINE = ROOT / "tests" / "integration" / "router_instructions.json"


def pins() -> dict[str, str]:
    out = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"scripts/pins.txt: {line!r} is not NAME==VERSION"
            out[name.strip().lower()] = version.strip()
    return out


def test_pins_match_the_instruction_baselines_fingerprint() -> None:
    fingerprint = json.loads(BASELINE.read_text())["fingerprint"]
    packages = {k: v for k, v in fingerprint.items() if k not in ("python", "valgrind")}
    assert packages, "the baseline's fingerprint names no package"
    assert pins() == packages


def test_setup_installs_with_the_pins() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-c scripts/pins.txt" in setup
    # the stamp covers the pins: moving one reinstalls
    assert "cat pyproject.toml scripts/pins.txt | sha256sum" in setup
