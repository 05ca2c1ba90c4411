#!/bin/sh
# The four KV-bound workloads of results/2026-12-02-sim-token-admission, token admission on,
# after the fixes (3c00856); then the engines' preemptions. One at a time, nice -n 10.
set -e
R=results/2026-12-02-sim-token-admission-2
POL='saturation,saturation[capacity=requests]'
LC="--arrivals poisson:0:0.5,300:0.5,600:2,900:2,1170:0.25,1500:0.25 --prompt-tokens uniform:1500:4000 --max-tokens uniform:100:300 --kv-blocks 48 --min-replicas 1 --max-replicas 6 --startup-s 100 --seeds 1"
MX="--arrivals poisson:0:0.5,300:0.5,600:3,900:3,1170:0.25,1500:0.25 --prompt-tokens mix:0.3:uniform:100:500+uniform:2000:4000 --max-tokens uniform:100:300 --kv-blocks 48 --min-replicas 1 --max-replicas 6 --startup-s 100 --seeds 1"
AC="--trace /tmp/traces/AzureLLMInferenceTrace_code.csv --trace-duration-s 1200 --kv-blocks 64 --min-replicas 1 --max-replicas 8 --seeds 1"
AV="--trace /tmp/traces/AzureLLMInferenceTrace_conv.csv --trace-duration-s 1200 --kv-blocks 40 --min-replicas 1 --max-replicas 8 --seeds 1"
I=.venv/bin/inflight
nice -n 10 $I sim compare $LC --policies "$POL" --token-admission --force --out-dir $R/long-context-admission
nice -n 10 $I sim compare $MX --policies "$POL" --token-admission --force --out-dir $R/mixed-admission
nice -n 10 $I sim compare $AC --policies "$POL" --token-admission --force --out-dir $R/azure-code-admission
nice -n 10 $I sim compare $AV --policies "$POL" --token-admission --force --out-dir $R/azure-conv-admission
: > $R/preemptions.txt
for w in "$LC" "$MX" "$AC" "$AV"; do
  nice -n 10 .venv/bin/python $R/preemptions.py "$POL,fixed:3" -- $w --token-admission >> $R/preemptions.txt
done
