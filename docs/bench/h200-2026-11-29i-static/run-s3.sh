# call 3 (nvidia-h200-x2): silu_and_mul's sweep re-tuned with STATIC_D (cold on GPU 0, warm on GPU 1), then benchmarked at every sweep point
set -u
source .old/setup-min.sh
O=/tmp/o3; mkdir -p $O
date -u +%T > $O/times.txt
for s in 1x14336 16384x14336 1x28672 16384x28672; do python3 -P -m astra_kernels.cli space silu_and_mul --shape $s > $O/space-$s.log 2>&1; done
echo "spaces $(date -u +%T)" >> $O/times.txt
run() {  # l2 gpu
  timeout -s INT 300 python3 -P -m astra_kernels.cli tune silu_and_mul --set sweep --budget 10 --start shipped --onto shipped \
    --l2 $1 --gpu $2 --out $O/$1/silu_and_mul > $O/tune-$1.log 2>&1
  echo "tune $1 rc $? $(date -u +%T)" >> $O/times.txt
  left=$((575 - SECONDS))
  timeout -s INT $left python3 -P -m astra_kernels.cli bench --kernels silu_and_mul --set sweep --torch compile --l2 $1 --gpu $2 \
    --tuned $O/$1/silu_and_mul --out $O/bench-$1 > $O/bench-$1.log 2>&1
  echo "bench $1 rc $? $(date -u +%T)" >> $O/times.txt
}
run warm 1 &
P=$!
run cold 0
wait $P
cd /tmp && tar czf $OUT/s3.tgz o3 && ls -la $OUT
