#!/usr/bin/env bash
# The default decision's cost before and after this stop's policy changes, alternately, one
# fresh process per tree per round: results/2026-12-03-rebound/decide_ab.sh OLD_COMMIT [ROUNDS]
# (from the repository root, nothing else running). Prints one line per run.
set -euo pipefail
old=$1 rounds=${2:-10}
here=$(pwd) wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$wt" "$old"
for r in $(seq "$rounds"); do
  for tree in "$wt" "$here"; do
    name=old; [ "$tree" = "$here" ] && name=new
    echo "$r $name $(PYTHONPATH=$tree .venv/bin/python "$here/results/2026-12-03-rebound/decide_ab.py")"
  done
done
