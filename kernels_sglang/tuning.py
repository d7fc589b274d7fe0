"""`astra tune`: the two-stage tuner's second stage over a kernel's shapes.

Per shape: the template's space is pruned (constraints, compile, hardware limits), the baseline
is measured, and a strategy searches the survivors within a budget, every evaluation going
through the results store. Then the per-shape winners are measured at every shape, and the one
with the best geometric mean becomes the general configuration; the winners form the dispatch
table. The output folder gets the kernel source, the parameters, the table and a report.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from astra_kernels.tools.hardware import limits_for
from astra_kernels.tools.runner import Budget, SearchOutcome, StoredEvaluator, Trial, search
from astra_kernels.tools.space import build_space
from astra_kernels.tools.strategies import make_strategy
from astra_kernels.tools.template import Exclusion

from . import suite
from .dispatch import DispatchEntry, DispatchTable


class ShapeResult(BaseModel):
    shape: dict[str, int]
    label: str
    space_total: int
    space_after_constraints: int
    space_after_compile: int
    space_candidates: int
    pruned_reasons: list[tuple[str, int]]
    baseline_us: float | None
    baseline_status: str
    search: SearchOutcome

    @property
    def speedup(self) -> float | None:
        if self.baseline_us and self.search.best_us:
            return self.baseline_us / self.search.best_us
        return None


class TuneReport(BaseModel):
    kernel: str
    dtype: str
    variant: str
    strategy: str
    device: str
    arch: str
    date: str
    shapes: list[ShapeResult] = Field(default_factory=list)
    general: dict[str, int] | None = None
    general_us: dict[str, float] = Field(default_factory=dict)
    dispatch: DispatchTable | None = None

    def geomean_speedup(self) -> float | None:
        speedups = [s.speedup for s in self.shapes if s.speedup]
        return math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None


def tune(folder: suite.KernelFolder, worker, evaluator: StoredEvaluator, *, shapes: list[dict[str, int]],
         dtype: str, variant: str = "default", strategy: str = "exhaustive", budget: Budget | None = None,
         seed: int = 0, max_spill_bytes: int = 0, sample: int | None = None,
         progress: Callable[[str, Trial | None], None] | None = None) -> TuneReport:
    """Tune `folder`'s template at each shape on the worker's GPU; see the module docstring."""
    spec = folder.spec
    arch = worker.device["arch"]
    sms = worker.device.get("multiprocessors")
    limits = limits_for(arch, sms, worker.device.get("max_shared_per_block_optin"))
    base = suite.base_options(dtype, spec.variants[variant], arch)
    report = TuneReport(kernel=spec.name, dtype=dtype, variant=variant, strategy=strategy,
                        device=worker.device["name"], arch=arch,
                        date=datetime.now(UTC).isoformat(timespec="seconds"))

    def labels(which: str, shape: dict[str, int]):
        return lambda config: dict(kernel=spec.name, which=which, config=config, shape=shape,
                                   dtype=dtype, variant=variant)

    def request(which: str, shape: dict[str, int], config: dict[str, int] | None = None):
        req = suite.request(folder, which, shape, dtype, variant, config, sms=limits.multiprocessors, arch=arch)
        if not isinstance(req, Exclusion):
            req.stream_timing = False  # the search ranks by graph replay; a Python loop adds ~13 us a launch
        return req

    for shape in shapes:
        label = spec.label(shape)
        env = suite.environment(spec, shape, dtype, variant, limits.multiprocessors)
        configs = folder.template.sample_configs(sample, seed) if sample else None
        space = build_space(folder.template, env, base, limits, configs=configs, max_spill_bytes=max_spill_bytes)
        if progress:
            progress(f"{label}: {space.total} -> {space.after_hardware} configurations", None)
        baseline, _ = evaluator(request("baseline", shape), **labels("baseline", shape)({}))
        outcome = search(
            make_strategy(strategy, [c.config for c in space.candidates], seed),
            lambda config, shape=shape: request("template", shape, config),
            evaluator, budget or Budget(), labels=labels("template", shape),
            progress=(lambda trial, label=label: progress(label, trial)) if progress else None,
        )
        report.shapes.append(ShapeResult(
            shape=shape, label=label, space_total=space.total,
            space_after_constraints=space.after_constraints, space_after_compile=space.after_compile,
            space_candidates=space.after_hardware, pruned_reasons=space.reasons()[:8],
            baseline_us=baseline.timing.median_us if baseline.status == "ok" and baseline.timing else None,
            baseline_status=baseline.status, search=outcome,
        ))

    winners = [s.search.best_config for s in report.shapes if s.search.best_config]
    report.general, report.general_us = _general(winners, report.shapes, request, evaluator, labels)
    report.dispatch = DispatchTable(
        kernel=spec.name, dtype=dtype, variant=variant, general=report.general,
        entries=[DispatchEntry(shape=s.shape, config=s.search.best_config, median_us=s.search.best_us)
                 for s in report.shapes if s.search.best_config],
    )
    return report


def _general(winners, shapes, request, evaluator, labels):
    """The per-shape winner with the best geometric mean over every shape it can run at all of."""
    best, best_times, best_score = None, {}, math.inf
    unique = {tuple(sorted(c.items())): c for c in winners}.values()
    for config in unique:
        times = {}
        for s in shapes:
            req = request("template", s.shape, config)
            if isinstance(req, Exclusion):
                break
            result, _ = evaluator(req, **labels("template", s.shape)(config))
            if result.status != "ok" or result.timing is None:
                break
            times[s.label] = result.timing.median_us
        else:
            score = sum(math.log(t) for t in times.values()) / max(1, len(times))
            if score < best_score:
                best, best_times, best_score = config, times, score
    return best, best_times


def write_outputs(folder: suite.KernelFolder, report: TuneReport, out: Path) -> list[Path]:
    """The kernel source and shared header, parameters, dispatch table, and the report."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "kernel.cu", out / "common.cuh", out / "best.json", out / "dispatch.json",
               out / "report.json", out / "report.md"]
    shutil.copyfile(folder.path / "template.cu", written[0])
    shutil.copyfile(suite.SUITE_DIR / suite.COMMON_HEADER, written[1])
    best = {s.label: {"config": s.search.best_config, "median_us": s.search.best_us,
                      "baseline_us": s.baseline_us, "speedup": s.speedup} for s in report.shapes}
    written[2].write_text(json.dumps({"general": report.general, "per_shape": best}, indent=2))
    written[3].write_text(report.dispatch.model_dump_json(indent=2) if report.dispatch else "{}")
    written[4].write_text(report.model_dump_json(indent=2))
    written[5].write_text(render_markdown(report))
    return written


