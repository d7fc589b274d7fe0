"""The `astra` command line: one module per command under commands/ (its parser and its run), and
this small main that builds the parser from them and turns every project error into one line."""

from __future__ import annotations

import argparse
import sys

from astra_kernels import __version__
from astra_kernels.cli.commands import (
    bench, check, doctor, export, kernels, optimize, report, space, tune, verify,
)
from astra_kernels.cli.commands import compile as compile_command
from astra_kernels.cli.output import console

# In the order `astra --help` lists them: what the machine can do, the suite, then the jobs.
COMMANDS = (doctor, compile_command, kernels, check, space, tune, optimize, bench, verify, export, report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="astra",
        description="astra-kernels: make SGLang's CUDA kernels faster, with every number measured.",
    )
    parser.add_argument("--version", action="version", version=f"astra-kernels {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from astra_kernels.tools.errors import AstraError

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    try:
        return args.run(args)
    except AstraError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1

