"""``python -m inflight.vllm_contract refresh --version X``: rewrite the vLLM metric contract.

Downloads the release wheel with pip (``pip download vllm==X --no-deps``) into a temporary
directory that is deleted afterwards (the wheel is ~350 MB), or reads ``--wheel`` when it
is already here, then writes the contract file (``--out``, default
``inflight/emulator/vllm_metrics.json``). Needs the network only for the download.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from inflight.vllm_contract import contract, static

# Module constants of the release that the emulator copies, recorded with the metrics.
# FINISH_REASON_STRINGS: PrometheusStatLogger creates vllm:request_success for every
# FinishReason, labelled finished_reason=str(reason), which is this tuple.
CONSTANTS = (("vllm.v1.engine", "FINISH_REASON_STRINGS"),)


def download(version: str, into: Path) -> Path:
    """The release wheel for this machine, fetched by pip into ``into``."""
    cmd = [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps"]
    cmd += ["--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", str(into)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"vllm-contract: {' '.join(cmd)} failed:\n{done.stderr.strip()}")
    wheels = sorted(into.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"vllm-contract: expected one vllm wheel in {into}, found {wheels}")
    return wheels[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sources(wheel: Path) -> dict[str, str]:
    """Every ``vllm/**/*.py`` in the wheel, by its path inside the wheel."""
    with zipfile.ZipFile(wheel) as z:
        return {
            n: z.read(n).decode("utf-8")
            for n in z.namelist()
            if n.startswith("vllm/") and n.endswith(".py")
        }


def wheel_version(wheel: Path) -> str:
    """``vllm-0.33.0-cp38-abi3-….whl`` → ``0.33.0`` (the wheel file name's second field)."""
    parts = wheel.name.split("-")
    if len(parts) < 3 or parts[0] != "vllm":
        raise SystemExit(f"vllm-contract: {wheel} is not a vllm wheel file name")
    return parts[1]


def build_from_wheel(wheel: Path, version: str) -> dict[str, Any]:
    found = wheel_version(wheel)
    if found != version:
        raise SystemExit(f"vllm-contract: --version {version} but {wheel.name} is {found}")
    src = sources(wheel)
    constants = {f"{mod}.{name}": static.read_constant(src, mod, name) for mod, name in CONSTANTS}
    return contract.build(
        static.read_metrics(src),
        version=version,
        wheel=wheel.name,
        sha256=sha256(wheel),
        constants=constants,
    )


def refresh(version: str, out: Path, wheel: Path | None) -> dict[str, Any]:
    if wheel is not None:
        data = build_from_wheel(wheel, version)
    else:
        with tempfile.TemporaryDirectory(prefix="vllm-contract-") as tmp:
            data = build_from_wheel(download(version, Path(tmp)), version)
    out.write_text(contract.dumps(data))
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m inflight.vllm_contract", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("refresh", help="download a vLLM release and rewrite the contract file")
    r.add_argument("--version", required=True, help="the vLLM release, e.g. 0.33.0")
    r.add_argument("--out", type=Path, default=contract.CONTRACT_PATH, help="contract file")
    r.add_argument("--wheel", type=Path, help="read this wheel instead of downloading it")
    args = p.parse_args(argv)
    data = refresh(args.version, args.out, args.wheel)
    print(
        f"vllm-contract: vllm {data['vllm_version']}: {len(data['metrics'])} metrics, "
        f"{len(data['unresolved'])} unresolved → {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
