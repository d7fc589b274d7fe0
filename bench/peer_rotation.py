"""torch.compile's time at each shape under the peers' harness as it is (every launch's outputs
rotating with its input set, as the worker's arena rotates ours) and as it was until 2026-11-26
(the first `count` launches' outputs kept, every later launch writing the block the launch before
it had just written), one after the other in one process.

    python bench/peer_rotation.py [--kernels silu_and_mul,rmsnorm] [--set astra,serving] [--repeats 2] [--json OUT.json]

The two differ only at shapes with fewer input sets than launches (a cold rotation of fewer than
20 sets: sets of 13.5 MiB or more), and matter where the outputs then fit in L2; those shapes are
the default, up to 256 MiB a set. Each shape is timed `--repeats` times under each harness, in
the order rotating, earlier, earlier, rotating, ... (so neither always goes first), and a
difference counts only beyond the largest spread of those timings. What it measures: how much
the earlier harness flattered a peer against the tuned kernel, whose outputs were always cold
(docs/performance.md entry 19). Exact for peers that allocate only their outputs (torch.compile's
fused kernels); an eager peer's temporaries may take the released blocks instead.
"""

from __future__ import annotations

import argparse
import json
import statistics
from contextlib import contextmanager
from pathlib import Path

from rich.table import Table

from astra_kernels.cli.output import console, print_table
from astra_kernels.jobs import torch_peers
from astra_kernels import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.toolchain.timing import rotation_count

MOST_SET_BYTES = 256 << 20
LAUNCHES = 20  # _check_and_time's fewest launches a replay


class _FirstSetsKept(torch_peers.RotatingCalls):
    """The earlier harness: the first `count` calls' outputs (the warm-up's among them) kept, every
    later call's dropped as it returned, so the allocator gave the next call that same block."""

    def __init__(self, *args):
        super().__init__(*args)
        self.kept: list[object] = []

    def __call__(self, i: int) -> object:
        outputs = self.forward(self.sets[i % len(self.sets)], self.scalars, self.variant)
        if len(self.kept) < len(self.sets):
            self.kept.append(outputs)
        return outputs

    def release(self) -> None:
        super().release()
        self.kept = []


@contextmanager
def _earlier_harness():
    saved = torch_peers.RotatingCalls
    torch_peers.RotatingCalls = _FirstSetsKept
    try:
        yield
    finally:
        torch_peers.RotatingCalls = saved


def shapes(kernels: list[str], sets: list[str]) -> list[tuple[str, dict[str, int]]]:
    todo = []
    for kernel in kernels:
        folder = suite.load(kernel)
        for set_name in sets:
            if set_name not in folder.spec.shapes:
                raise AstraError(f"{kernel} has no shape set {set_name!r} (it has {', '.join(folder.spec.shapes)})")
            for shape in folder.spec.shapes[set_name]:
                set_bytes = suite.problem(folder, shape, "bf16").set_bytes
                if rotation_count(set_bytes) < LAUNCHES and set_bytes <= MOST_SET_BYTES \
                        and (kernel, shape) not in todo:
                    todo.append((kernel, shape))
    return todo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="silu_and_mul,rmsnorm,fused_add_rmsnorm,merge_attn_states")
    parser.add_argument("--set", default="astra,serving")
    parser.add_argument("--repeats", type=int, default=2, help="timings a harness a shape (default 2)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    try:
        if args.repeats < 1:
            raise AstraError(f"--repeats must be 1 or more, not {args.repeats}")
        todo = shapes(args.kernels.split(","), args.set.split(","))
        if args.json:
            try:  # refused now, not after the first shape's GPU work
                Path(args.json).write_text("{}")
            except OSError as exc:
                raise AstraError(f"--json {args.json}: cannot write there ({exc.strerror})") from None
    except AstraError as exc:  # bad input: one line naming it (suite.load's error names the kernel)
        console.print(f"error: {exc}", highlight=False)
        return 2
    if not todo:
        console.print(f"no shape of {args.kernels} in {args.set} has 2-19 input sets of at most 256 MiB: "
                      "the two harnesses time them alike", highlight=False)
        return 0
    if torch_peers.torch_cuda() is None:
        console.print("error: PyTorch with CUDA is not installed here; this bench times torch.compile on a GPU",
                      highlight=False)
        return 2
    import torch

    rows = []
    for kernel, shape in todo:
        row = {"kernel": kernel, "shape": shape, "rotating": [], "earlier": []}
        order = [name for _ in range(args.repeats) for name in ("rotating", "earlier")]
        order = [name if i % 4 < 2 else ("earlier" if name == "rotating" else "rotating")
                 for i, name in enumerate(order)]  # ABBA...: neither harness always first
        for name in order:
            if name == "rotating":
                result = torch_peers.measure_peer(None, kernel, shape, "bf16")
            else:
                with _earlier_harness():
                    result = torch_peers.measure_peer(None, kernel, shape, "bf16")
            if result.status != "ok":
                row[f"{name}_message"] = f"{result.status}: {result.message}"
            else:
                row[name].append({"us": result.median_us, "spread": result.timing.spread})
        for name in ("rotating", "earlier"):
            row[f"{name}_us"] = statistics.median([t["us"] for t in row[name]]) if row[name] else None
        timings = row["rotating"] + row["earlier"]
        row["spread"] = max((t["spread"] for t in timings), default=None)
        row["beyond_spread"] = bool(row["rotating_us"] and row["earlier_us"]) and \
            abs(1 - row["earlier_us"] / row["rotating_us"]) > row["spread"]
        row["sets"] = rotation_count(suite.problem(suite.load(kernel), shape, "bf16").set_bytes)
        rows.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), "l2": "cold",
                                                   "torch_version": torch.__version__, "repeats": args.repeats,
                                                   "rows": rows}, indent=2))
    table = Table(title=f"torch.compile in the peers' harness, {torch.cuda.get_device_name()}, L2 cold "
                        "(us, graph-replay medians)")
    for column in ("kernel", "shape", "sets", "outputs rotating", "first sets' kept (earlier)",
                   "earlier over rotating", "largest spread", "beyond it"):
        table.add_column(column)
    for r in rows:
        ratio = f"{r['earlier_us'] / r['rotating_us']:.3f}" if r["rotating_us"] and r["earlier_us"] else "-"
        table.add_row(r["kernel"], "x".join(map(str, r["shape"].values())), str(r["sets"]),
                      f"{r['rotating_us']:.3f}" if r["rotating_us"] else r.get("rotating_message", "-"),
                      f"{r['earlier_us']:.3f}" if r["earlier_us"] else r.get("earlier_message", "-"), ratio,
                      f"{r['spread']:.1%}" if r["spread"] is not None else "-", "yes" if r["beyond_spread"] else "no")
    print_table(table)
    beyond = [r for r in rows if r["beyond_spread"] and r["earlier_us"] < r["rotating_us"]]
    console.print(f"the earlier harness had the peer faster beyond the spread at {len(beyond)} of {len(rows)} shapes "
                  f"(medians of {args.repeats} timings a harness)", highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
