#!/usr/bin/env bash
# The tables of this folder's README, in sample then held out. From the repository root:
#   results/2026-12-02-floor-variants/summarize.sh
set -euo pipefail
D=results/2026-12-02-floor-variants
.venv/bin/python -m inflight results summarize "$D" --rows ramp-seed1,spike-seed1,bursty-seed1,azure-code-0
echo
.venv/bin/python -m inflight results summarize "$D" --below 0.95 --below-prefix azure \
  --rows diurnal,ramp-seeds23,spike-seeds23,bursty-seeds23,azure-code-1200,azure-code-2400,azure-conv-0,azure-conv-1200,azure-conv-2400
