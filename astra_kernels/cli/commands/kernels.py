"""`astra kernels`: list the suite: what each kernel computes, its dtypes, variants, shape sets and template space."""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table

from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    kernels = sub.add_parser("kernels", help="list the SGLang kernel suite with its shapes")
    kernels.add_argument("--json", action="store_true")
    kernels.set_defaults(run=run)


def run(args) -> int:
    """List the suite: what each kernel computes, its dtypes, variants, shape sets and template space."""
    from astra_kernels.kernels_sglang import suite

    folders = [suite.load(name) for name in suite.names()]
    if args.json:
        print(json.dumps([{
            "name": f.name, "summary": f.spec.summary, "dtypes": f.spec.dtypes,
            "variants": list(f.spec.variants), "template_space": f.template.size(),
            "shapes": {k: [f.spec.label(s) for s in v] for k, v in f.spec.shapes.items()},
        } for f in folders], indent=2))
        return 0
    table = Table(title=f"The SGLang kernel suite ({len(folders)} kernels)", show_lines=True)
    for column in ("kernel", "computes", "dtypes / variants", "shapes", "template space"):
        table.add_column(column)
    for f in folders:
        shapes = "\n".join(
            f"{k} ({len(v)}): {', '.join(f.spec.label(s) for s in v[:3])}{', ...' if len(v) > 3 else ''}"
            for k, v in f.spec.shapes.items()
        )
        table.add_row(f.name, escape(f.spec.summary), f"{', '.join(f.spec.dtypes)}\n{', '.join(f.spec.variants)}",
                      shapes, f"{f.template.size()} configs, {len(f.template.parameters)} params")
    console.print(table)
    return 0
