"""Debian's nginx as a peer: a static upstream that answers at once, or a ``least_conn``
proxy with upstream keep-alive. One worker, a config of its own in the run's workdir."""

from __future__ import annotations

import shutil
from pathlib import Path

from inflight.bench.components.procs import Stack
from inflight.bench.components.upstream import INSTANT_BODY
from inflight.procs import ManagedProcess, free_port

INSTALL_HINT = "apt-get install -y --no-install-recommends nginx"


def nginx_binary() -> str | None:
    """The nginx executable (Debian puts it in /usr/sbin, often off a user's PATH)."""
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None


def _nginx_conf(workdir: Path, port: int, body: str) -> Path:
    temp = workdir / f"nginx-{port}"
    temp.mkdir(parents=True, exist_ok=True)
    conf = temp / "nginx.conf"
    conf.write_text(
        f"""worker_processes 1;
daemon off;
pid {temp}/nginx.pid;
error_log {temp}/error.log warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fcgi; uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
  keepalive_requests 1000000;
{body}
}}
"""
    )
    return conf


def _start(stack: Stack, conf: Path, name: str, ready_url: str) -> ManagedProcess:
    nginx = nginx_binary()
    if nginx is None:
        raise FileNotFoundError(f"nginx is not installed ({INSTALL_HINT})")
    return stack.start([nginx, "-c", str(conf), "-p", str(conf.parent)], name, ready_url)


def start_nginx_static(stack: Stack) -> str:
    """The 'answers at once' upstream: nginx returning a fixed completion."""
    port = free_port()  # third-party, cannot report a port
    body = f"""  server {{ listen 127.0.0.1:{port} backlog=4096; default_type application/json;
    location / {{ return 200 '{INSTANT_BODY.decode()}'; }} }}"""
    conf = _nginx_conf(stack.workdir, port, body)
    _start(stack, conf, f"nginx-static-{port}", f"http://127.0.0.1:{port}/health")
    return f"http://127.0.0.1:{port}"


def start_nginx_proxy(stack: Stack, upstreams: list[str]) -> tuple[str, ManagedProcess]:
    """nginx as a proxy: ``least_conn``, 512 idle upstream connections kept, no buffering."""
    port = free_port()  # third-party, cannot report a port
    servers = "".join(f"    server {u.split('://')[1]};\n" for u in upstreams)
    body = f"""  upstream backends {{
    least_conn;
{servers}    keepalive 512;
  }}
  server {{ listen 127.0.0.1:{port} backlog=4096;
    location = /nginx-health {{ return 200 'ok'; }}
    location / {{
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }}
  }}"""
    conf = _nginx_conf(stack.workdir, port, body)
    proc = _start(stack, conf, f"nginx-proxy-{port}", f"http://127.0.0.1:{port}/nginx-health")
    return f"http://127.0.0.1:{port}", proc
