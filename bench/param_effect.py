"""What each value of a template parameter did at each shape, read from a results store.

    python bench/param_effect.py STORE PARAM [PARAM ...] [--device SUBSTRING] [--json OUT]

STORE is a results store (`.sqlite`, or `.sqlite.gz` as recordings ship). For every shape of its
kernel: the baseline's time, the fastest template configuration measured, and for each value of
each named parameter the fastest measured with that value and how many were measured. A search
measures a sample of the space, so a value measured a few times says little against it: the count
stands beside every figure for that reason. docs/performance.md entries 12 and 13 cite this.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.output import print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels import suite
from astra_kernels.tools.measuring.replay import unpacked_copy
from astra_kernels.tools.measuring.results import ResultsStore


def effects(store_path: Path, params: list[str], device: str = "") -> list[dict]:
    """Per shape (fewest tokens first): baseline_us, best_us, and per parameter value (best_us, count)."""
    with ResultsStore(unpacked_copy(store_path), read_only=True) as store:
        rows = [r for r in store.rows(status="ok") if device in r["device"] and r["median_us"] is not None]
    shapes: dict[str, dict] = {}
    for row in rows:
        label = json.dumps(row["shape"], sort_keys=True)
        entry = shapes.setdefault(label, {"kernel": row["kernel"], "shape": row["shape"], "device": row["device"],
                                          "baseline_us": None, "best_us": None,
                                          "values": {p: {} for p in params}})
        us = row["median_us"]
        if row["which"] == "baseline":
            entry["baseline_us"] = us if entry["baseline_us"] is None else min(us, entry["baseline_us"])
            continue
        entry["best_us"] = us if entry["best_us"] is None else min(us, entry["best_us"])
        for p in params:
            if p in row["config"]:
                best, count = entry["values"][p].get(row["config"][p], (None, 0))
                entry["values"][p][row["config"][p]] = (us if best is None else min(us, best), count + 1)
    return sorted(shapes.values(), key=lambda e: tuple(e["shape"].values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("params", nargs="+", help="template parameters, e.g. FLAT STREAM")
    parser.add_argument("--device", default="", help="only rows of a GPU whose name contains this")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    found = effects(args.store, args.params, args.device)
    if not found:
        print(f"no measurement in {args.store}" + (f" on a GPU named like {args.device!r}" if args.device else ""))
        return 1
    spec = suite.load(found[0]["kernel"]).spec
    table = Table(title=f"{found[0]['kernel']} in {args.store} ({', '.join(sorted({e['device'] for e in found}))})")
    for column in ("shape", "baseline us", "best us", *(f"{p}={v}: best us (n)" for p in args.params
                                                        for v in sorted({v for e in found for v in e["values"][p]}))):
        table.add_column(column)
    for e in found:
        cells = []
        for p in args.params:
            for v in sorted({v for x in found for v in x["values"][p]}):
                best, count = e["values"][p].get(v, (None, 0))
                cells.append(f"{best:.2f} ({count})" if best is not None else "—")
        table.add_row(spec.label(e["shape"]), f"{e['baseline_us']:.2f}" if e["baseline_us"] else "—",
                      f"{e['best_us']:.2f}" if e["best_us"] else "—", *cells)
    print_table(table)
    if args.json:
        args.json.write_text(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
