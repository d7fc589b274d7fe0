"""`astra compile`: compile a .cu file with NVRTC and print each kernel's registers, spills and shared memory."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from astra_kernels.cli.output import console, print_table
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH


def add_parser(sub) -> None:
    comp = sub.add_parser("compile", help="compile a .cu file with NVRTC and show its resources")
    comp.add_argument("source", help="path to a CUDA C++ file")
    comp.add_argument("--kernel", help="report only this extern \"C\" kernel")
    comp.add_argument("--arch", help=f"target, e.g. sm_90 (default: the local GPU's, else {DEFAULT_ARCH})")
    comp.add_argument("-I", "--include", action="append", default=[], metavar="DIR",
                      help="a folder to find #include \"...\" files in, after the source's own folder "
                           "(the suite's common.cuh is always found)")
    comp.add_argument("-D", "--define", action="append", type=_parse_define, metavar="NAME=VALUE")
    comp.add_argument("--fast-math", action="store_true")
    comp.add_argument("--max-registers", type=int)
    comp.add_argument("--no-cache", action="store_true", help="compile even if cached")
    comp.add_argument("--json", action="store_true")
    comp.set_defaults(run=run)


def _parse_define(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-D {text!r}: expected NAME or NAME=VALUE")
    return name, value if sep else "1"


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def local_headers(source: str, folders: list[Path]) -> dict[str, str]:
    """Every `#include "name"` the source reaches, found in `folders` (first match wins), by name
    and text: NVRTC is given the text rather than a search path, so a header's text is part of
    the compile cache's key and an edited header is never answered from the cache. Names found
    nowhere are left to NVRTC, which then names them in its error."""
    from astra_kernels import suite

    found, todo = {}, _INCLUDE.findall(source)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = next((folder / name for folder in folders if (folder / name).is_file()), None)
        if path is not None:
            found[name] = path.read_text()
        elif name in suite.headers():
            found[name] = suite.headers()[name]
        else:
            continue
        todo += _INCLUDE.findall(found[name])
    return found


def run(args) -> int:
    """Compile a .cu file with NVRTC and print each kernel's registers, spills and shared memory."""
    from astra_kernels.tools.errors import CompileError
    from astra_kernels.tools.toolchain.compiler import compile_source
    from astra_kernels.tools.toolchain.nvrtc import CompileOptions

    path = Path(args.source)
    if not path.is_file():
        console.print(f"[red]error:[/red] {path} is a folder; give a .cu file in it" if path.is_dir()
                      else f"[red]error:[/red] no such file: {path}", highlight=False)
        return 2
    try:
        source = path.read_text()
        headers = local_headers(source, [path.parent, *map(Path, args.include)])
    except (UnicodeDecodeError, OSError) as exc:
        console.print(f"[red]error:[/red] {path} (or a header it includes) cannot be read as CUDA source: {exc}",
                      highlight=False)
        return 2
    options = CompileOptions(
        arch=args.arch, fast_math=args.fast_math, max_registers=args.max_registers,
        defines=dict(args.define or []), headers=headers,
    )
    try:
        module = compile_source(source, options, name=path.name, cache=not args.no_cache)
    except CompileError as exc:
        console.print(f"[red]{path}: {escape(str(exc))}", highlight=False)
        if "//@ " in source:  # a template: its //@ lines define what the loader passes as -D
            console.print(f"{path.name} is a template (its //@ lines derive the values above per shape): "
                          "`astra space KERNEL --shape S` and `astra check KERNEL` compile it with them, "
                          "or pass each with -D NAME=VALUE", highlight=False)
        return 1
    kernels = [module.kernel(args.kernel)] if args.kernel else list(module.kernels.values())
    if args.json:
        print(json.dumps({
            "arch": module.arch, "nvrtc": module.nvrtc_version, "cached": module.cached,
            "compile_seconds": module.compile_seconds,
            "kernels": {k.name: k.resources.model_dump() for k in kernels},
        }, indent=2))
        return 0
    table = Table(title=f"{path.name} for {module.arch} (NVRTC {module.nvrtc_version}, "
                        f"{'cached' if module.cached else f'{module.compile_seconds * 1000:.0f} ms'})")
    for column in ("kernel", "params", "registers", "spill st/ld B", "smem B", "stack B"):
        table.add_column(column)
    for k in kernels:
        r = k.resources
        table.add_row(k.name, str(len(k.params)), str(r.registers),
                      f"{r.spill_store_bytes}/{r.spill_load_bytes}", str(r.shared_bytes),
                      str(r.stack_frame_bytes))
    print_table(table)
    return 0
