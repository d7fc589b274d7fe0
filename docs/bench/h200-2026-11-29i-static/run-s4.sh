# call 4 (nvidia-h200-x2): the sweep benches of call 3 resumed (--resume: only the points they lack)
set -u
source .old/setup-min.sh
O=/tmp/o4; mkdir -p $O; cp -r .old/s3/* $O/
date -u +%T > $O/times.txt
run() {  # l2 gpu
  timeout -s INT 250 python3 -P -m astra_kernels.cli bench --kernels silu_and_mul --set sweep --torch compile --l2 $1 --gpu $2 \
    --tuned $O/$1/silu_and_mul --out $O/bench-$1 --resume > $O/bench-$1.log 2>&1
  echo "bench $1 rc $? $(date -u +%T)" >> $O/times.txt
}
run warm 1 &
P=$!
run cold 0
wait $P
cd /tmp && tar czf $OUT/s4.tgz o4/bench-cold o4/bench-warm o4/times.txt o4/*.log && ls -la $OUT
