"""What the finalists' re-timing decided in tune stores, and what it cost.

How often it named another winner than the search's, by how much, and at what time.

    python3 -P bench/retime_effect.py STORE [STORE ...] [--margin 0.02] [--json OUT.json]

A tune names a shape's winner from a fresh, interleaved re-timing of its fastest few configurations
(tools/search/runner.retime_finalists: the best median of hundreds is biased low by the spread). Those
re-timings are stored as "finalist" rows beside the search's "template" rows, so a store shows, for
every shape whose re-timing finished: the search's winner (the finalist with the least search time),
the re-timing's winner (the least median of its re-timings), the gain of the change (the search
winner's re-timed time over the new winner's; 1.0 where it did not change) and how far each
finalist's search time lay from its re-timed one. A shape's rows are matched on the template's source
hash, so a store that spans template versions is read per version. The evaluation wall time of the
finalist rows against the search's says what the re-timing costs a tune (docs/tuning.md's tune-time
goal); `--margin` says what re-timing only the finalists that contend (tools/search/runner.contends,
RETIME_MARGIN the tuner's) would have kept of that time and where its pick would differ from the full
re-timing's. STORE: a results store (.sqlite) or a shipped recording (.sqlite.gz). No GPU needed.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def effect(path: Path) -> dict:
    from astra_kernels.tools.measuring.replay import unpacked_copy

    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    store = unpacked_copy(path)
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        rows = db.execute("SELECT kernel, which, config, shape, dtype, variant, device, status, median_us, spread, "
                          "source_sha256, result FROM results WHERE which IN ('template', 'finalist')").fetchall()
        db.close()
    except sqlite3.Error as exc:
        raise ValueError(f"{path}: not a results store ({exc})") from None
    search: dict[tuple, list[tuple[float, float | None]]] = defaultdict(list)  # (shape key, config) -> (median, spread)
    retimed: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))  # shape key -> config -> medians
    retime_wall: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    failed: set[tuple] = set()
    wall = {"template": 0.0, "finalist": 0.0}
    kernels = set()
    for kernel, which, config, shape, dtype, variant, device, status, median, spread, source, result in rows:
        kernels.add(kernel)
        seconds = json.loads(result).get("wall_seconds") or 0.0
        wall[which] += seconds
        where = (kernel, shape, dtype, variant, device, source)
        if which == "template":
            if status == "ok" and median is not None:
                search[(where, config)].append((median, spread))
        elif status == "ok" and median is not None:
            retimed[where][config].append(median)
            retime_wall[where][config] += seconds
        else:
            failed.add(where)
    shapes = []
    for where, by_config in retimed.items():
        # a finished re-timing: every finalist re-timed in every round (two or more each), all correct
        if where in failed or len(by_config) < 2 or any(len(v) < 2 for v in by_config.values()):
            continue
        if any((where, config) not in search for config in by_config):
            continue
        searched = {c: min(search[(where, c)]) for c in by_config}  # the least median, with its spread
        again = {c: statistics.median(v) for c, v in by_config.items()}
        search_winner = min(searched, key=searched.get)
        retime_winner = min(again, key=again.get)
        shapes.append({"kernel": where[0], "shape": json.loads(where[1]), "dtype": where[2], "variant": where[3],
                       "changed": search_winner != retime_winner, "gain": again[search_winner] / again[retime_winner],
                       "finalists": [{"config": json.loads(c), "search_us": searched[c][0], "search_spread": searched[c][1],
                                      "retimed_us": by_config[c], "retime_wall_s": retime_wall[where][c]}
                                     for c in sorted(by_config, key=searched.get)]})
    return {"store": str(path), "kernels": sorted(kernels), "shapes": shapes,
            "search_wall_s": wall["template"], "finalist_wall_s": wall["finalist"]}


def with_margin(shapes: list[dict], margin: float) -> dict:
    """What re-timing only the finalists that contend (runner.contends at `margin`) would have done at
    these shapes: the re-timing time it keeps, and where its pick differs from the full re-timing's."""
    from astra_kernels.tools.search.runner import contends

    kept = whole = 0.0
    differ = []
    for shape in shapes:
        finalists = shape["finalists"]  # the recorded ones: the fastest few, in search order
        best = finalists[0]
        again = [statistics.median(f["retimed_us"]) for f in finalists]
        whole += sum(f["retime_wall_s"] for f in finalists)
        chosen = [0]
        for i, f in enumerate(finalists[1:], 1):  # as the tuner takes them: the fastest, up to the first that does not contend
            if not contends(best["search_us"], best["search_spread"], f["search_us"], margin):
                break
            chosen.append(i)
        if len(chosen) > 1:
            kept += sum(finalists[i]["retime_wall_s"] for i in chosen)
        pick = min(chosen, key=lambda i: again[i]) if len(chosen) > 1 else 0
        full = min(range(len(finalists)), key=lambda i: again[i])
        if pick != full:
            differ.append(again[pick] / again[full])
    return {"margin": margin, "kept_wall_s": kept, "whole_wall_s": whole, "differ": differ}


