"""Debian's ``wrk`` as the load generator for the capacity and added-latency scenarios
(so the load generator is not the bottleneck), and the reading of its report."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

POST_BODY = b'{"model":"m","prompt":"hi","max_tokens":1}'
INSTALL_HINT = "apt-get install -y --no-install-recommends wrk"
_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def wrk_seconds(text: str) -> float:
    """A wrk duration in seconds: ``"1.50ms"`` → 0.0015."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"cannot read wrk duration {text!r}")
    return float(m.group(1)) * _UNITS_S[m.group(2)]


def parse_report(out: str) -> dict[str, float]:
    """wrk ``--latency`` stdout → requests/s, p50/p99 (ms), non-2xx count, socket errors."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    pct = dict(re.findall(r"^\s+(50|99)(?:\.000)?%\s+(\S+)", out, re.M))
    if rps is None or "50" not in pct or "99" not in pct:
        raise ValueError(f"cannot read wrk's report (no Requests/sec or percentiles):\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": float(rps.group(1)),
        "p50_ms": wrk_seconds(pct["50"]) * 1e3,
        "p99_ms": wrk_seconds(pct["99"]) * 1e3,
        "non_2xx": float(bad.group(1)) if bad else 0.0,
        "socket_errors": 0.0 if errors is None else 1.0,
    }


def run_wrk(url: str, concurrency: int, duration_s: float, workdir: Path) -> dict[str, float]:
    """POST /v1/completions with wrk, one thread, ``concurrency`` connections."""
    script = workdir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = '{POST_BODY.decode()}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    out = subprocess.run(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{duration_s:g}s", "--latency", "-s", str(script),
         url + "/v1/completions"],
        capture_output=True, text=True, timeout=duration_s + 60, check=True,
    ).stdout  # fmt: skip
    return parse_report(out)
