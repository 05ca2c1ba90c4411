"""Instructions the router executes per request (valgrind callgrind, so the count does not
depend on the other helpers' load): base c958355 vs h-router, each in front of nginx
`return 200`. Per side: start the router under callgrind with instrumentation off, turn it
on, warm up 300 requests, zero the counters, send N requests (8 keep-alive connections),
dump, read the total Ir. Run from /tmp with the h-router venv's python, no PYTHONPATH."""

import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "/work/wt/router/scripts")
import bench_router as b

from inflight.procs import ManagedProcess

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ORDER = sys.argv[2].split(",") if len(sys.argv) > 2 else ["before", "after"]
CLIENT = [b.PY, "/tmp/router-nreq.py"]


def total_ir(path: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


result = {}
with tempfile.TemporaryDirectory(prefix="router-cg-") as tmp:
    stack = b.Stack(Path(tmp))
    try:
        upstream = b.start_nginx_static(stack)
        for side in ORDER:
            env = dict(os.environ, PYTHONHASHSEED="0")
            env.pop("PYTHONPATH", None)
            if side == "before":
                env["PYTHONPATH"] = "/tmp/router-before"
            port = b.free_port()
            out = f"{tmp}/cg-{side}.out"
            proc = ManagedProcess(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--instr-atstart=no",
                    f"--callgrind-out-file={out}",
                    b.PY,
                    "-m",
                    "inflight",
                    "router",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--slots-per-endpoint",
                    "4",
                    "--endpoints",
                    upstream,
                ],
                name=f"cg-{side}",
                env=env,
                log_path=Path(tmp) / f"cg-{side}.log",
                grace_s=60.0,
            )
            stack.procs.append(proc)
            proc.start()
            url = f"http://127.0.0.1:{port}"
            proc.wait_ready(url + "/health", timeout_s=600.0)
            ctl = ["callgrind_control"]
            subprocess.run([*ctl, "-i", "on", str(proc.pid)], check=True, capture_output=True)
            subprocess.run([*CLIENT, url, "304", "8"], check=True, capture_output=True)
            subprocess.run([*ctl, "-z", str(proc.pid)], check=True, capture_output=True)
            subprocess.run([*CLIENT, url, str(N), "8"], check=True, capture_output=True)
            subprocess.run([*ctl, "-d", str(proc.pid)], check=True, capture_output=True)
            dumps = sorted(glob.glob(out + ".*"), key=os.path.getmtime)
            ir = total_ir(dumps[-1])
            result[side] = {"requests": N, "instructions": ir, "instructions_per_request": ir // N}
            print(side, result[side], flush=True)
            stack.stop(proc)
    finally:
        stack.stop_all()
result["ratio_after_over_before"] = round(
    result["after"]["instructions_per_request"] / result["before"]["instructions_per_request"], 4
)
print(json.dumps(result))
