# The time-limited steps of scripts/gpu_check.sh and scripts/bench_regimes.sh, sourced by both.
# The caller sets `out` (the log folder), `status=0` and TAIL_LINES (lines of each log shown).
step() {  # step NAME SECONDS COMMAND...: its log under $out, its tail shown, a failure noted in $status
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s)"
    echo "== $(date -u +%FT%TZ) $*" >> "$out/$name.log"  # appended: a folder run again keeps the cut call's log
    timeout "$limit" "$@" >> "$out/$name.log" 2>&1
    local rc=$?
    tail -n "${TAIL_LINES:-25}" "$out/$name.log"
    [ "$rc" -eq 0 ] || { echo "== $name exited $rc"; status=1; }
}
