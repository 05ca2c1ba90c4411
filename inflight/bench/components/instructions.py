"""Instructions a request costs the whole router process, counted by valgrind's callgrind.

Wall-clock throughput on a shared 2-core machine spreads by ±35 %; the number of
instructions the router executes for a fixed number of requests does not depend on the
machine's load. So this starts ``inflight router`` under
``valgrind --tool=callgrind --instr-atstart=no`` in front of an upstream that answers at
once (its own process, not counted), sends ``warmup`` requests, turns the instrumentation
on (``callgrind_control -i on PID``), sends ``requests`` POST /v1/completions over
``concurrency`` keep-alive connections from this process, turns it off and reads the
total: everything the router process executed for those requests (uvicorn, the event
loop, the proxy, the upstream client, the metrics, the garbage collector), divided by
``requests``.

``tree``: a source tree of this repository (a ``git worktree`` at another commit) put
first on the router's ``PYTHONPATH``, so two commits are compared with the same virtual
environment; the router binds port 0, and for a tree from before the ready file
(``--ready-file``, commit 7f82a97) its port is read back from /proc (:mod:`inflight.ports`).

The garbage collector runs when the objects it tracks have grown by its threshold, so a
window of a thousand requests may or may not hold a collection: a change that leaves
objects for the collector each request (a reference cycle) could hide from the count. So
the router also runs with a probe (a ``sitecustomize`` on its ``PYTHONPATH``: signal
handlers only, nothing on the request path) that runs a full collection just before the
window and reads the collector's state after it: ``gc_left`` is the young generation's
count then (tracked objects allocated in the window and not freed: what the requests leave
for the collector), ``gc_collections`` the collections that ran in the window.

Used by ``inflight bench router --ab --instructions`` and the guard
``tests/integration/test_router_instructions.py`` (its baseline:
``tests/integration/router_instructions.json``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from inflight.bench.components.procs import wait_port
from inflight.procs import ManagedProcess

INSTALL_HINT = "apt-get install -y --no-install-recommends valgrind"
_BODY = b'{"model":"m","prompt":"hi","max_tokens":1}'


def available() -> bool:
    """valgrind and callgrind_control are on PATH."""
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


@dataclass(frozen=True)
class Count:
    """One measurement: ``instructions`` executed by the router for ``requests``."""

    tree: str  # "" = this checkout
    requests: int
    concurrency: int
    instructions: int
    gc_instructions: int  # of those, in CPython's cyclic garbage collector
    ok: int  # responses with status 200
    gc_left: int = 0  # the young generation's count after the window (empty before it)
    gc_collections: int = 0  # collections during the window

    @property
    def gc_left_per_request(self) -> float:
        return self.gc_left / self.requests

    @property
    def per_request(self) -> float:
        return self.instructions / self.requests

    @property
    def gc_per_request(self) -> float:
        return self.gc_instructions / self.requests

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            **asdict(self),
            "per_request": round(self.per_request),
            "gc_per_request": round(self.gc_per_request),
            "non_gc_per_request": round(self.per_request - self.gc_per_request),
            "gc_left_per_request": round(self.gc_left_per_request, 3),
        }


def _request(path: bytes, body: bytes) -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


class Client:
    """``concurrency`` keep-alive connections sending POST /v1/completions: a minimal
    HTTP/1.1 client (responses with a Content-Length or chunked), so the load generator
    costs little next to the router under valgrind, and the same connections serve the
    warm-up and the count (no connection set-up counted)."""

    def __init__(self, streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
        self._streams = streams
        self._message = _request(b"/v1/completions", _BODY)

    @classmethod
    async def connect(cls, host: str, port: int, concurrency: int) -> Client:
        streams = [await asyncio.open_connection(host, port) for _ in range(concurrency)]
        return cls(streams)

    async def send(self, requests: int) -> int:
        """``requests`` requests, as fast as the router answers; the number of 200s."""
        left = requests
        ok = 0
        message = self._message

        async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal left, ok
            while left > 0:
                left -= 1
                writer.write(message)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                if m is not None:
                    await reader.readexactly(int(m.group(1)))
                else:  # chunked
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                        await reader.readexactly(size + 2)
                        if size == 0:
                            break
                ok += status == 200

        await asyncio.gather(*(worker(r, w) for r, w in self._streams))
        return ok

    def close(self) -> None:
        for _, writer in self._streams:
            writer.close()


async def send(host: str, port: int, requests: int, concurrency: int) -> int:
    """``requests`` POSTs over ``concurrency`` new keep-alive connections; the 200s."""
    client = await Client.connect(host, port, min(concurrency, requests))
    try:
        return await client.send(requests)
    finally:
        client.close()


async def _count(
    port: int, pid: int, warmup: int, requests: int, concurrency: int, probe: Path
) -> tuple[int, dict[str, int], dict[str, int]]:
    """Warm up, count ``requests`` with the instrumentation on; the number of 200s, and the
    collector's state before and after."""
    client = await Client.connect("127.0.0.1", port, concurrency)
    try:
        await client.send(warmup)
        before = await asyncio.to_thread(_gc_state, pid, probe, signal.SIGUSR1, 1)
        await asyncio.to_thread(_toggle, pid, True)
        ok = await client.send(requests)
        await asyncio.to_thread(_toggle, pid, False)
        after = await asyncio.to_thread(_gc_state, pid, probe, signal.SIGUSR2, 2)
    finally:
        client.close()
    return ok, before, after


