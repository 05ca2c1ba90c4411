#!/usr/bin/env bash
# Set up everything inflight needs on a fresh machine: a virtual environment in .venv with
# the package and its dev extra, Debian's prometheus (server + promtool) when missing, and
# Debian's wrk and nginx (the router benchmark's load generator and peer) when missing.
# Idempotent: re-running it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's prometheus (server and promtool)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    else
        echo "setup: prometheus is not installed and this is not root with apt-get." >&2
        echo "setup: install it with: sudo apt-get install -y --no-install-recommends prometheus" >&2
        echo "setup: (without it, 'inflight up' falls back to the scaler's direct source," >&2
        echo "setup:  and the tests that need a real Prometheus fail)" >&2
    fi
fi

if ! command -v wrk >/dev/null 2>&1 || { ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; }; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's wrk and nginx (inflight bench router)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends wrk nginx >/dev/null
    else
        echo "setup: wrk or nginx is not installed and this is not root with apt-get." >&2
        echo "setup: install them with: sudo apt-get install -y --no-install-recommends wrk nginx" >&2
        echo "setup: (without them, 'inflight bench router' skips those peers and its" >&2
        echo "setup:  component test fails)" >&2
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.inflight-installed"
want="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing inflight[dev] into $VENV" >&2
    log="$VENV/pip-install.log"
    if ! "$VENV/bin/python" -m pip install -e ".[dev]" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "setup: pip install failed; full log in $log" >&2
        exit 1
    fi
    echo "$want" > "$stamp"
fi
