#!/usr/bin/env bash
# Instructions per request of the in-process hot path (router-hotpath.py), by difference
# of two callgrind runs (4000 and 2000 requests). $1 = tree (PYTHONPATH).
set -e
ir() { PYTHONHASHSEED=0 PYTHONPATH=$1 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-inproc.out /work/wt/router/.venv/bin/python /tmp/router-hotpath.py $2 1 >/dev/null 2>&1; grep -E "^(totals|summary):" /tmp/cg-inproc.out | head -1 | awk '{print $2}'; }
a=$(ir $1 5000); b=$(ir $1 25000)
echo "$1: $(( (b - a) / 20000 )) instructions/request"
