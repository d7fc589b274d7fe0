"""Where issue 42's sweep stands for the shipped tables, from benchmark reports.

At every sweep point: whether a benchmark row ran the configuration the shipped table picks there
today, and what those rows say.

    python3 -P bench/sweep_status.py BENCH.json [BENCH.json ...] [--json OUT.json]

A sweep's benchmark takes several calls, and a table may be re-tuned between them, so a row counts
for the shipped table only where the configuration it timed is the one the table picks at that
shape now (jobs/benchmark.tuned_column, as `astra bench --resume` compares its kept rows: the table's
pick on the report's architecture at DEFAULT_SMS multiprocessors, which both lent kinds have; the
baseline's is the empty configuration).
The words of a row's "picked by" are not compared: they have been reworded since some rows were
measured. A table entry of another template source than the kernel's own would not be told apart
by its configuration, so such a pick never counts (no shipped table has one). A template whose text
changed while its configurations kept their names would pass this check: docs/tuning.md says a
template change re-records its kernel's search, so its table's picks change with it as a rule, not
by necessity. Of several rows of one shape, the newest that ran today's pick is read (a "before"
run measured after its "after" one leaves the after rows standing).

Every kernel with a shipped table for the reports' GPU kind and regime is listed, per width: the
sweep's points, those with a row of today's pick, those with rows of another pick only (stale),
those where today's pick did not time (its row failed, or today's table excludes the shape), those
with no row, and among the current rows how many are behind the fastest peer by more than the
larger of 2% and the spread (jobs/benchmark.SWEEP_MARGIN), their geometric mean over it and the
worst. No GPU needed.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from pathlib import Path


def status(paths: list[Path]) -> list[dict]:
    from pydantic import ValidationError

    from astra_kernels import suite
    from astra_kernels.jobs.benchmark import EXCLUDED, SWEEP_MARGIN, BenchReport, shipped_table, tuned_column
    from astra_kernels.suite import tuned_tables

    reports = []
    for path in paths:
        try:
            reports.append(BenchReport.model_validate_json(path.read_text()))
        except (ValidationError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not the bench.json of `astra bench --out` ({str(exc).splitlines()[0]})") from None
    measured: dict[tuple, list] = {}  # (device, l2, kernel, label, dtype) -> [(row, report)], newest first
    for report in sorted(reports, key=lambda r: r.date, reverse=True):
        for row in report.rows:
            measured.setdefault((report.device, report.l2, row.kernel, row.label, row.dtype), []).append((row, report))
    for rows in measured.values():  # a resumed report's rows span calls: each row's own time where it has one
        rows.sort(key=lambda found: found[0].measured or found[1].date, reverse=True)
    widths = []
    for device, l2 in dict.fromkeys((r.device, r.l2) for r in reports):
        kind = tuned_tables.device_key(device)
        shipped = tuned_tables.shipped_kernels(kind.lower(), l2) if kind else []
        if not shipped:
            print(f"sweep_status: no table is shipped for {device} tuned with {l2} L2: its rows are not read",
                  file=sys.stderr)
        for kernel in shipped:
            table = shipped_table(kernel, device, l2)
            spec = suite.load(kernel).spec
            groups: dict[str, list[dict]] = {}
            for shape in spec.sweep_shapes():
                width = "x".join(str(shape[s]) for s in spec.symbols[1:])
                rows = measured.get((device, l2, kernel, spec.label(shape), table.dtype), [])
                point = {"tokens": shape[spec.symbols[0]], "state": "stale" if rows else "missing"}
                today = tuned_column(table, shape, suite.DEFAULT_SMS, rows[0][1].arch) if rows else None
                ours = [row for row, _ in rows if row.tuned_column == today]  # rows of today's pick, newest first
                row = next((r for r in ours if r.tuned_status == "ok"), None)
                if ours and row is None:  # today's pick did not time: it failed, or today's table excludes the shape
                    point["state"] = "excluded" if today == EXCLUDED else "failed"
                if row is not None:
                    point["state"] = "current"
                    if row.speedup_over_best_peer is not None:
                        point.update(over_peer=row.speedup_over_best_peer, peer=row.best_peer[0],
                                     behind=row.slower_than_best_peer_by(SWEEP_MARGIN))
                groups.setdefault(width, []).append(point)
            for width, points in groups.items():
                timed = [p for p in points if "over_peer" in p]
                worst = min(timed, key=lambda p: p["over_peer"]) if timed else None
                widths.append({
                    "device": device, "l2": l2, "kernel": kernel, "width": width, "points": len(points),
                    "current": sum(p["state"] == "current" for p in points),
                    "stale": [p["tokens"] for p in points if p["state"] == "stale"],
                    "not_timed": [p["tokens"] for p in points if p["state"] in ("failed", "excluded")],
                    "missing": [p["tokens"] for p in points if p["state"] == "missing"],
                    "behind": [p["tokens"] for p in timed if p["behind"]],
                    "geomean_over_peer": math.exp(sum(math.log(p["over_peer"]) for p in timed) / len(timed)) if timed else None,
                    "worst": worst and {"tokens": worst["tokens"], "over_peer": worst["over_peer"], "peer": worst["peer"]},
                })
    return widths


def counts(tokens: list[int]) -> str:
    return f"{len(tokens)} ({', '.join(map(str, tokens))})" if 0 < len(tokens) <= 6 else str(len(tokens))


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output, not with a traceback
    from astra_kernels.tools.errors import AstraError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="bench.json files of `astra bench --out`")
    parser.add_argument("--json", type=Path, help="also write the widths' rows as JSON")
    args = parser.parse_args()
    try:
        widths = status(args.reports)
    except (AstraError, OSError, ValueError) as exc:  # a missing or foreign file: one line
        print(f"sweep_status: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if not widths:
        print("sweep_status: none of these reports is of a GPU kind and L2 regime with shipped tables", file=sys.stderr)
        return 2
    print("| GPU, L2 | kernel | width | points | rows of today's picks | another pick | today's pick, not timed | "
          "no row | behind | geomean over the fastest peer | worst |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for w in widths:
        worst = f"{w['worst']['tokens']} tokens {w['worst']['over_peer']:.3f}x ({w['worst']['peer']})" if w["worst"] else "—"
        mean = f"{w['geomean_over_peer']:.3f}x" if w["geomean_over_peer"] else "—"
        print(f"| {w['device']}, {w['l2']} | {w['kernel']} | {w['width']} | {w['points']} | {w['current']} | "
              f"{counts(w['stale'])} | {counts(w['not_timed'])} | {counts(w['missing'])} | {counts(w['behind'])} | "
              f"{mean} | {worst} |")
    if args.json:
        args.json.write_text(json.dumps(widths, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
