"""What a tune writes and prints: the kernel's files, dispatch table, report (JSON and Markdown)
and charts, from a TuneReport (jobs/tuning.py runs the tune; this only renders what it found).
`astra tune` and `astra verify` write them; the agent's tuner node reads the report instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from . import charts as plots
from . import checking
from .generated_files import fill, md_code, md_text
from .tuning import ShapeResult, TuneReport
from astra_kernels.tools.search.runner import SearchOutcome, measured
from astra_kernels import suite


def write_outputs(folder: suite.KernelFolder, report: TuneReport, out: Path) -> list[Path]:
    """The kernel source and shared header, parameters, dispatch table, report and charts."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "kernel.cu", out / "common.cuh", out / "best.json", out / "dispatch.json",
               out / "report.json", out / "report.md", out / "speedup.svg", out / "convergence.svg",
               out / "launcher.py"]
    shutil.copyfile(folder.path / "template.cu", written[0])
    shutil.copyfile(suite.SUITE_DIR / suite.COMMON_HEADER, written[1])
    best = {s.label: {"config": s.search.best_config, "median_us": s.search.best_us,
                      "baseline_us": s.baseline_us, "speedup": s.speedup} for s in report.shapes}
    written[2].write_text(json.dumps({"general": report.general, "per_shape": best}, indent=2))
    written[3].write_text(report.dispatch.model_dump_json(indent=2) if report.dispatch else "{}")
    written[4].write_text(report.model_dump_json(indent=2))
    written[5].write_text(render_markdown(report))
    written[6].write_text(plots.bar_chart(
        [s.label for s in report.shapes], [s.speedup for s in report.shapes],
        title=f"{report.kernel}: best configuration over the baseline, per shape ({report.device})",
        ylabel="speedup (x)", reference=1.0))
    written[7].write_text(plots.line_chart(
        {s.label: convergence(s.search) for s in report.shapes if s.search.best_us},
        title=f"{report.kernel}: best time so far over the shape's final best",
        ylabel=f"best so far / final best (clipped at {CLIP:g})", xlabel="evaluations"))
    written[8].write_text(fill("tuned_launcher.py.in", kernel=report.kernel, device=report.device, date=report.date))
    return written


CLIP = 2.0  # the convergence chart's ceiling: a first guess 10x off would flatten every other line


def convergence(outcome: SearchOutcome) -> list[tuple[float, float]]:
    """(evaluations so far, best time so far over the final best, at most CLIP) after each trial."""
    points, best = [], None
    for i, trial in enumerate(outcome.trials, start=1):
        if trial.median_us is not None and (best is None or trial.median_us < best):
            best = trial.median_us
        if best is not None and outcome.best_us:
            points.append((float(i), min(CLIP, best / outcome.best_us)))
    return points


def searched_line(kernel: str, shape: ShapeResult) -> str:
    """The line `astra tune` prints, piped or logged, as a shape's search ends."""
    outcome = shape.search
    return (f"{kernel} {shape.label}: measured {_measured(outcome)} of {shape.space_candidates} configurations "
            f"({outcome.stopped_by}), best {_fmt(outcome.best_us)} us, baseline {_fmt(shape.baseline_us)} us")


def _measured(outcome: SearchOutcome) -> int:
    return measured(outcome.trials)


