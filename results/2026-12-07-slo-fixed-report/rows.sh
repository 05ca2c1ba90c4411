#!/usr/bin/env bash
# The README's open-loop rows with the SLO stage (its dispersion counted over the scrapes,
# 2e1395c) beside today's default: results/2026-12-02-frontier-heldout/run.sh's rows, written
# into this folder. Usage, from the repository root (traces in $TRACES):
#   results/2026-12-07-slo-fixed-report/rows.sh
P='fixed:MAX,saturation,saturation[sloTtftSeconds=run;sloGoal=0.99]' \
  D=results/2026-12-07-slo-fixed-report exec results/2026-12-02-frontier-heldout/run.sh "$@"
