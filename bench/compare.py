"""How long the correctness check's comparison takes on the host, in one pass and in pieces.

    python bench/compare.py [--sizes 16M,64M] [--json out.json]

Every candidate of a search is compared with the float64 reference on the host, twice (two
seeds) per output, so at large shapes this, not the GPU, sets how many configurations a search
measures. A bf16 output rounded from its reference is compared the way the evaluation does it
(tools/measuring/correctness.py): as one piece (the whole-array passes it used before 2026-11-24) and in the
pieces it uses now, on as many threads as the machine has cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime

import ml_dtypes
import numpy as np
from rich.table import Table

from astra_kernels.cli.output import print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels.tools.measuring import correctness
from astra_kernels.tools.measuring.problem import DEFAULT_TOLERANCES


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
    return int(text.rstrip("KMG")) * scale


def _seconds(out: np.ndarray, ref: np.ndarray, piece: int) -> float:
    saved = correctness._PIECE
    correctness._PIECE = piece
    try:
        started = time.perf_counter()
        verdict = correctness.compare("y", out, ref, DEFAULT_TOLERANCES["bf16"])
        elapsed = time.perf_counter() - started
    finally:
        correctness._PIECE = saved
    if not verdict.passed:
        raise SystemExit(f"the rounded reference failed its own check: {verdict.detail}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="16M,64M", help="elements per output, comma-separated (K, M, G suffixes)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    rows = []
    for elements in map(_size, args.sizes.split(",")):
        ref = np.random.default_rng(0).standard_normal(elements)
        out = ref.astype(ml_dtypes.bfloat16)
        whole = _seconds(out, ref, max(elements, 1))
        pieces = _seconds(out, ref, correctness._PIECE)
        rows.append({"elements": elements, "one_pass_s": whole, "pieces_s": pieces, "speedup": whole / pieces})
    table = Table(title=f"compare, bf16 output against its float64 reference ({os.cpu_count()} CPU cores)")
    for column in ("elements", "one pass s", "pieces s", "speedup"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(f"{r['elements']:,}", f"{r['one_pass_s']:.2f}", f"{r['pieces_s']:.2f}", f"{r['speedup']:.1f}x")
    print_table(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.machine(),
                       "cpu_cores": os.cpu_count(), "piece_elements": correctness._PIECE, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