#: The probe: SIGUSR1 and SIGUSR2 each append the collector's state to $INFLIGHT_GC_PROBE.
_PROBE = """
import os
if os.environ.get("INFLIGHT_GC_PROBE"):
    import gc, json, signal

    def _gc_state(signum, _frame):
        if signum == signal.SIGUSR1:  # before the window: start it from an empty young gen
            gc.collect()
        state = {"count": gc.get_count()[0],
                 "collections": sum(s["collections"] for s in gc.get_stats())}
        with open(os.environ["INFLIGHT_GC_PROBE"], "a") as f:
            f.write(json.dumps(state) + "\\n")

    signal.signal(signal.SIGUSR1, _gc_state)
    signal.signal(signal.SIGUSR2, _gc_state)
"""


def _probe_dir(workdir: Path) -> Path:
    folder = workdir / "gc-probe"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_PROBE)
    return folder


def _gc_state(pid: int, path: Path, sig: signal.Signals, lines: int) -> dict[str, int]:
    """Ask the probe for the collector's state; wait for its ``lines``-th line."""
    os.kill(pid, sig)
    deadline = time.monotonic() + 60.0
    while True:
        rows = path.read_text().splitlines() if path.exists() else []
        if len(rows) >= lines:
            state: dict[str, int] = json.loads(rows[lines - 1])
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"the router's gc probe did not answer (pid {pid})")
        time.sleep(0.05)


def _tree_reports_port(tree: Path | None) -> bool:
    """Whether that tree's router takes ``--ready-file`` (commit 7f82a97 on)."""
    if tree is None:
        return True
    cli = tree / "router" / "cli.py"
    return "ready_file" in cli.read_text() if cli.exists() else True


def _toggle(pid: int, on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(pid)],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _total(out_file: Path) -> int:
    """The ``totals:`` instruction count of a callgrind output file (its ``summary:`` line,
    written at the top, reads 0 when the instrumentation was off at start)."""
    text = out_file.read_text(errors="replace")
    m = re.search(r"^totals:\s*(\d+)", text, re.M)
    if m is None:
        raise RuntimeError(f"no totals in {out_file}")
    return int(m.group(1))


def _gc_total(out_file: Path) -> int:
    """Instructions inside CPython's collector (``gc_collect_main``, inclusive)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out_file)],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    total = 0
    for line in text.splitlines():
        if re.search(r"gcmodule\.c:gc_collect_main(?:'\d+)? \[", line):
            total += int(line.split()[0].replace(",", ""))
    return total


def start_upstream(workdir: Path) -> tuple[str, ManagedProcess]:
    """The instant upstream (``inflight.bench.components.upstream``), not under valgrind."""
    ready_file = workdir / "upstream.ready.json"
    proc = ManagedProcess(
        [sys.executable, "-P", "-m", "inflight.bench.components.upstream", "--port", "0",
         "--mode", "instant", "--ready-file", str(ready_file)],
        name="upstream", log_path=workdir / "upstream.log", ready_file=ready_file, grace_s=3.0,
    )  # fmt: skip
    proc.start()
    try:
        url = f"http://127.0.0.1:{proc.wait_ports(timeout_s=30.0)['http']}"
        proc.wait_ready(url + "/health", timeout_s=30.0)
    except BaseException:
        proc.stop()
        raise
    return url, proc


def measure(
    upstream: str,
    workdir: Path,
    tree: Path | None = None,
    requests: int = 2000,
    concurrency: int = 32,
    warmup: int = 200,
    router_args: Sequence[str] = (),
    start_timeout_s: float = 120.0,
    valgrind_args: Sequence[str] = (),
) -> Count:
    """Count the router's instructions for ``requests`` requests (see the module doc)."""
    if not available():
        raise FileNotFoundError(f"valgrind is not installed ({INSTALL_HINT})")
    workdir.mkdir(parents=True, exist_ok=True)
    name = f"router-{tree.name if tree else 'here'}-{time.monotonic_ns()}"
    out_file = workdir / f"{name}.callgrind"
    probe = workdir / f"{name}.gc.jsonl"
    env = dict(os.environ, PYTHONHASHSEED="0", INFLIGHT_GC_PROBE=str(probe))
    paths = [str(tree)] if tree is not None else []
    paths.append(str(_probe_dir(workdir)))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    ready_file = workdir / f"{name}.ready.json" if _tree_reports_port(tree) else None
    argv = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no",
        "--dump-line=no", f"--callgrind-out-file={out_file}", *valgrind_args,
        sys.executable, "-P", "-m", "inflight", "router", "--host", "127.0.0.1",
        "--port", "0", "--endpoints", upstream, "--slots-per-endpoint", "4",
        # no health check during the count: their number would depend on the wall time
        "--health-interval-s", "100000",
        *(["--ready-file", str(ready_file)] if ready_file else []), *router_args,
    ]  # fmt: skip
    proc = ManagedProcess(
        argv,
        name=name,
        env=env,
        cwd=tree or None,
        log_path=workdir / f"{name}.log",
        ready_file=ready_file,
        grace_s=30.0,
    )
    proc.start()
    try:
        port = wait_port(proc, start_timeout_s)
        proc.wait_ready(f"http://127.0.0.1:{port}/health", timeout_s=start_timeout_s)
        ok, before, after = asyncio.run(
            _count(port, proc.pid, warmup, requests, concurrency, probe)
        )
    finally:
        proc.stop()
    return Count(
        str(tree or ""), requests, concurrency, _total(out_file), _gc_total(out_file), ok,
        gc_left=after["count"] - before["count"],
        gc_collections=after["collections"] - before["collections"],
    )  # fmt: skip