def quantiles(values: list[float], at=(0.05, 0.5, 0.95)) -> list[float]:
    ordered = sorted(values)
    return [ordered[round(q * (len(ordered) - 1))] for q in at] if ordered else []


def line(report: dict) -> str:
    shapes = report["shapes"]
    total = report["search_wall_s"] + report["finalist_wall_s"]
    share = report["finalist_wall_s"] / total if total else 0.0
    head = (f"{report['store']} ({', '.join(report['kernels'])}): re-timing {report['finalist_wall_s']:.0f} s of "
            f"{total:.0f} s of template evaluations ({share:.0%})")
    if not shapes:
        return head + "; no shape's re-timing finished"
    changed = [s["gain"] for s in shapes if s["changed"]]
    deviation = [f["search_us"] / statistics.median(f["retimed_us"]) - 1 for s in shapes for f in s["finalists"]]
    low, mid, high = quantiles(deviation)
    gains = (f"gain where it changed: geomean {math.exp(sum(map(math.log, changed)) / len(changed)):.4f}x, "
             f"largest {max(changed):.4f}x, above 1% at {sum(g > 1.01 for g in changed)}") if changed else "no change"
    text = (f"{head}; {len(shapes)} shapes re-timed whole, the winner changed at {len(changed)} ({gains}); "
            f"search over re-timed time, 5/50/95%: {low:+.2%} {mid:+.2%} {high:+.2%}")
    if "margin" in report:
        m = report["margin"]
        worst = f", worst {max(m['differ']):.4f}x" if m["differ"] else ""
        text += (f"; at margin {m['margin']:.1%}: {m['kept_wall_s']:.0f} of {m['whole_wall_s']:.0f} s of these "
                 f"shapes' re-timing kept, the pick differs from the full re-timing's at {len(m['differ'])}{worst}")
    return text


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output, not with a traceback
    from astra_kernels.tools.errors import AstraError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="+", type=Path, help="results stores (.sqlite) or shipped recordings (.sqlite.gz)")
    parser.add_argument("--json", type=Path, help="also write each store's shapes as JSON")
    parser.add_argument("--margin", type=float, help="also say what re-timing only the finalists within this "
                        "fraction of the best (or its spread) would have kept and changed (runner.contends; the "
                        "tuner's: 0.02)")
    args = parser.parse_args()
    if args.margin is not None and not 0 <= args.margin < 1:
        print(f"retime_effect: --margin {args.margin}: a fraction from 0 to 1 (0.02 is 2%)", file=sys.stderr)
        return 2
    reports = []
    try:
        for path in args.stores:
            reports.append(effect(path))
            if args.margin is not None:
                reports[-1]["margin"] = with_margin(reports[-1]["shapes"], args.margin)
            print(line(reports[-1]))
    except (AstraError, OSError, ValueError) as exc:  # a missing or foreign file: one line
        print(f"retime_effect: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
