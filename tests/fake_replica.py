"""A tiny stand-in replica for smoke tests of the supervisor and the stack.

``python tests/fake_replica.py --port P [--startup-s S] [--worker]`` serves
``GET /health`` (503 during start-up, then 200) and answers ``POST /v1/completions``
after ``--service-s``. With ``--worker`` it starts a child process of its own (like vLLM's
engine core), so tests can prove a replica's whole process group is stopped.
Standard library only: it starts in a fraction of a second. Test support, not part of the
package: tests start it by its file (``COMMAND``, ``ARGV``), so the child needs neither the
repository on its path nor a particular working directory.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: This interpreter running this file: append flags (``--port {port}`` for ``--replica-cmd``).
ARGV: tuple[str, ...] = (sys.executable, str(Path(__file__).resolve()))
COMMAND = shlex.join(ARGV)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake_replica")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--startup-s", type=float, default=0.0)
    parser.add_argument("--service-s", type=float, default=0.0)
    parser.add_argument("--worker", action="store_true", help="start a child process too")
    args = parser.parse_args(argv)
    ready_at = time.monotonic() + args.startup_s
    worker = None
    if args.worker:
        worker = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(60)"])

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                ok = time.monotonic() >= ready_at
                self._send(200 if ok else 503, {"ok": ok})
            elif self.path == "/worker":
                self._send(200, {"pid": worker.pid if worker else None})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            time.sleep(args.service_s)
            self._send(200, {"choices": [{"text": "ok"}], "port": args.port})

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    try:
        server.serve_forever()
    finally:
        if worker is not None:
            worker.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
