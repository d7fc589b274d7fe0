"""The `astra` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import __version__

console = Console()


def _parse_define(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-D {text!r}: expected NAME or NAME=VALUE")
    return name, value if sep else "1"


def cmd_doctor(args) -> int:
    """Say what this machine can do: compile (NVRTC, headers) and launch (driver, GPU)."""
    from astra_kernels.tools import compiler, device, headers
    from astra_kernels.tools.errors import AstraError

    report: dict[str, object] = {"astra-kernels": __version__}
    ok = True
    try:
        report["nvrtc"] = compiler.nvrtc_version()
        report["nvrtc archs"] = ", ".join(f"sm_{a}" for a in compiler.supported_archs())
        report["cuda headers"] = str(headers.cuda_include_dir())
    except AstraError as exc:
        report["compile"] = f"unavailable: {exc}"
        ok = False
    arch = device.local_arch(args.gpu)
    if arch is None:
        report["gpu"] = "none: compiling and CPU tests work here; launching, checking and timing need a GPU"
    else:
        gpu = device.Device(args.gpu)
        props = gpu.properties
        report["gpu"] = f"{props.name} ({props.arch}, {props.multiprocessors} SMs, {props.memory_bytes / 2**30:.0f} GiB)"
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        table = Table(show_header=False, box=None)
        for key, value in report.items():
            table.add_row(f"[bold]{key}", str(value))
        console.print(table)
    return 0 if ok else 1


def cmd_compile(args) -> int:
    """Compile a .cu file with NVRTC and print each kernel's registers, spills and shared memory."""
    from astra_kernels.tools import CompileOptions, compile_source
    from astra_kernels.tools.errors import CompileError

    path = Path(args.source)
    if not path.is_file():
        console.print(f"[red]no such file: {path}")
        return 2
    options = CompileOptions(
        arch=args.arch, fast_math=args.fast_math, max_registers=args.max_registers,
        defines=dict(args.define or []),
    )
    try:
        module = compile_source(path.read_text(), options, name=path.name, cache=not args.no_cache)
    except CompileError as exc:
        console.print(f"[red]{path}: {exc}", highlight=False)
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
    console.print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="astra",
        description="astra-kernels: make SGLang's CUDA kernels faster, with every number measured.",
    )
    parser.add_argument("--version", action="version", version=f"astra-kernels {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="what this machine can do: compiler, headers, GPU")
    doctor.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)

    comp = sub.add_parser("compile", help="compile a .cu file with NVRTC and show its resources")
    comp.add_argument("source", help="path to a CUDA C++ file")
    comp.add_argument("--kernel", help="report only this extern \"C\" kernel")
    comp.add_argument("--arch", help="target, e.g. sm_90 (default: the local GPU's, else sm_90)")
    comp.add_argument("-D", "--define", action="append", type=_parse_define, metavar="NAME=VALUE")
    comp.add_argument("--fast-math", action="store_true")
    comp.add_argument("--max-registers", type=int)
    comp.add_argument("--no-cache", action="store_true", help="compile even if cached")
    comp.add_argument("--json", action="store_true")
    comp.set_defaults(func=cmd_compile)
    return parser


def main(argv: list[str] | None = None) -> int:
    from astra_kernels.tools.errors import AstraError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AstraError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
