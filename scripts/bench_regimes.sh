#!/usr/bin/env bash
# The benchmark of docs/benchmarks.md in both L2 regimes, against the physical floor: the mix
# bandwidths of bench/copy_ceiling.py, then `astra bench` with torch.compile as the PyTorch peer,
# cold and then warm. Logs and JSON under DIR; one regime may be run alone.
#   bash scripts/bench_regimes.sh DIR [KERNELS] [SETS] [REGIMES]
#   (defaults: silu_and_mul,fused_add_rmsnorm,merge_attn_states; astra; "cold warm")
# Run from the checkout with the package importable (pip install -e ., or a wheelhouse install on
# PYTHONPATH: see the README). Each step has its own time limit, and a step's failure is reported.
# Run again into the same DIR, each regime goes on from its bench.json (astra bench --resume).
set -u
out=${1:?usage: scripts/bench_regimes.sh DIR [KERNELS] [SETS] [REGIMES]}
kernels=${2:-silu_and_mul,fused_add_rmsnorm,merge_attn_states}
sets=${3:-astra}
regimes=${4:-cold warm}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0

TAIL_LINES=40
source "$(dirname "$0")/steps.sh"  # step NAME SECONDS COMMAND...

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt" 2>&1
[ -f "$out/ceiling.json" ] || step ceiling 180 python3 -P bench/copy_ceiling.py --json "$out/ceiling.json"
for l2 in $regimes; do
    step "bench-$l2" 560 python3 -P -m astra_kernels.cli bench --kernels "$kernels" --set "$sets" \
        --torch compile --l2 "$l2" --out "$out/$l2" --resume
done
exit $status
