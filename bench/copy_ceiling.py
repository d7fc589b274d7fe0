"""How fast can this GPU copy, and stream other read/write mixes? The driver's memcpy against the
copy probe kernel, by size; then the mix probe at each ratio the suite's kernels have.

    python bench/copy_ceiling.py [--json out.json]

The copy floor of a memory-bound kernel is bytes moved over copy bandwidth, so that ceiling must
be the best copy this device does (tools/toolchain/ceiling.py takes the better of the two at 1 GiB);
the first table shows how each varies with size and launch shape. The physical floor is bytes
moved over the bandwidth of the kernel's own mix (READS vectors read per WRITES written); the
second table gives each mix's bandwidth at 1 GiB and its ratio to the copy's.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from rich.table import Table

from astra_kernels.cli.output import console, print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels import suite
from astra_kernels.tools.toolchain.ceiling import (
    copy_bandwidth, kernel_copy_bandwidth, memcpy_bandwidth, mix_bandwidth, mix_ratio,
)
from astra_kernels.tools.toolchain.device import Device

SHAPES = ((4, 256), (8, 512), (4, 1024), (16, 256))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    device = Device(0)
    rows = []
    for size in (256 << 20, 1 << 30, 2 << 30, 4 << 30):
        row = {"bytes": size, "memcpy": memcpy_bandwidth(device, size)}
        for per_sm, threads in SHAPES:
            row[f"kernel {per_sm}x{threads}"] = kernel_copy_bandwidth(device, size, per_sm, threads)
        rows.append(row)
    ceiling = copy_bandwidth(device)
    table = Table(title=f"copy bandwidth on {device.properties.name}, GB/s (bytes read + written); "
                        f"kernel BxT = B blocks per SM of T threads")
    for col in rows[0]:
        table.add_column(col)
    for row in rows:
        table.add_row(f"{row['bytes'] >> 20} MiB", *(f"{v / 1e9:.0f}" for k, v in row.items() if k != "bytes"))
    print_table(table)
    console.print(f"ceiling used for copy floors (tools/toolchain/ceiling.py): {ceiling / 1e9:.0f} GB/s")
    mixes = {}  # READS:WRITES -> the kernels whose first spec shape has that mix
    for name in suite.names():
        folder = suite.load(name)
        problem = suite.problem(folder, folder.spec.all_shapes()[0], folder.spec.dtypes[0])
        mixes.setdefault(mix_ratio(problem.read_bytes, problem.write_bytes), []).append(name)
    table = Table(title=f"streaming bandwidth of each kernel's read:write mix on {device.properties.name}, 1 GiB")
    for col in ("mix", "kernels", "GB/s", "of copy"):
        table.add_column(col)
    measured = []
    for (reads, writes), names in sorted(mixes.items()):
        bandwidth = mix_bandwidth(device, reads, writes)
        measured.append({"reads": reads, "writes": writes, "kernels": names, "bandwidth": bandwidth})
        table.add_row(f"{reads}:{writes}", ", ".join(names), f"{bandwidth / 1e9:.0f}", f"{bandwidth / ceiling:.3f}")
    print_table(table)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": device.properties.name, "ceiling": ceiling, "rows": rows, "mixes": measured,
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
