#!/usr/bin/env bash
# Every GPU check and benchmark of the repository on the local GPU, logs and JSON under DIR.
#   bash scripts/gpu_check.sh DIR [pytest -k expression]
# Run from the checkout with the package importable (pip install -e ., or a wheelhouse install
# on PYTHONPATH: see the README). Each step has its own time limit, so one slow step cannot
# starve the rest; a step's failure is reported and the next one still runs. Give a new DIR each
# time: the benchmark refuses a folder holding an earlier run's bench.json (astra bench --resume
# would keep its rows rather than check again).
set -u
out=${1:?usage: scripts/gpu_check.sh DIR [pytest -k expression]}
select=${2:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0

source "$(dirname "$0")/steps.sh"  # step NAME SECONDS COMMAND...

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt" 2>&1
# GPU tests are selected by the `gpu` marker alone, one step per layer of tests/.
step toolchain_tests 300 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/tools
step suite_tests 1200 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/kernels_sglang ${select:+-k "$select"}
step other_tests 900 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/jobs tests/agent tests/reliability tests/packaging
step baselines 300 python3 bench/baselines.py --json "$out/baselines.json"
step toolchain_bench 120 python3 bench/toolchain.py --json "$out/toolchain.json"
step suite_bench 900 python3 -P -m astra_kernels.cli bench --kernels silu_and_mul,rmsnorm,fused_add_rmsnorm,merge_attn_states --set astra,serving --out "$out/bench"
exit $status
