"""How fast can this GPU copy? The driver's memcpy against the copy probe kernel, by size.

    python bench/copy_ceiling.py [--json out.json]

The project's floor for every memory-bound kernel is bytes moved over copy bandwidth, so the
ceiling must be the best copy this device does (tools/toolchain/ceiling.py takes the better of the two at
1 GiB); this table shows how each varies with size and launch shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from rich.table import Table

from astra_kernels.cli.output import console, print_table  # one console: whole lines and Markdown tables when piped
from astra_kernels.tools.toolchain.ceiling import copy_bandwidth, kernel_copy_bandwidth, memcpy_bandwidth
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
    console.print(f"ceiling used for floors (tools/toolchain/ceiling.py): {ceiling / 1e9:.0f} GB/s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": device.properties.name, "ceiling": ceiling, "rows": rows,
                       "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
