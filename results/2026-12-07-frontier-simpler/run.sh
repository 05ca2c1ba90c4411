#!/usr/bin/env bash
# The README's open-loop rows with anticipation and the late hold off
# (results/2026-12-07-simpler-report's candidate) beside today's default:
# results/2026-12-02-frontier-heldout/run.sh's rows, written into this folder.
# Usage, from the repository root: results/2026-12-07-frontier-simpler/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[anticipateSeconds=0;startupSeconds=0]' \
  D=results/2026-12-07-frontier-simpler exec results/2026-12-02-frontier-heldout/run.sh "$@"
