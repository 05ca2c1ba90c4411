#!/usr/bin/env bash
# The phase rows, one a line: the 9 in-sample trace rows of results/2026-12-02-single-fraction/in
# with their windows moved 10 s earlier and later (rows starting at 0 move later only). Read by
# this folder's phase.sh and results/2026-12-03-margin/run.sh phase.
set -euo pipefail
for row in code-0 code-0-1.5 code-1200 code-1800-0.8 code-2400 code-600-1.25 conv-0 conv-1200 conv-2400; do
  IFS=- read -r kind start scale <<<"$row"
  for d in -10 10; do
    s=$((start + d))
    ((s >= 0)) || continue
    echo "$kind-$s${scale:+-$scale}"
  done
done
