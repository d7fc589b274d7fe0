#!/usr/bin/env bash
# FlashInfer-Bench end to end on the local GPU: the example definitions imported, tuned, exported as
# Solutions into a trace set, judged by FlashInfer-Bench's own evaluator, then called through its
# apply runtime; the verdicts beside this project's own figures. Logs, the trace set and JSON under DIR.
#   bash scripts/fib_check.sh DIR [SECONDS_PER_SHAPE] [TOKENS]
# Needs the package importable (as scripts/gpu_check.sh), PyTorch with CUDA, nvcc (CUDA_HOME is set
# from it) and flashinfer-bench with what its evaluator uses:
#   pip install --no-deps flashinfer-bench==0.1.2 safetensors docstring-parser apache-tvm-ffi ninja
# TOKENS: the token counts each kernel is tuned at (default 1,16,256,4096; the evaluator runs every
# workload of the definition, 1 to 16384 tokens, each served by the table's pick).
set -u
out=${1:?usage: scripts/fib_check.sh DIR [SECONDS_PER_SHAPE] [TOKENS]}
seconds=${2:-2}
tokens=${3:-1,16,256,4096}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1 FIB_CACHE_PATH="$out/fib-cache"
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc > /dev/null; then
    export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
status=0
source "$(dirname "$0")/steps.sh"  # step NAME SECONDS COMMAND...

examples=examples/flashinfer-bench
rm -rf "$out/traceset" && cp -r "$examples" "$out/traceset"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt" 2>&1
step gpu_test 300 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/jobs/test_fib_on_gpu.py
for definition in "$examples"/definitions/*/*.json; do
    kernel=$(basename "$definition" .json)
    op=$(basename "$(dirname "$definition")")
    width=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(min(a['value'] for a in d['axes'].values() if a['type'] == 'const'))" "$definition")
    shapes=$(echo "$tokens" | sed "s/\([0-9][0-9]*\)/\1x$width/g")
    step "import_$kernel" 60 python3 -P -m astra_kernels.cli import-fib "$definition" \
        --workloads "$examples/workloads/$op/$kernel.jsonl" --dir "$out/kernels" --force
    step "tune_$kernel" 600 python3 -P -m astra_kernels.cli tune "$kernel" --kernels-dir "$out/kernels" \
        --shapes "$shapes" --seconds "$seconds" --out "$out/tuned/$kernel"
    step "export_$kernel" 120 python3 -P -m astra_kernels.cli export "$out/tuned/$kernel" --kernels-dir "$out/kernels" \
        --out "$out/export/$kernel" --fib "$out/traceset"
done
step fib_run 900 flashinfer-bench run --local "$out/traceset"
for definition in "$examples"/definitions/*/*.json; do
    step "apply_$(basename "$definition" .json)" 300 python3 -P bench/fib_apply.py --traceset "$out/traceset" \
        --definition "$(basename "$definition" .json)" --out "$out/apply"
done
step table 60 python3 bench/fib_table.py --traceset "$out/traceset" --json "$out/fib_table.json"
exit $status