def render_markdown(report: TuneReport) -> str:
    lines = [
        f"# {report.kernel}: tuned on {report.device} ({report.arch}), {report.date}",
        "",
        f"dtype {report.dtype}, variant {report.variant}, strategy {report.strategy}. Times are "
        "CUDA-graph replay medians over rotating inputs (cold L2), after the correctness checks.",
        "",
        "| shape | space | after constraints | compiles | fits hardware | evaluated | baseline us | best us | speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report.shapes:
        fmt = (lambda v: f"{v:.2f}" if v else "—")
        lines.append(
            f"| {s.label} | {s.space_total} | {s.space_after_constraints} | {s.space_after_compile} | "
            f"{s.space_candidates} | {len(s.search.trials)} ({s.search.stopped_by}) | {fmt(s.baseline_us)} | "
            f"{fmt(s.search.best_us)} | {fmt(s.speedup)} |")
    geo = report.geomean_speedup()
    lines += ["", f"Geometric-mean speedup over the baseline: {geo:.3f}" if geo else "No speedup measured.", ""]
    if report.general:
        lines += [f"General configuration: `{report.general}`", ""]
    lines += ["## Best configuration per shape", ""]
    for s in report.shapes:
        lines.append(f"- {s.label}: `{s.search.best_config}`")
    lines += ["", "## Why configurations were pruned", ""]
    for s in report.shapes:
        reasons = "; ".join(f"{r} ({n})" for r, n in s.pruned_reasons) or "none"
        lines.append(f"- {s.label}: {reasons}")
    return "\n".join(lines) + "\n"