# --- the guard (tests/integration/test_router_instructions.py) ----------------------------
#: The guard's settings: enough requests that one request's share of the warm-up and of the
#: instrumentation switch is noise (counts repeat within ~0.5 %), few enough for ~25 s.
GUARD_REQUESTS = 1000
GUARD_CONCURRENCY = 32
GUARD_WARMUP = 200
#: A count more than this over the baseline fails the guard.
GUARD_MARGIN = 0.05
#: More tracked objects than this a request left for the collector fails the guard. The
#: router's requests make no reference cycles: what is left (0.4-0.7 a request, varying
#: with how frees interleave) is the young count's drift (a free while the count is 0 is
#: not counted); a reference cycle leaves at least two objects a request.
GUARD_GC_LEFT_PER_REQUEST = 2.0


def fingerprint() -> dict[str, str]:
    """What the count depends on besides the code: the interpreter and the packages on the
    hot path (another version runs other instructions), and valgrind."""
    import importlib.metadata
    import platform

    out = {"python": f"{platform.python_implementation()} {platform.python_version()}"}
    for package in ("uvicorn", "httptools", "uvloop"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "absent"
    done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=False)
    out["valgrind"] = done.stdout.strip()
    return out


def guard_count(workdir: Path, tree: Path | None = None) -> Count:
    """One count with the guard's settings (its own upstream, stopped after)."""
    upstream, up = start_upstream(workdir)
    try:
        return measure(upstream, workdir, tree, GUARD_REQUESTS, GUARD_CONCURRENCY, GUARD_WARMUP)
    finally:
        up.stop()


def record(path: Path, count: Count, note: str) -> dict[str, object]:
    """Write ``count`` as the guard's baseline (JSON), with what it depends on."""
    import json

    doc: dict[str, object] = {
        "per_request": round(count.per_request),
        "margin": GUARD_MARGIN,
        "gc_left_per_request": round(count.gc_left_per_request, 3),
        "gc_collections": count.gc_collections,
        "requests": count.requests,
        "concurrency": count.concurrency,
        "warmup": GUARD_WARMUP,
        "fingerprint": fingerprint(),
        "note": note,
        "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inflight.bench.components.instructions [TREE...]``: one count per tree
    (none: this checkout)."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trees", nargs="*", type=Path)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--keep", type=Path, default=None, help="keep callgrind's files here")
    p.add_argument("--valgrind-arg", action="append", default=[])
    p.add_argument(
        "--router-arg",
        action="append",
        default=[],
        help="a flag for the routers measured (repeat it: --router-arg=--dispatch "
        "--router-arg=prefix); every tree gets the same",
    )
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="BASELINE_JSON",
        help="count this checkout with the guard's settings and write the "
        "guard's baseline there (tests/integration/router_instructions.json)",
    )
    p.add_argument("--note", default="", help="with --record: why (kept in the file)")
    args = p.parse_args(argv)
    if args.record is not None:
        with tempfile.TemporaryDirectory(prefix="router-instr-") as tmp:
            count = guard_count(args.keep or Path(tmp))
        print(json.dumps(record(args.record, count, args.note), indent=2))
        return 0
    trees: list[Path | None] = list(args.trees) or [None]
    with tempfile.TemporaryDirectory(prefix="router-instr-") as tmp:
        work = args.keep or Path(tmp)
        upstream, up = start_upstream(work)
        try:
            for _ in range(args.repeat):
                for tree in trees:
                    t0 = time.monotonic()
                    c = measure(
                        upstream,
                        work,
                        tree,
                        args.requests,
                        args.concurrency,
                        args.warmup,
                        valgrind_args=args.valgrind_arg,
                        router_args=args.router_arg,
                    )
                    print(json.dumps({**c.as_dict(), "wall_s": round(time.monotonic() - t0, 1)}),
                          flush=True)  # fmt: skip
        finally:
            up.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
