"""The suite benchmark: baseline, tuned kernel, PyTorch eager and torch.compile at every shape,
against the memory floor and the launch floor, on the local GPU.

    python bench/astra_bench.py [--kernels silu_and_mul,...] [--set astra,serving] [--tuned OUT] [--out DIR]

The same as `astra bench` (see `astra bench --help`): it prints the table and issue 5's goals as
measured, and with --out writes bench.json, bench.md and bench.svg.
"""

import sys

from astra_kernels.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
