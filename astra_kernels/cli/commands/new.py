"""`astra new NAME [--from FILE.cu] [--dir DIR]`: a kernel folder of your own to fill in (jobs/new_kernel.py)."""

from __future__ import annotations

import os
from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    command = sub.add_parser(
        "new", help="write a kernel folder of your own to fill in, from a .cu file or a skeleton",
        description="Writes DIR/NAME with spec.py, reference.py, baseline.cu and template.cu, every file commented. "
                    "Given --from FILE.cu, its kernel's signature fills the spec's arguments and the file becomes "
                    "baseline.cu and template.cu. Lines marked ASTRA-TODO are left to you: `astra check NAME` lists "
                    "them until none is left, then checks the kernel against your reference.")
    command.add_argument("name", metavar="NAME", help="the kernel's name (a Python identifier)")
    command.add_argument("--from", dest="source", metavar="FILE.cu", help="a CUDA file with an extern \"C\" __global__ kernel")
    command.add_argument("--dir", metavar="DIR",
                         help="where the folder goes (default: the first --kernels-dir, else the first directory of "
                              "ASTRA_KERNELS_PATH, else the current one)")
    command.set_defaults(run=run)


def run(args) -> int:
    from astra_kernels.jobs import new_kernel
    from astra_kernels import suite

    path_dirs = [d for d in os.environ.get(suite.KERNELS_PATH, "").split(os.pathsep) if d.strip()]
    dest = Path(args.dir or (path_dirs[0] if path_dirs else ".")).expanduser()
    folder = new_kernel.new_kernel(args.name, dest, Path(args.source).expanduser() if args.source else None)
    todo = new_kernel.unfinished(folder)
    searched = any(Path(d).expanduser().resolve() == dest.resolve() for d in path_dirs)
    console.print(f"wrote {escape(str(folder))}: {', '.join(new_kernel.FILES)}; {len(todo)} lines marked "
                  f"{new_kernel.TODO} to fill in:", highlight=False)
    for line in todo:
        console.print(f"  {escape(line)}", highlight=False)
    console.print(f"then: astra check{'' if searched else ' --kernels-dir ' + escape(str(dest))} {args.name}",
                  highlight=False)
    return 0
