"""A re-tuned table's picks against the table it replaced, both timed in the re-tune's own store.

    python3 -P bench/pick_gain.py KERNEL OLD.json [--new NEW.json] [--replay recorded|recorded:SESSION|STORE]
                                  [--json OUT.json]

A re-tune started from the old table (`astra tune --start`) measures the old pick at every shape in
its own run, beside its search, on the same GPU: one store, one kind of machine. A run cut and resumed
spans calls (each a fresh machine), so a shape's two times may come from two calls of it (docs/tuning.md
takes a table's minima the same way). Only rows of the kernel's current template and baseline (their
source hashes) on the store's one GPU are read. OLD.json is
the replaced table (`git show REV:kernels_sglang/tuned/h200/KERNEL.json > OLD.json`), NEW.json the
new one (default: the table shipped for the store's GPU kind, cold L2), the store the re-tune's
(default: the kernel's newest shipped recording). A parameter the template gained since OLD.json
was made is taken at its default (template.point), as --start takes it. Prints, per width (the
shape without its token count, the spec's first symbol), the geometric mean of old over new and of the baseline over new,
and the first and last token counts. The new pick's time is the least of its measurements
(search and finalist rows), as the table records it: a gain of 1-2% is within that choice's noise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import signal
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output, not with a traceback
    from astra_kernels.tools.errors import AstraError

    try:
        return gain()
    except (AstraError, OSError, ValueError, sqlite3.Error) as exc:  # a bad file or name: one line
        print(f"pick_gain: {exc}".splitlines()[0], file=sys.stderr)
        return 2


def gain() -> int:
    from astra_kernels import suite
    from astra_kernels.jobs.benchmark import load_table, shipped_table
    from astra_kernels.suite import recordings
    from astra_kernels.tools.measuring.replay import unpacked_copy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("old", type=Path)
    parser.add_argument("--new", type=Path)
    parser.add_argument("--replay", default="recorded")
    parser.add_argument("--json", type=Path, help="also write the widths' rows, each shape's times included")
    args = parser.parse_args()
    folder = suite.load(args.kernel)
    store = unpacked_copy(recordings.resolve(args.replay, args.kernel))
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        devices = [d for (d,) in db.execute("SELECT DISTINCT device FROM results WHERE kernel = ?", (args.kernel,))]
    except sqlite3.Error as exc:
        raise ValueError(f"{store}: not a results store ({exc})") from None
    if len(devices) != 1:
        print(f"pick_gain: the store holds {args.kernel} on {len(devices)} GPUs ({', '.join(devices) or 'none'}); "
              "give a store of one", file=sys.stderr)
        return 2
    def table_at(path: Path):
        try:
            return load_table(path)
        except ValueError as exc:  # pydantic's, for a JSON file that is not a table
            raise ValueError(f"{path}: not a dispatch table ({str(exc).splitlines()[0]})") from None

    old = table_at(args.old)
    new = table_at(args.new) if args.new else shipped_table(args.kernel, devices[0])
    if new is None:
        print(f"pick_gain: no {args.kernel} table is shipped for {devices[0]}; give --new", file=sys.stderr)
        return 2
    for table, name in ((old, "OLD"), (new, "--new")):
        if (table.kernel, table.dtype, table.variant) != (args.kernel, new.dtype, new.variant):
            print(f"pick_gain: {name} is a {table.kernel} {table.dtype} {table.variant} table, not {args.kernel} "
                  f"{new.dtype} {new.variant}", file=sys.stderr)
            return 2
    current = {hashlib.sha256(folder.source_of(w).code.encode()).hexdigest() for w in ("template", "baseline")}
    times: dict[tuple, list[tuple[str, dict, float]]] = defaultdict(list)
    for which, config, shape, us, source in db.execute(
            "SELECT which, config, shape, median_us, source_sha256 FROM results WHERE kernel = ? AND dtype = ? "
            "AND variant = ? AND status = 'ok'", (args.kernel, new.dtype, new.variant)):
        if source in current:
            s = json.loads(shape)
            times[tuple(s[k] for k in folder.spec.symbols)].append((which, json.loads(config) if config else {}, us))

    def time_of(key: tuple, source: str, config: dict) -> float | None:
        wanted = ("baseline",) if source == "baseline" else ("template", "finalist")
        found = [us for which, c, us in times.get(key, []) if which in wanted and (source == "baseline" or c == config)]
        return min(found) if found else None

    olds = {tuple(e.shape[k] for k in folder.spec.symbols): e for e in old.entries}
    widths: dict[tuple, list[tuple]] = defaultdict(list)
    skipped = 0
    for entry in new.entries:
        key = tuple(entry.shape[k] for k in folder.spec.symbols)
        before = olds.get(key)
        old_config = None if before is None or before.source == "baseline" else folder.template.point(before.config)
        t_old = None if before is None else time_of(key, before.source, old_config or {})
        t_new = time_of(key, entry.source, entry.config)
        t_base = time_of(key, "baseline", {})
        if None in (t_old, t_new, t_base):
            skipped += 1
            continue
        widths[key[1:]].append((key[0], t_old, t_new, t_base))
    if not widths:
        print("pick_gain: no shape of the new table has the old pick, the new pick and the baseline in the store",
              file=sys.stderr)
        return 1
    print("| width | shapes | old pick / new pick (geomean) | baseline / new pick | first count old -> new us | last count old -> new us |")
    print("|---|---|---|---|---|---|")
    for width, rows in sorted(widths.items()):
        rows.sort()
        mean = lambda i: math.exp(sum(math.log(r[i] / r[2]) for r in rows) / len(rows))  # noqa: E731
        first, last = rows[0], rows[-1]
        print(f"| {'x'.join(map(str, width))} | {len(rows)} | {mean(1):.3f}x | {mean(3):.3f}x | "
              f"{first[0]}: {first[1]:.2f} -> {first[2]:.2f} | {last[0]}: {last[1]:.2f} -> {last[2]:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({
            "kernel": args.kernel, "store": str(store), "device": devices[0], "old": str(args.old),
            "new": str(args.new) if args.new else "shipped", "skipped": skipped,
            "widths": [{"width": "x".join(map(str, width)), "shapes": [
                {"tokens": t, "old_us": o, "new_us": n, "baseline_us": b} for t, o, n, b in rows]}
                for width, rows in sorted(widths.items())]}, indent=1) + "\n")
    if skipped:
        print(f"\n{skipped} shape(s) of the new table left out: the store lacks their old pick, new pick or baseline "
              "(or the old table has no entry there)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
