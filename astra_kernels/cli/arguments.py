"""Arguments several commands share, read the same way by each: the shapes a run takes, and the
numbers no command can take below zero. A value the command cannot take is a UsageError (or
argparse's own error for a number), so the command exits 2 with one line naming it."""

from __future__ import annotations

import argparse
import sys

from astra_kernels.suite.schema import SWEEP
from astra_kernels.tools.errors import UsageError


def shapes_from(folder, args, tuning: bool = False, several: bool = False) -> list[dict] | None:
    """--shapes (comma-separated, e.g. 16x4096,64x8192), else --set NAME[,NAME...] (the sets' shapes
    in order, each once; `sweep` is the token axis at the serving widths and, unless `tuning`, the
    held-out widths too: KernelSpec.sweep_shapes), else None (the command's default).

    `several`: the run takes several kernels (`astra tune K1 K2 ... --set sweep,astra,serving`), whose
    specs name their sets differently (topk_softmax has no astra set), so each kernel takes the named
    sets it has; one that has none of them is refused, and so is a name no kernel has
    (sets_named_somewhere), so a misspelt set is never skipped in silence."""
    if args.shapes is not None:
        return folder.spec.parse_shapes(args.shapes)
    if args.set:
        names = set_names(args)
        if several:
            names = [n for n in names if has_set(folder, n)]
            if not names:
                raise UsageError(f"{folder.spec.name} has none of the shape sets {args.set!r}; it has "
                                 + ", ".join([*folder.spec.shapes, SWEEP]))
        shapes: list[dict] = []
        for name in names:
            try:
                shapes += [s for s in folder.spec.shape_set(name, tuning) if s not in shapes]
            except KeyError as exc:
                raise UsageError(exc.args[0]) from None
        return shapes
    return None


def set_names(args) -> list[str]:
    """--set's names, in order."""
    return [n.strip() for n in args.set.split(",")]


def has_set(folder, name: str) -> bool:
    return name == SWEEP or name in folder.spec.shapes


def sets_named_somewhere(folders, args) -> None:
    """With several kernels: every name --set gives is a set of at least one of them (UsageError
    naming the first that is not)."""
    if args.shapes is None and args.set:
        for name in set_names(args):
            if not any(has_set(f, name) for f in folders):
                raise UsageError(f"no kernel given has a shape set {name!r} ("
                                 + "; ".join(f"{f.spec.name}: {', '.join([*f.spec.shapes, SWEEP])}" for f in folders)
                                 + ")")


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
