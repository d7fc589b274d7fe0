"""`astra report`: markdown, a self-contained HTML page and SVG charts from a results store; measures nothing."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    report = sub.add_parser("report", help="markdown and HTML with charts from a results store (no GPU needed)")
    report.add_argument("store", help="a results store (.sqlite or .sqlite.gz), the --out folder of `astra tune` "
                                      "(its results.sqlite), or `recorded` / `recorded:SESSION` with --kernel "
                                      "(a recording shipped with the package)")
    report.add_argument("--kernel", help="report only this kernel (needed with `recorded`)")
    report.add_argument("--out", default="out/report",
                        help="write report.md, report.html, report.json and the SVG charts here (default out/report)")
    report.add_argument("--json", action="store_true", help="print the summary as JSON instead of the markdown")
    report.set_defaults(run=run)


def run(args) -> int:
    """Markdown, a self-contained HTML page and SVG charts from a results store; measures nothing."""
    from astra_kernels.jobs import reporting
    from astra_kernels.tools.errors import AstraError

    try:
        rendered = reporting.report(args.store, kernel=args.kernel, out=Path(args.out))
    except (AstraError, OSError) as exc:  # a missing, foreign or empty store; an unwritable --out
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return 2
    if args.json:
        print(rendered.summary.model_dump_json(
            indent=2, exclude={"groups": {"__all__": {"shapes": {"__all__": {"convergence"}}}}}))
    else:
        console.print(rendered.markdown, markup=False, highlight=False)
        console.print(f"wrote {', '.join(str(p) for p in rendered.written)}", highlight=False)
    return 0
