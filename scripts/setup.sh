#!/usr/bin/env bash
# Set up everything inflight needs on a fresh machine: a virtual environment in .venv with
# the package and its dev, bench, dashboards and sim extras, and the Debian packages the tests
# use when missing: prometheus (server + promtool); podman, runc and mmdebstrap for the
# image; wrk and nginx (the router benchmark's load generator and peer).
# Idempotent: re-running it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

# Debian packages, installed when missing (as root with apt-get), else named with a hint:
# prometheus (server + promtool), and podman with runc and mmdebstrap, which build and run
# the image (make image, tests/integration/test_image.py).
missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
for tool in podman runc mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: not installed: ${missing[*]}, and this is not root with apt-get." >&2
        echo "setup: install with: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
        echo "setup: (without prometheus, 'inflight up' falls back to the scaler's direct" >&2
        echo "setup:  source; without podman, make image and the image test fail)" >&2
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
    echo "setup: installing inflight[dev,bench,dashboards,sim] into $VENV" >&2
    log="$VENV/pip-install.log"
    if ! "$VENV/bin/python" -m pip install -e ".[dev,bench,dashboards,sim]" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "setup: pip install failed; full log in $log" >&2
        exit 1
    fi
    echo "$want" > "$stamp"
fi
