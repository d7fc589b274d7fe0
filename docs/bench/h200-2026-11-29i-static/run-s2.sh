# call 2 (nvidia-h200-x2): GPU 0 host cost per call and the decoder layer; GPU 1 silu_and_mul's focused grid with STATIC_D, then the FIB GPU tests
set -u
source .old/setup-min.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl-fib/*.whl >/dev/null 2>&1 || echo "whl-x failed"
O=/tmp/o2; mkdir -p $O
date -u +%T > $O/times.txt
gpu1() {
  export CUDA_VISIBLE_DEVICES=1
  timeout 330 python3 -P bench/focused_grid.py $O/grid.json --at silu_and_mul:1x14336,silu_and_mul:4x14336,silu_and_mul:7x14336,silu_and_mul:4x11008,silu_and_mul:60x18944,silu_and_mul:454x14336,silu_and_mul:2048x14336 > $O/grid.log 2>&1
  echo "grid rc $? $(date -u +%T)" >> $O/times.txt
  left=$((560 - SECONDS)); [ $left -gt 30 ] && timeout $left python3 -P -m pytest -m gpu -q -rs -p no:cacheprovider tests/jobs/test_fib_on_gpu.py > $O/fib-tests.log 2>&1
  echo "fib rc $? $(date -u +%T)" >> $O/times.txt
}
gpu1 &
P=$!
export CUDA_VISIBLE_DEVICES=0
timeout 200 python3 -P bench/host_cost.py --out $O/host > $O/host.log 2>&1
echo "host rc $? $(date -u +%T)" >> $O/times.txt
left=$((560 - SECONDS)); timeout $left python3 -P bench/serving_path.py --out $O/layer > $O/layer.log 2>&1
echo "layer rc $? $(date -u +%T)" >> $O/times.txt
wait $P
cd /tmp && tar czf $OUT/s2.tgz o2 && ls -la $OUT
