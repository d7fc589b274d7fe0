set -u
source .old/setup-min.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site-old .old/whl-old/*.whl >/dev/null 2>&1 || echo "old wheel failed"
mkdir -p /tmp/ab
date -u +%T
ab() {  # l2 gpu
  for k in fused_add_rmsnorm rmsnorm; do
    if [ $k = rmsnorm ]; then S=sweep@5120,1533x3584,2300x3584,3450x3584; else S=sweep@5120; fi
    for v in new old; do
      if [ $v = old ]; then PP=/tmp/site-old:/tmp/site; else PP=/tmp/site; fi
      PYTHONPATH=$PP timeout 250 python3 -P -m astra_kernels.cli bench --kernels $k --shapes $S --torch compile --l2 $1 --gpu $2 --out /tmp/ab/$1-$k-$v > /tmp/ab/$1-$k-$v.log 2>&1
      echo "$1 $k $v rc $? $(date -u +%T)"
    done
  done
}
ab warm 1 > /tmp/ab/warm.txt 2>&1 &
W=$!
ab cold 0
wait $W; cat /tmp/ab/warm.txt
cd /tmp && tar czf $OUT/ab.tgz ab && ls -la $OUT
