#!/usr/bin/env bash
# What a lent GPU machine's host and GPUs are doing, every few seconds, until stopped:
#   bash scripts/gpu_monitor.sh FILE [SECONDS] & MONITOR=$!; ...the run...; kill $MONITOR
# Each sample: the time, the busiest processes (top) and each GPU's utilisation and memory. It is
# how docs/scaling.md's run J showed the driver at 100% of one core while the GPUs idled.
set -u
file=${1:?usage: scripts/gpu_monitor.sh FILE [SECONDS]}
every=${2:-15}
while true; do
    date -u +%T
    top -b -n1 -w 220 | sed -n 7,18p
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
    sleep "$every"
done > "$file" 2>&1
