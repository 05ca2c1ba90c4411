#!/usr/bin/env bash
# Build the project's image from its Dockerfile with podman: `make image`.
#
#   scripts/image.sh              # builds inflight:<version>
#   IMAGE=inflight:dev scripts/image.sh
#
# The Dockerfile's base image (its first FROM, python:3.11-slim-bookworm) is used when it is
# in local storage or can be pulled. Where no public registry can be reached, a stand-in is
# built under that same name from Debian packages (mmdebstrap, bookworm: Python 3.11 with
# pip), once: it stays in local storage and later builds reuse it. The Dockerfile itself is
# built unchanged either way. Prints the image's name as the last line of stdout.
#
# First it installs what it needs when missing, as `make up` and `make test` do:
# `scripts/setup.sh image` (podman, runc and mmdebstrap, as root with apt-get; no venv).
set -euo pipefail
# podman's build steps run in other directories: a CONTAINERS_CONF given relative is made
# absolute before leaving the caller's.
if [ -n "${CONTAINERS_CONF:-}" ]; then
    CONTAINERS_CONF="$(realpath "$CONTAINERS_CONF")"
fi
cd "$(dirname "$0")/.."
scripts/setup.sh image

PYTHON="${PYTHON:-python3}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
IMAGE="${IMAGE:-inflight:$version}"
BASE="$(awk 'toupper($1) == "FROM" { print $2; exit }' Dockerfile)"
# runc, cgroupfs, no raised RLIMIT_NOFILE: see the file.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/scripts/containers.conf}"

log() { echo "image: $*" >&2; }

if ! command -v podman >/dev/null 2>&1; then
    log "podman is not installed (scripts/setup.sh image installs it as root:"
    log "  apt-get install -y --no-install-recommends podman runc mmdebstrap)"
    exit 1
fi

# Where the base is a short name (python:TAG), pull it fully qualified: no search registries
# need to be configured.
qualified="$BASE"
case "$BASE" in
    */*) ;;
    *) qualified="docker.io/library/$BASE" ;;
esac

# The pip settings this machine uses, for the stand-in: its CA bundle (a machine behind a
# TLS-inspecting proxy trusts the proxy's CA there) and its package index.
host_pip() {
    "$PYTHON" -m pip config get "$1" 2>/dev/null || true
}

ca_bundle() {
    local candidate
    for candidate in "${PIP_CERT:-}" "$(host_pip global.cert)" "${SSL_CERT_FILE:-}" \
        /etc/ssl/certs/ca-certificates.crt; do
        if [ -n "$candidate" ] && [ -f "$candidate" ]; then
            echo "$candidate"
            return
        fi
    done
}

write_pip_conf() {
    local index extra url
    index="${PIP_INDEX_URL:-$(host_pip global.index-url)}"
    extra="${PIP_EXTRA_INDEX_URL:-$(host_pip global.extra-index-url)}"
    echo "[global]"
    echo "cert = /etc/ssl/certs/ca-certificates.crt"
    if [ -n "$index" ]; then
        echo "index-url = $index"
    fi
    # Only indexes a container can reach: file:// ones lie on this machine's disk.
    for url in $extra; do
        case "$url" in
            http://* | https://*) echo "extra-index-url = $url" ;;
            *) log "stand-in: leaving out the local index $url" ;;
        esac
    done
}

build_standin() {
    local work bundle
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        log "mmdebstrap is not installed; it builds the stand-in for $BASE"
        log "  (apt-get install -y --no-install-recommends mmdebstrap)"
        exit 1
    fi
    work="$(mktemp -d "${TMPDIR:-/tmp}/inflight-standin.XXXXXX")"
    # shellcheck disable=SC2064  # expand $work now
    trap "rm -rf '$work'" EXIT
    bundle="$(ca_bundle)"
    write_pip_conf >"$work/pip.conf"
    log "stand-in: debootstrapping bookworm with Python 3 into $qualified (minutes, once)"
    # As in the official image: python and pip on /usr/local/bin, pip free to install into
    # the system interpreter (PEP 668's marker dropped), a UTF-8 locale; and this machine's
    # CA bundle and pip settings, so pip reaches the index the way the host does.
    mmdebstrap --quiet --variant=minbase \
        --include=python3,python3-pip,python3-venv,ca-certificates \
        --customize-hook='ln -s /usr/bin/python3 "$1/usr/local/bin/python"' \
        --customize-hook='ln -s /usr/bin/pip3 "$1/usr/local/bin/pip"' \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        --customize-hook="cp '$work/pip.conf' \"\$1/etc/pip.conf\"" \
        ${bundle:+--customize-hook="cp '$bundle' \"\$1/etc/ssl/certs/ca-certificates.crt\""} \
        bookworm "$work/rootfs.tar"
    podman import --quiet \
        --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --message "stand-in for $qualified: Debian bookworm's python3 (scripts/image.sh)" \
        "$work/rootfs.tar" "$qualified" >/dev/null
    rm -rf "$work"
    trap - EXIT
}

if podman image exists "$BASE"; then
    log "base $BASE: in local storage"
elif podman pull --quiet "$qualified" >/dev/null 2>&1; then
    log "base $BASE: pulled $qualified"
else
    log "base $BASE: not in local storage and cannot be pulled; building a stand-in"
    build_standin
fi

# The image this build replaces under $IMAGE would stay behind untagged: remove it after.
previous="$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
log "building $IMAGE from Dockerfile"
podman build --network host --layers=false --pull=never -t "$IMAGE" . >&2
current="$(podman image inspect --format '{{.Id}}' "$IMAGE")"
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || log "kept the previous $IMAGE ($previous): in use"
fi
echo "$IMAGE"
