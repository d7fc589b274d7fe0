"""What a change of the shipped tables' picks did, from two benchmarks of one call.

    python3 -P bench/pick_change.py BEFORE.json AFTER.json

BEFORE is `astra bench --out`'s bench.json of the picks as they were (the tree before a dispatch
or table change), AFTER of the same shapes after it, both timed in one call on one GPU (times of
two calls are not compared: docs/design.md). At each shape where today's shipped table picks what
AFTER ran and BEFORE ran another configuration, the old tuned time over the new one; where both ran
today's pick, the same ratio says how far the two benchmarks agree on one kernel. Today's pick is
jobs/benchmark.tuned_column's, as bench/sweep_status.py reads it, so an AFTER bench of another tree
counts only where its pick is today's. No GPU needed.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path


def compare(before_path: Path, after_path: Path) -> tuple[list[tuple[str, float]], list[float], str]:
    """The changed shapes' (label, old us / new us), the same picks' ratios, and a line naming the table."""
    from pydantic import ValidationError

    from astra_kernels import suite
    from astra_kernels.jobs.benchmark import BenchReport, shipped_table, tuned_column

    reports = []
    for path in (before_path, after_path):
        try:
            reports.append(BenchReport.model_validate_json(path.read_text()))
        except (ValidationError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not the bench.json of `astra bench --out` ({str(exc).splitlines()[0]})") from None
    before, after = reports
    if (before.device, before.l2) != (after.device, after.l2):
        raise ValueError(f"the two reports are of {before.device} with {before.l2} L2 and {after.device} with "
                         f"{after.l2} L2: compare two benchmarks of one GPU kind and regime")
    old = {(r.kernel, r.label): r for r in before.rows if r.tuned_status == "ok"}
    changed, same, tables = [], [], set()
    for new in after.rows:
        was = old.get((new.kernel, new.label))
        table = shipped_table(new.kernel, after.device, after.l2)
        if was is None or new.tuned_status != "ok" or table is None:
            continue
        tables.add(new.kernel)
        today = tuned_column(table, new.shape, suite.DEFAULT_SMS, after.arch)
        if new.tuned_column != today:
            continue
        ratio = was.tuned_us / new.tuned_us
        if was.tuned_column == today:
            same.append(ratio)
        else:
            changed.append((new.label, ratio))
    return changed, same, f"{', '.join(sorted(tables)) or 'no kernel'} on {after.device}, {after.l2} L2"


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    from astra_kernels.tools.errors import AstraError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="bench.json of the picks before the change")
    parser.add_argument("after", type=Path, help="bench.json of the same shapes after it, from the same call")
    args = parser.parse_args()
    try:
        changed, same, what = compare(args.before, args.after)
    except (AstraError, OSError, ValueError) as exc:
        print(f"pick_change: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"{what}: {len(changed)} shapes whose pick changed", end="")
    if changed:
        ratios = [r for _, r in changed]
        print(f", old time / new time geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}, "
              f"range {min(ratios):.3f}-{max(ratios):.3f}")
        print("  " + " ".join(f"{label}:{ratio:.3f}" for label, ratio in changed))
    else:
        print()
    if same:
        print(f"the same pick in both: {len(same)} shapes, old / new {min(same):.3f}-{max(same):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
