#!/usr/bin/env bash
# The default (excursionMargin 1.5) against excursionMargin 1 (the adopted evidence keys kept:
# excursionFleets any, excursionFleetChange own): the diurnal scenario at seeds 14-21, where
# `sim run` showed margin 1.5 losing (the question's own sample), and rows no policy has run:
# ramp and spike at seeds 24-25, bursty warm at 24, the Azure 2023 code and conversation
# windows from 375, 975, 1,425 and 2,025 s, Mooncake's from 750 and 2,100 s (a trace's
# windows overlap earlier ones: an hour holds few 20-minute windows; these starts are new).
# phase: results/2026-12-03-fleet-change/phase.sh's 15 rows (the 9 in-sample trace rows of
# results/2026-12-02-single-fraction/in moved 10 s either way), where margin 1.5 was chosen
# against the default of then (margin 1 with the evidence of then), never against this M1.
# Usage, from the repository root: results/2026-12-03-margin/run.sh GROUP (diurnal | held |
# phase), traces in $TRACES.
set -euo pipefail
export D=results/2026-12-03-margin
export POLICIES='fixed:MAX,saturation,saturation[excursionMargin=1]'
case $1 in
  diurnal) rows=(diurnal-s14 diurnal-s15 diurnal-s16 diurnal-s17 diurnal-s18 diurnal-s19 diurnal-s20 diurnal-s21) ;;
  held)
    rows=(ramp-s24 ramp-s25 spike-s24 spike-s25 bursty-warm-s24)
    for kind in code conv; do
      for start in 375 975 1425 2025; do rows+=("$kind-$start"); done
    done
    rows+=(moon-750 moon-2100) ;;
  phase)
    mapfile -t rows < <(results/2026-12-03-fleet-change/phase-rows.sh) ;;
  *) echo "usage: $0 diurnal|held|phase" >&2; exit 2 ;;
esac
results/2026-12-02-anticipate/run.sh "$1" "${rows[@]}"
