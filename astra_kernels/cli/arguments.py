"""Arguments several commands share, read the same way by each: the shapes a run takes, and the
numbers no command can take below zero. A value the command cannot take is a UsageError (or
argparse's own error for a number), so the command exits 2 with one line naming it."""

from __future__ import annotations

import argparse
import sys

from astra_kernels.tools.errors import UsageError


def shapes_from(folder, args, tuning: bool = False) -> list[dict] | None:
    """--shapes (comma-separated, e.g. 16x4096,64x8192), else --set NAME[,NAME...] (the sets' shapes
    in order, each once; `sweep` is the token axis at the serving widths and, unless `tuning`, the
    held-out widths too: KernelSpec.sweep_shapes), else None (the command's default)."""
    if args.shapes is not None:
        return folder.spec.parse_shapes(args.shapes)
    if args.set:
        shapes: list[dict] = []
        for name in (n.strip() for n in args.set.split(",")):
            try:
                shapes += [s for s in folder.spec.shape_set(name, tuning) if s not in shapes]
            except KeyError as exc:
                raise UsageError(exc.args[0]) from None
        return shapes
    return None


def _number(kind: type, smallest: float, words: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {words}") from None
        if not value >= smallest:  # also refuses nan
            raise argparse.ArgumentTypeError(f"{text!r} is not {words}")
        return value

    parse.__name__ = words  # what argparse names in its message
    return parse


positive_int = _number(int, 1, "a positive integer")
count = _number(int, 0, "a whole number of zero or more")
positive_seconds = _number(float, 1e-9, "a positive number of seconds")
positive_factor = _number(float, 1e-9, "a positive number")


def add_measuring_arguments(parser) -> None:
    """Where a command that measures gets its answers: `--replay STORE` or the GPU `--gpu N`,
    and its `--store`; spelled once for tune and optimize."""
    parser.add_argument("--store", help="results store (default OUT/results.sqlite)")
    parser.add_argument("--replay", metavar="STORE",
                        help="no GPU: answer every evaluation from this recorded results store (.sqlite or "
                             ".sqlite.gz, or `recorded` for the one shipped with the package for each kernel), "
                             "refusing what it lacks; copied to the run's store first")
    parser.add_argument("--gpu", type=count, default=0, help="the GPU to measure on (default 0)")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: the usage block argparse prints first hides the line that
    says what is wrong; `--help` still shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def _get_formatter(self):
        """Help at the terminal's width; piped or logged, each paragraph on whole lines."""
        if sys.stdout.isatty():
            return super()._get_formatter()
        return self.formatter_class(prog=self.prog, width=10_000)
