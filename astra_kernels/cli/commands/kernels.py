"""`astra kernels`: list the suite: what each kernel computes, its dtypes, variants, how its shapes are
written (the symbols, in the order `--shapes` reads them), its shape sets and template space."""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table

from astra_kernels.cli.output import console, print_table


def add_parser(sub) -> None:
    kernels = sub.add_parser("kernels", help="list the SGLang kernel suite with its shapes")
    kernels.add_argument("--json", action="store_true")
    kernels.set_defaults(run=run)


def run(args) -> int:
    """List the suite: what each kernel computes, its dtypes, variants, shape symbols, shape sets and
    template space."""
    from astra_kernels import suite
    from astra_kernels.tools.errors import AstraError

    # One broken folder (a user's own, mid-edit) must not hide the others: each is listed or named.
    folders, broken = [], {}
    for name in suite.names():
        try:
            folders.append(suite.load(name))
        except AstraError as exc:
            broken[name] = str(exc)
    if args.json:
        print(json.dumps([{
            "name": f.name, "summary": f.spec.summary, "dtypes": f.spec.dtypes,
            "variants": list(f.spec.variants), "template_space": f.template.size(),
            "symbols": f.spec.symbols, "shape_format": f.spec.shape_format(), "example_shape": f.spec.example_shape(),
            "shapes": {k: [f.spec.label(s) for s in v] for k, v in f.spec.shapes.items()},
        } for f in folders] + [{"name": name, "error": error} for name, error in broken.items()], indent=2))
        return 1 if broken else 0
    table = Table(title=f"The SGLang kernel suite ({len(folders)} kernels)", show_lines=True)
    for column in ("kernel", "computes", "dtypes / variants", "shape (--shapes)", "shape sets", "template space"):
        # a narrow terminal folds a long name or shape onto the next line instead of cutting it to `sil…`
        table.add_column(column, overflow="fold")
    for f in folders:
        shapes = "\n".join(
            f"{k} ({len(v)}): {', '.join(f.spec.label(s) for s in v[:3])}{', ...' if len(v) > 3 else ''}"
            for k, v in f.spec.shapes.items()
        )
        table.add_row(f.name, escape(f.spec.summary), f"{', '.join(f.spec.dtypes)}\n{', '.join(f.spec.variants)}",
                      f"{f.spec.shape_format()}\ne.g. {f.spec.example_shape()}", shapes,
                      f"{f.template.size()} configs, {len(f.template.parameters)} params")
    print_table(table)
    for name, error in broken.items():
        console.print(f"[red]error:[/red] kernel folder {name} does not load: {escape(error)}", highlight=False)
    return 1 if broken else 0
