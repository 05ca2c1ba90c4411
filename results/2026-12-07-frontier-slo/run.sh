#!/usr/bin/env bash
# The README's open-loop rows with the SLO stage (capped; results/2026-12-07-slo-report-2)
# beside today's default: results/2026-12-02-frontier-heldout/run.sh's rows, written into this
# folder. The peers' rows do not depend on our default (results/2026-12-03-frontier-margin).
# Usage, from the repository root: results/2026-12-07-frontier-slo/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[sloTtftSeconds=run;sloGoal=0.99]' \
  D=results/2026-12-07-frontier-slo exec results/2026-12-02-frontier-heldout/run.sh "$@"
