"""`astra space`: show a template's space at one shape shrinking: constraints, compile, hardware limits."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from astra_kernels.cli.arguments import count, positive_int
from astra_kernels.cli.output import print_table, progress_bar
from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH


def add_parser(sub) -> None:
    space = sub.add_parser("space", help="a template's search space at one shape, pruned stage by stage")
    space.add_argument("kernel")
    space.add_argument("--shape", "--shapes", dest="shape", required=True, action=_OneShape,
                       help="one shape, e.g. 16x4096 (given once: the space is one shape's)")
    space.add_argument("--dtype")
    space.add_argument("--variant", default="default")
    space.add_argument("--arch", help=f"target (default: the local GPU's, else {DEFAULT_ARCH})")
    space.add_argument("--sample", type=positive_int, help="a seeded sample of this many configurations (default: all)")
    space.add_argument("--seed", type=int, default=0)
    space.add_argument("--max-spill-bytes", type=count, default=0)
    space.add_argument("--gpu", type=count, default=0)
    space.add_argument("--json", action="store_true")
    space.set_defaults(run=run)


class _OneShape(argparse.Action):
    """--shape (or --shapes) once: `--shape A --shapes B` kept B alone and showed B's space as if
    A's had been asked for too; the space is one shape's, so a second is refused, not dropped."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            raise argparse.ArgumentError(self, f"takes one shape, given {getattr(namespace, self.dest)!r} and "
                                               f"{values!r}: run `astra space` once per shape")
        setattr(namespace, self.dest, values)


def run(args) -> int:
    """Show a template's space at one shape shrinking: constraints, compile, hardware limits."""
    from astra_kernels import suite
    from astra_kernels.tools.search.hardware import limits_for
    from astra_kernels.tools.search.space import build_space
    from astra_kernels.tools.toolchain.device import Device
    from astra_kernels.tools.toolchain.driver import local_arch

    folder = suite.load(args.kernel)
    spec = folder.spec
    shape = spec.parse_shape(args.shape)
    dtype = args.dtype or spec.default_dtype()
    suite.check_run(folder, [shape], dtype, args.variant)
    arch = args.arch or local_arch(args.gpu) or DEFAULT_ARCH
    sms = optin = None
    if args.arch is None and local_arch(args.gpu):
        props = Device(args.gpu).properties
        sms, optin = props.multiprocessors, props.max_shared_per_block_optin
    limits = limits_for(arch, sms, optin)
    env = suite.environment(spec, shape, dtype, args.variant, limits.multiprocessors, arch)
    configs = folder.template.sample_configs(args.sample, args.seed) if args.sample else None
    with progress_bar(f"{spec.name} {args.shape}: compiling the configurations for {arch}") as update:
        report = build_space(folder.template, env, suite.base_options(dtype, spec.variants[args.variant], arch),
                             limits, configs=configs, max_spill_bytes=args.max_spill_bytes,
                             progress=lambda done, total: update(done=done, total=total))
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    title = f"{spec.name} {args.shape} {dtype} {args.variant} on {arch}: {report.total} -> {report.after_hardware} configurations"
    table = Table(title=title)
    for column in ("stage", "left", "why configurations were cut (count)"):
        table.add_column(column)
    table.add_row("space", str(report.total), "")
    for stage, left in (("constraint", report.after_constraints), ("compile", report.after_compile),
                        ("hardware", report.after_hardware)):
        reasons = "\n".join(f"{escape(r)} ({n})" for r, n in report.reasons(stage)[:4])
        table.add_row(stage, str(left), reasons)
    print_table(table)
    return 0
