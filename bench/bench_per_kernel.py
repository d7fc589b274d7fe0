"""Each kernel's figures in recorded `astra bench` runs: how many shapes are not slower than the
fastest peer (the bench's own test, beyond both timing spreads), and the geometric means of each
peer's time over the tuned kernel's, one row per run and kernel (docs/benchmarks.md's per-kernel
tables). No GPU: it reads the runs' bench.json.

    python bench/bench_per_kernel.py docs/bench/h100-2026-11-26b/*/bench.json
    python bench/bench_per_kernel.py --by-set docs/bench/h100-2026-11-27/*-norms/bench.json   # a row per shape set
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.commands.bench import _read_report
from astra_kernels.cli.output import console, print_table
from astra_kernels.jobs.benchmark import _geomean
from astra_kernels import suite
from astra_kernels.tools.errors import AstraError


def over(rows, peer: str) -> str:
    """The geometric mean of `peer`'s time over the tuned kernel's, and over how many shapes where
    the peer was not timed at all of them."""
    ratios = [getattr(r, f"{peer}_us") / r.tuned_us for r in rows if getattr(r, f"{peer}_us")]
    if not ratios:
        return "—"
    return f"{_geomean(ratios):.3f}x" + (f" ({len(ratios)} shapes)" if len(ratios) < len(rows) else "")


def _grouped(kernel: str, rows: list, by_set: bool) -> list[tuple[tuple[str, ...], list]]:
    """`rows` as one group, or (by_set) one per shape set of the kernel's spec that holds any of them."""
    if not rows:
        return []
    if not by_set:
        return [((), rows)]
    spec = suite.load(kernel).spec
    groups = []
    for name, shapes in spec.shapes.items():
        labels = {spec.label(s) for s in shapes}
        members = [r for r in rows if r.label in labels]
        if members:
            groups.append(((name,), members))
    return groups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="BENCH_JSON")
    parser.add_argument("--by-set", action="store_true",
                        help="a row per kernel and shape set of its spec (astra, serving, ...): a run of several sets split "
                             "back into them, a shape in two sets counted in both")
    args = parser.parse_args()
    try:
        reports = [(path, _read_report(Path(path))) for path in args.runs]
    except AstraError as exc:  # a file that is not there or not a bench.json: one line naming it
        console.print(f"error: {str(exc).removeprefix('--from ')}", highlight=False)
        return 2
    table = Table(title="per kernel: the tuned kernel against each peer (geometric means of the peer's time over ours)")
    for column in ("run", "L2", "kernel", *(("set",) if args.by_set else ()), "shapes", "not slower than the fastest peer", "over the fastest peer",
                   "over torch.compile", "over SGLang's JIT kernel", "over the port"):
        table.add_column(column)
    for path, report in reports:
        for kernel in dict.fromkeys(r.kernel for r in report.rows):
            measured = [r for r in report.rows if r.kernel == kernel and r.tuned_us and r.speedup_over_best_peer]
            for shape_set, rows in _grouped(kernel, measured, args.by_set):
                behind = sum(r.slower_than_best_peer for r in rows)
                table.add_row(path, report.l2, kernel, *shape_set, str(len(rows)), f"{len(rows) - behind} of {len(rows)}",
                              f"{_geomean([r.speedup_over_best_peer for r in rows]):.3f}x", over(rows, "torch_compile"),
                              over(rows, "sglang_jit"), over(rows, "baseline"))
    print_table(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
