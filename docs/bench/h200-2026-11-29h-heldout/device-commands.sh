# The A/B of docs/performance.md entry 32, as it ran on nvidia-h200-x2 (2026-11-29), for the record.
# .old/ was a git-excluded folder carried to the device: setup-min.sh installs the offline wheels built
# here (python3 scripts/build_wheelhouse.py --out .whl-min --skip numpy --skip cuda-bindings
# --skip typing-extensions pydantic rich ml-dtypes optuna, plus this tree's wheel) into /tmp/site and
# puts it first on PYTHONPATH; .old/whl-old/ held the wheel of the tree with runtime/dispatch.py and
# jobs/generated/export_pick.cu.in as they were before the change (the "before" benches). The "new"
# wheel was the first form of the rule (the "any-move" benches).
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