def _fmt(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if value else "—"


def _measured_on(report: TuneReport) -> str:
    """The heading's words for where the times come from: a replay measured nothing today."""
    return "replayed from a recording of" if report.replayed_from else "tuned on"


def _when(report: TuneReport) -> str:
    """When the times were measured: a replay's recording's date, not the day it was replayed."""
    return (report.recorded or "recording date unknown") if report.replayed_from else report.date


def render_markdown(report: TuneReport) -> str:
    lines = [
        f"# {report.kernel}: {_measured_on(report)} {md_text(report.device)} ({md_text(report.arch)}), {md_text(_when(report))}",
        "",
        f"dtype {md_text(report.dtype)}, variant {md_text(report.variant)}, strategy {md_text(report.strategy)}. Times are "
        + ("CUDA-graph replay medians over rotating inputs (cold L2), after the correctness checks." if report.l2 == "cold"
           else "CUDA-graph replay medians over one input set resident in L2 (warm L2), after the correctness checks."),
        "",
    ]
    if report.replayed_from:
        lines += [f"Replayed from the results store {md_code(report.replayed_from)}: every time below was measured "
                  f"on the {md_text(report.device)} of that recording; candidates it holds no measurement of are "
                  "left out of the counts, never estimated.", ""]
    lines += [
        "| shape | space | after constraints | compiles | fits hardware | strategy | evaluated (stopped by) | baseline us | search best us | speedup | dispatched us (from) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report.shapes:
        lines.append(
            f"| {s.label} | {s.space_total} | {s.space_after_constraints} | {s.space_after_compile} | "
            f"{s.space_candidates} | {s.search.strategy} | {_measured(s.search)} ({s.search.stopped_by}) | "
            f"{_fmt(s.baseline_us)} | {_fmt(s.search.best_us)} | {_fmt(s.speedup, 3)} | "
            f"{_fmt(s.dispatch_us)} ({s.dispatch_from or '—'}) |")
    geo = report.geomean_speedup()
    lines += ["", f"Geometric-mean speedup over the baseline: {geo:.3f}" if geo else "No speedup measured.", ""]
    if spent := report.time_spent():
        lines += [md_text(spent), ""]
    lines += ["![speedup per shape](speedup.svg)", "", "![convergence](convergence.svg)", ""]
    if report.general:
        lines += [f"General configuration: `{report.general}`", ""]
    if report.general_cut:
        lines += [f"Note: {report.general_cut}.", ""]
    if report.kept_entries:
        lines += [f"The table also keeps {report.kept_entries} entries of the table it was tuned onto (--onto), at "
                  "shapes not tuned here.", ""]
    lines += ["## Best configuration per shape", ""]
    for s in report.shapes:
        lines.append(f"- {s.label}: `{s.search.best_config}`"
                     + (f" ({md_text(s.search.retime_note)})" if s.search.retime_note else ""))
    lines += ["", "## What the planner did between rounds", ""]
    for s in report.shapes:
        for r in s.search.rounds:
            why = "; ".join(r.reasons) or "the whole pruned space"
            head = "start (" if r.action == "start" else f"round {r.index + 1} ({r.action}, "
            lines.append(f"- {s.label} {head}{r.pool} candidates, {r.evaluated} evaluated, "
                         f"best {_fmt(r.best_us)} us): {why}")
    lines += ["", "## Why configurations were pruned", ""]
    for s in report.shapes:
        reasons = "; ".join(f"{r} ({n})" for r, n in s.pruned_reasons) or "none"
        lines.append(f"- {s.label}: {reasons}")
    if report.verified:
        failed = len(report.verification_failures)
        lines += ["", "## The dispatch table at every verified shape", "",
                  f"{len(report.verified) - failed} of {len(report.verified)} shapes correct.", "",
                  "| shape | picked by | configuration | status | baseline us | dispatched us | speedup |",
                  "|---|---|---|---|---|---|---|"]
        for v in report.verified:
            lines.append(f"| {v.label} | {v.picked_by} | `{v.config}` | {v.status} | {_fmt(v.baseline_us)} | "
                         f"{_fmt(v.median_us)} | {_fmt(v.speedup, 3)} |")
    if report.config_checks:
        counts: dict[str, int] = {}
        for row in report.config_checks:
            counts[row.status] = counts.get(row.status, 0) + 1
        failures = report.config_check_failures
        lines += ["", "## The table's configurations away from the tuned shapes", "",
                  f"Each configuration the table can run ({len({(r.which, tuple(r.config.items())) for r in report.config_checks})}) "
                  f"checked, not timed, at {len({r.shape for r in report.config_checks})} shapes in "
                  f"{len({(r.dtype, r.variant) for r in report.config_checks})} dtype and variant pairs: "
                  + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + "."]
        if failures:
            lines += ["", "These failed: the template's constraints admit them where they compute wrong (add a "
                      "`//@ require` line that excludes them there, or fix the kernel), so this table must not ship:", ""]
            lines += [f"- {md_text(checking.describe(r))}" for r in failures[:20]]
            if len(failures) > 20:
                lines.append(f"- and {len(failures) - 20} more (report.json's config_checks)")
    return "\n".join(lines) + "\n"
