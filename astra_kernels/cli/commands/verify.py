"""`astra verify`: run a tuned output folder's dispatch table at every shape of the kernel's sets."""

from __future__ import annotations

from pathlib import Path


from astra_kernels.cli.arguments import count, shapes_from
from astra_kernels.cli.output import console


def add_parser(sub) -> None:
    verify = sub.add_parser("verify", help="run a tuned dispatch table through the correctness checks at every shape")
    verify.add_argument("out", help="the output folder of `astra tune`")
    verify.add_argument("--shapes", help="comma-separated shapes (default: every shape of every set)")
    verify.add_argument("--set", help="a shape set of the kernel's spec, or several comma-separated (the shipped kernels have astra, serving and odd; every kernel has sweep, the token axis at its serving widths)")
    verify.add_argument("--store", help="results store (default OUT/results.sqlite)")
    verify.add_argument("--gpu", type=count, default=0)
    verify.set_defaults(run=run)


def run(args) -> int:
    """Run a tuned output folder's dispatch table at every shape of the kernel's sets."""
    from astra_kernels import suite
    from astra_kernels.jobs import tune_report, tuning
    from astra_kernels.tools.measuring.worker import EvaluationWorker
    from astra_kernels.tools.toolchain.driver import gpu_available
    from astra_kernels.tools.measuring.results import ResultsStore
    from astra_kernels.tools.search.runner import StoredEvaluator

    out = Path(args.out)
    report_path = out / "report.json"
    if not report_path.is_file():
        console.print(f"[red]error:[/red] {report_path} does not exist: verify takes the --out folder of `astra tune`")
        return 2
    report = tuning.TuneReport.model_validate_json(report_path.read_text())
    folder = suite.load(report.kernel)
    shapes = shapes_from(folder, args) or folder.spec.all_shapes()
    if not gpu_available():
        console.print("[yellow]no GPU here:[/yellow] verifying runs the kernel, so it needs an NVIDIA GPU. What runs "
                      f"without one: `astra export {args.out}` (the table as a .cu file and a guide), "
                      f"`astra report {out / 'results.sqlite'}` (what the tuning measured).", highlight=False)
        return 2
    with EvaluationWorker(device_index=args.gpu) as worker, ResultsStore(args.store or out / "results.sqlite") as store:
        if worker.device["name"] != report.device:
            console.print(f"[yellow]note:[/yellow] tuned on {report.device}, verifying on {worker.device['name']}")
        tuning.verify_dispatch(report, folder, worker, StoredEvaluator(worker, store, run_id=f"verify-{report.kernel}"),
                               shapes, progress=lambda label, _: console.print(label, highlight=False))
    tune_report.write_outputs(folder, report, out)
    failures = report.verification_failures
    console.print(f"{len(report.verified) - len(failures)} of {len(report.verified)} shapes correct; "
                  f"report rewritten in {out / 'report.md'}")
    for v in failures:
        console.print(f"[red]{v.label}[/red]: {v.status} {v.message[:200]}", highlight=False)
    return 1 if failures else 0
