#!/usr/bin/env bash
# The rows of results/2026-12-02-single-fraction/run.sh, written into this folder.
# Usage, from the repository root: POLICIES='fixed:MAX,...' results/2026-12-02-startup-known/run.sh GROUP ROW...
D=results/2026-12-02-startup-known exec results/2026-12-02-single-fraction/run.sh "$@"
