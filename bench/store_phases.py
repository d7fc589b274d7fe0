"""Where a tune's time went, read from its results store: evaluations by kind with their phases
(compile, check: the draws and the checks, time, floor), the rows written per 30 s, and the
shapes that cost the most.

    python bench/store_phases.py OUT/results.sqlite [MORE.sqlite ...]

docs/performance.md entry 24 reads a sweep's tune on an H200 with it (the draws were the check
phase's bulk). No GPU needed.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import signal
import sqlite3
import sys


def summary(path: str) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("select which, shape, created_at, result from results").fetchall()
    finally:
        db.close()
    lines = [f"== {path}: {len(rows)} rows"]
    kinds: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, collections.Counter()])
    times, by_shape = [], collections.Counter()
    for which, shape, created, result in rows:
        parsed = json.loads(result)
        wall = parsed.get("wall_seconds") or 0.0
        kind = kinds[which]
        kind[0] += 1
        kind[1] += wall
        kind[2].update(parsed.get("phase_seconds") or {})
        times.append(datetime.datetime.fromisoformat(created))
        by_shape[shape] += wall
    for which, (n, wall, phases) in sorted(kinds.items()):
        split = ", ".join(f"{k} {v:.1f}" for k, v in phases.most_common())
        lines.append(f"{which:10} n={n:5} wall={wall:8.1f}s mean={wall / n:.3f}s phases={split}")
    if times:
        times.sort()
        span = (times[-1] - times[0]).total_seconds()
        per = collections.Counter(int((t - times[0]).total_seconds() // 30) for t in times)
        lines.append(f"span {span:.0f}s from {times[0]}")
        lines.append("rows per 30 s: " + " ".join(str(per.get(i, 0)) for i in range(int(span // 30) + 1)))
    lines.append("top shapes by wall: " + ", ".join(f"{s} {w:.0f}s" for s, w in by_shape.most_common(8)))
    return "\n".join(lines)


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output, not with a traceback
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="+", help="results stores (.sqlite) written by astra tune")
    args = parser.parse_args()
    for path in args.stores:
        try:
            print(summary(path))
        except sqlite3.Error as exc:
            print(f"{path}: not a results store ({exc})", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
