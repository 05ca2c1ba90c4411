#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder.
# Usage, from the repository root: results/2026-12-03-startup-default/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-startup-default
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[startupSeconds=30],saturation[startupSeconds=30;excursionMargin=1.5],saturation[startupSeconds=20;excursionMargin=1.5]'}
results/2026-12-02-anticipate/run.sh "$@"
