"""`astra doctor`: say what this machine can do: compile (NVRTC, headers) and launch (driver, GPU)."""

from __future__ import annotations

import json

from rich.table import Table

from astra_kernels import __version__
from astra_kernels.cli.output import print_table


def add_parser(sub) -> None:
    doctor = sub.add_parser("doctor", help="what this machine can do: compiler, headers, GPU")
    doctor.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(run=run)


def run(args) -> int:
    """Say what this machine can do: compile (NVRTC, headers) and launch (driver, GPU)."""
    from astra_kernels.tools.errors import AstraError
    from astra_kernels.tools.toolchain import device, driver, headers, nvrtc

    report: dict[str, object] = {"astra-kernels": __version__}
    ok = True
    try:
        report["nvrtc"] = nvrtc.nvrtc_version()
        report["nvrtc archs"] = ", ".join(f"sm_{a}" for a in nvrtc.supported_archs())
        report["cuda headers"] = str(headers.cuda_include_dir())
    except AstraError as exc:
        report["compile"] = f"unavailable: {exc}"
        ok = False
    arch = driver.local_arch(args.gpu)
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
        # headers the terminal view hides; a piped table is Markdown, which needs them
        table.add_column("what")
        table.add_column("this machine")
        for key, value in report.items():
            table.add_row(f"[bold]{key}", str(value))
        print_table(table)
    return 0 if ok else 1
