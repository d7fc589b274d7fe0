# call 1 (nvidia-h200-x2): GPU 0 the GPU tests last session left; GPU 1 silu few-token repeat benches, then test_suite_on_gpu.py
set -u
source .old/setup-min.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl-x/*.whl >/dev/null 2>&1 || echo "whl-x failed"
O=/tmp/o; mkdir -p $O
python3 -c "import torch,sys; print(sys.version, torch.__version__)" > $O/versions.txt 2>&1
python3 -m pip list 2>/dev/null | grep -i -E "pytest|langchain|langgraph|flashinfer|tvm|torch" >> $O/versions.txt
nvidia-smi > $O/nvidia-smi.txt
date -u +%T > $O/times.txt
gpu1() {
  export CUDA_VISIBLE_DEVICES=1
  S=1x14336,2x14336,3x14336,4x14336,5x14336,7x14336,135x14336,202x14336,454x14336,6x28672,60x28672,2x11008,4x11008,5x11008,60x18944,135x18944
  for i in 1 2 3; do
    timeout 170 python3 -P -m astra_kernels.cli bench --kernels silu_and_mul --shapes $S --torch compile --out $O/silu-r$i > $O/silu-r$i.log 2>&1
    echo "silu r$i rc $? $(date -u +%T)" >> $O/times.txt
  done
  timeout 120 python3 -P -m astra_kernels.cli bench --kernels fused_add_rmsnorm --shapes 3450x4096 --torch compile --out $O/fused-3450 > $O/fused-3450.log 2>&1
  echo "fused rc $? $(date -u +%T)" >> $O/times.txt
  left=$((570 - SECONDS)); [ $left -gt 30 ] && timeout $left python3 -P -m pytest -m gpu -n 4 -q -rs -p no:cacheprovider tests/kernels_sglang/test_suite_on_gpu.py > $O/gpu1-suite.log 2>&1
  echo "suite rc $? $(date -u +%T)" >> $O/times.txt
}
gpu1 &
P=$!
CUDA_VISIBLE_DEVICES=0 timeout 560 python3 -P -m pytest -m gpu -q -rs -p no:cacheprovider --durations=15 \
  tests/reliability/test_kernel_faults_on_gpu.py tests/tools/measuring/test_device_checks_on_gpu.py \
  tests/tools/measuring/test_adversarial_on_gpu.py tests/tools/toolchain/test_pdl_on_gpu.py \
  tests/tools/toolchain/test_toolchain_on_gpu.py tests/tools/measuring/test_nsight.py \
  tests/jobs/test_importing_on_gpu.py tests/jobs/test_new_kernel_on_gpu.py tests/jobs/test_peer_builds_on_gpu.py \
  tests/jobs/test_peer_rotation.py tests/jobs/test_torch_peers.py \
  tests/agent/test_agent_on_gpu.py > $O/gpu0-tests.log 2>&1
echo "gpu0 tests rc $? $(date -u +%T)" >> $O/times.txt
wait $P
cd /tmp && tar czf $OUT/s1.tgz o && ls -la $OUT
