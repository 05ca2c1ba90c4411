"""No code path picks a port for one of our own servers any more (issue 15, item 9).

``free_port()`` (bind 0, close, hand the number over) races with every other process of
the machine. Our servers bind port 0 and report (``--ready-file``); it stays only where the
child is third-party and cannot report. This test fails when a new use appears elsewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Where a picked port is still the only way, and why.
ALLOWED = {
    "inflight/procs.py": "the definition",
    "inflight/up/supervisor.py": "an external --replica-cmd with {port} (vllm serve)",
    "inflight/bench/components/nginx.py": "nginx, the router benchmark's third-party peer",
    "inflight/bench/components/procs.py": "vllm-router, the router benchmark's third-party peer",
    "inflight/bench/calibrate/real.py": "vllm serve, the real engine calibrate-emulator measures",
}
CALL = re.compile(r"\bfree_port\(")


def test_free_port_is_used_only_where_the_child_cannot_report() -> None:
    users = {}
    for folder in ("inflight", "router", "external_scaler", "dashboards", "scripts", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "tests/unit/test_no_picked_ports.py":
                continue
            count = len(CALL.findall(path.read_text()))
            if count:
                users[rel] = count
    assert set(users) <= set(ALLOWED), {k: v for k, v in users.items() if k not in ALLOWED}


def test_the_default_replica_reports_its_port() -> None:
    from inflight.cli import build_parser
    from inflight.up.cli import settings_from_args

    config = settings_from_args(build_parser().parse_args(["up", "--no-prometheus"]))
    cmd = list(config.replica_command)
    assert cmd[cmd.index("--port") + 1] == "0"
    assert cmd[cmd.index("--ready-file") + 1] == "{ready_file}"
