"""`astra tune`: the two-stage tuner's second stage over a kernel's shapes.

Per shape: the template's space is pruned (constraints, compile, hardware limits), the baseline
is measured, and a strategy searches the survivors within a budget, every evaluation going
through the results store. Then the per-shape winners are measured at every shape, and the one
with the best geometric mean becomes the general configuration. Each shape's dispatch entry is
the fastest of everything measured there (its own search, the other shapes' winners, the
baseline): a large shape whose search had time for few evaluations often runs best with another
shape's winner, and where nothing beat the baseline by more than the timing noise (defaults.TIMING_NOISE) the table keeps
the baseline. jobs/tune_report.py writes what it found: the kernel source, the parameters, the
table, the report and its charts.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from . import checking
from .checking import CheckRow
from astra_kernels.defaults import TIMING_NOISE
from astra_kernels.tools.concurrency import map_in_threads
from astra_kernels.tools.errors import AstraError, WorkerError
from astra_kernels.tools.measuring import draws
from astra_kernels.tools.measuring.evaluation import request_draws
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.search.hardware import limits_for
from astra_kernels.tools.search.rounds import plan_round
from astra_kernels.tools.search.runner import (
    Budget, SearchOutcome, StoredEvaluator, Trial, retime_finalists, search_rounds,
)
from astra_kernels.tools.search.space import build_space
from astra_kernels.tools.templating.expressions import Expression
from astra_kernels.tools.templating.template import Exclusion, Template

from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable


_clock = time.monotonic  # the general phase's deadline; tests replace it


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
    dispatch_us: float | None = None  # what the dispatch table runs here: the best measured at this shape
    dispatch_from: str = ""  # "search", "the winner at SHAPE" or "baseline"

    @property
    def speedup(self) -> float | None:
        if self.baseline_us and self.search.best_us:
            return self.baseline_us / self.search.best_us
        return None


class VerifiedShape(BaseModel):
    """The dispatch table's pick at one shape, run through the full correctness protocol."""

    shape: dict[str, int]
    label: str
    config: dict[str, int]
    picked_by: str
    status: str
    median_us: float | None = None
    baseline_us: float | None = None
    message: str = ""

    @property
    def speedup(self) -> float | None:
        return self.baseline_us / self.median_us if self.baseline_us and self.median_us else None


class TuneReport(BaseModel):
    kernel: str
    dtype: str
    variant: str
    strategy: str
    device: str
    arch: str
    date: str
    replayed_from: str | None = None  # a results store answered instead of a GPU (tools/measuring/replay.py)
    recorded: str | None = None  # a replay's: the date its recording was measured (`date` is the replay's own)
    l2: str = "cold"  # the L2 regime every time was measured in
    shapes: list[ShapeResult] = Field(default_factory=list)
    general: dict[str, int] | None = None
    general_us: dict[str, float] = Field(default_factory=dict)
    general_cut: str | None = None  # why not every winner was measured at every shape
    dispatch: DispatchTable | None = None
    verified: list[VerifiedShape] = Field(default_factory=list)
    # every configuration the table can run, checked (not timed) away from its tuned shapes: at the
    # kernel's odd shapes in each of its dtypes and variants (check_table_configs)
    config_checks: list[CheckRow] = Field(default_factory=list)
    # Wall seconds by phase (TunePhases.NAMES): where a tune's time went (issue 42's goal of a whole
    # sweep in ten minutes). The per-shape phases are summed over the shapes, so shapes tuned side by
    # side (--workers) sum to more than the wall time; "tune" is the wall time of the whole.
    seconds: dict[str, float] = Field(default_factory=dict)
    # tuned onto another table (TuneRequest.onto): how many of its entries, at shapes not tuned here, the table keeps
    kept_entries: int = 0

    def time_spent(self) -> str:
        """One line: the wall seconds by phase; empty for a report from before tunes kept them."""
        if not self.seconds:
            return ""

        def listed(phases) -> str:
            return ", ".join(f"{phase} {self.seconds[phase]:.0f}" for phase in phases if phase in self.seconds)

        return (f"wall seconds by phase: at each shape, summed over them, {listed(TunePhases.PER_SHAPE)}; then "
                f"{listed(TunePhases.AFTER)}" + (f"; the whole tune {self.seconds['tune']:.0f}" if "tune" in self.seconds
                                                 else ""))

    @property
    def config_check_failures(self) -> list[CheckRow]:
        return checking.failures(self.config_checks)

    @property
    def verification_failures(self) -> list[VerifiedShape]:
        """Shapes where the table's pick failed its checks (a cluster's worker lost while checking
        it is no verdict: verification_lost)."""
        return [v for v in self.verified if v.status not in ("ok", "lost")]

    @property
    def verification_lost(self) -> list[VerifiedShape]:
        return [v for v in self.verified if v.status == "lost"]

    @property
    def unmeasured(self) -> dict[str, str]:
        """Shapes at which neither the baseline nor any configuration was measured, each with why
        (a replay that lacks the shape, a kernel whose every build fails): a run that measured
        nothing is no result, however complete its report looks."""
        missing = {}
        for shape in self.shapes:
            if shape.baseline_us is None and shape.search.best_us is None:
                statuses = {shape.baseline_status} | {t.status for t in shape.search.trials}
                missing[shape.label] = ", ".join(sorted(statuses))
        return missing

    def geomean_speedup(self) -> float | None:
        speedups = [s.speedup for s in self.shapes if s.speedup]
        return math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None


class TunePhases:
    """The wall seconds of a tune's phases, added into TuneReport.seconds as each ends, from any
    thread: each shape's baseline, its space (the compiles and the pruning), its search and its
    finalists' re-timing; then the general configuration across the shapes, the table's
    configurations checked away from them, the verification, and the whole tune."""

    PER_SHAPE = ("baseline", "space", "search", "retime")
    AFTER = ("general", "config_checks", "verify")
    NAMES = (*PER_SHAPE, *AFTER, "tune")

    def __init__(self, into: dict[str, float]):
        self.into, self.lock = into, threading.Lock()

    @contextlib.contextmanager
    def timing(self, phase: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            with self.lock:
                self.into[phase] = round(self.into.get(phase, 0.0) + time.perf_counter() - started, 3)


@dataclass(frozen=True)
class TuneRequest:
    """One kernel's tune: every choice that decides its table, made once by whoever asks (the
    CLI, a cluster's run, the agent's tuner node) and run by tune(); how it runs (shapes at once,
    progress, compile deadlines) is tune()'s own arguments.

    `l2` is the regime every configuration is timed in ("cold" or "warm"), which the table records.
    `configs`: the configurations to search instead of the whole space (or `sample` of it, to which
    the start table's pick and the seeds are added where it lacks them: with_starts).
    `start`: a dispatch table (the one shipped for this GPU, say) whose pick at each shape is
    measured before the search there (start_configs), so a re-tune after the template changed
    keeps what the last one found wherever the search does no better. The spec's seeds (the
    production kernel's own configurations: seed_configs) are measured in that first round too,
    with or without `start`. `onto`: a table of the same kernel, dtype, variant, regime and GPU kind
    (the caller checks the kind) whose entries at shapes not tuned here the finished table keeps
    (DispatchTable.onto): a width or a few token counts tuned onto a shipped table. `verify`: shapes the finished table is run and checked at."""

    folder: suite.KernelFolder
    shapes: list[dict[str, int]]
    dtype: str
    variant: str = "default"
    strategy: str = "auto"
    budget: Budget | None = None
    search_rounds: int = 3
    seed: int = 0
    sample: int | None = None
    configs: list[dict[str, int]] | None = None
    max_spill_bytes: int = 0
    l2: str = "cold"
    start: DispatchTable | None = None
    onto: DispatchTable | None = None
    verify: list[dict[str, int]] = field(default_factory=list)


def tune(tune_request: TuneRequest, worker, evaluator: StoredEvaluator, *, parallel: int = 1,
         compile_timeout_s: float | None = None, progress: Callable[[str, Trial | None], None] | None = None,
         compiling: Callable[[str, int, int], None] | None = None,
         searched: Callable[[ShapeResult], None] | None = None) -> TuneReport:
    """Tune the request's template at each shape on the worker's GPU; see the module docstring.
    `parallel`: shapes searched at once, and evaluations of the later phases in flight at once,
    for a worker that runs several (a cluster's GPUs of one kind: tools/cluster/); each shape's
    search is the same sequence of proposals either way, so the report is the same but for times.
    `compile_timeout_s` bounds each configuration's compile while the space is pruned;
    `compiling(label, done, total)` follows those compiles (minutes of them on a small machine);
    `searched(shape_result)` is called as each shape's search ends (a log's line per shape: a
    search takes minutes, and the report comes only at the end)."""
    folder, shapes, dtype, variant = tune_request.folder, tune_request.shapes, tune_request.dtype, tune_request.variant
    strategy, budget, l2, start = tune_request.strategy, tune_request.budget, tune_request.l2, tune_request.start
    spec = folder.spec
    arch = worker.device["arch"]
    sms = worker.device.get("multiprocessors")
    limits = limits_for(arch, sms, worker.device.get("max_shared_per_block_optin"))
    base = suite.base_options(dtype, spec.variants[variant], arch)
    report = TuneReport(kernel=spec.name, dtype=dtype, variant=variant, strategy=strategy, l2=l2,
                        device=worker.device["name"], arch=arch, replayed_from=worker.device.get("replay"),
                        recorded=worker.device.get("recorded"), date=datetime.now(UTC).isoformat(timespec="seconds"))

    requests = _Requests(folder, dtype, variant, limits, l2)
    request, labels = requests.request, requests.labels
    phases, started = TunePhases(report.seconds), time.perf_counter()
    # A replay (a ReplayWorker, a cluster's workers of one kind replaying) says what it can answer:
    # only that is compiled. On GPUs every configuration is.
    answers = getattr(worker, "answers", None) if worker.device.get("replay") else None

    def _answerable(req) -> bool:
        return not isinstance(req, Exclusion) and answers(req)
    # A whole space (hundreds of compiles a shape, enough to fill a cluster's CPUs by itself) is
    # compiled one shape at a time per kernel: with every shape compiling at once, every space was
    # ready only at the end and the GPUs idle till then (20 s on 2026-11-25's two-H100 run); one
    # after another, each search starts after its own compiles. A sample or given configurations
    # (a few compiles, maybe a model's template near its compile timeout) compile side by side.
    compiling_one = threading.Semaphore(1)

    def one_shape(shape: dict[str, int]) -> ShapeResult:
        label = spec.label(shape)
        env = suite.environment(spec, shape, dtype, variant, limits.multiprocessors, arch)
        starts = start_configs(start, folder, shape, sms=limits.multiprocessors, arch=arch) + seed_configs(folder, env)
        sample = tune_request.sample
        chosen_configs = tune_request.configs if tune_request.configs is not None else (
            with_starts(folder.template.sample_configs(sample, tune_request.seed), starts) if sample else None)
        # The baseline first: it needs no space, so with many shapes at once (a cluster's GPUs) the
        # GPUs measure baselines while the CPUs compile the spaces, instead of waiting for them.
        with phases.timing("baseline"):
            baseline, _ = evaluator(request("baseline", shape), **labels("baseline", shape)({}))
        with compiling_one if chosen_configs is None else contextlib.nullcontext(), phases.timing("space"):
            space = build_space(folder.template, env, base, limits, configs=chosen_configs,
                                answerable=(lambda config, shape=shape: _answerable(request("template", shape, config)))
                                if answers else None,
                                max_spill_bytes=tune_request.max_spill_bytes, compile_timeout_s=compile_timeout_s,
                                progress=(lambda done, total, label=label: compiling(label, done, total))
                                if compiling else None)
        if progress:
            progress(f"{label}: {space.total} -> {space.after_hardware} configurations", None)
        chosen = pick_strategy(strategy, len(space.candidates), budget)
        with phases.timing("search"):
            outcome = search_rounds(
                chosen, [c.config for c in space.candidates],
                lambda config, shape=shape: request("template", shape, config),
                evaluator, budget or Budget(), rounds=tune_request.search_rounds, seed=tune_request.seed,
                plan=lambda trials, space=space: plan_round(space.candidates, trials, limits.multiprocessors),
                labels=labels("template", shape),
                progress=(lambda trial, label=label: progress(label, trial)) if progress else None,
                parallel=spread, start=starts,
            )
        # the winner named from a fresh interleaved run of the fastest few, not the search's best
        # median of hundreds (runner.retime_finalists); stored apart as "finalist" rows
        with phases.timing("retime"):
            retime_finalists(outcome, lambda config, shape=shape: request("template", shape, config), evaluator,
                             labels=lambda config, shape=shape: {**labels("template", shape)(config),
                                                                 "which": "finalist"})
        result = ShapeResult(
            shape=shape, label=label, space_total=space.total,
            space_after_constraints=space.after_constraints, space_after_compile=space.after_compile,
            space_candidates=space.after_hardware, pruned_reasons=space.reasons()[:8],
            baseline_us=baseline.timing.median_us if baseline.status == "ok" and baseline.timing else None,
            baseline_status=baseline.status, search=outcome,
        )
        if searched:
            searched(result)
        return result

    # Workers beyond one per shape measure configurations of a shape side by side, where its
    # strategy's proposals do not depend on scores (runner.UNINFORMED); a search of one shape on
    # eight GPUs is then eight times as wide.
    spread = max(1, getattr(worker, "parallelism", 1) // max(1, min(parallel, len(shapes))))
    draw_ahead(worker, [request("baseline", shape) for shape in shapes])
    report.shapes = map_in_threads(one_shape, shapes, parallel)

    winners = {s.label: s.search.best_config for s in report.shapes if s.search.best_config}
    seconds = budget.seconds if budget and budget.seconds else None
    deadline = _clock() + seconds * len(report.shapes) if seconds else None
    plan = cross_plan(winners, report.shapes, spec.symbols, budget.evaluations if budget else None,
                      runs_at=lambda config, s: not isinstance(request("template", s.shape, config), Exclusion))
    draw_ahead(worker, (req for config, _, at in plan.measurements for s in at  # those not stored, in its order
                        if not isinstance(req := request("template", s.shape, config), Exclusion)
                        and not evaluator.has(req)))
    with phases.timing("general"):
        if parallel > 1:  # measured all at once here, so that _general reads them from the store
            _prefetch_general(plan, request, evaluator, labels, deadline, parallel)
        report.general, report.general_us, cross_measured, report.general_cut = _general(
            plan, report.shapes, request, evaluator, labels, deadline)
    if progress and report.general_cut:
        progress(report.general_cut, None)
    report.dispatch = DispatchTable(kernel=spec.name, dtype=dtype, variant=variant, general=report.general, l2=l2,
                                    entries=[_entry(s, cross_measured.get(s.label, [])) for s in report.shapes],
                                    tuned_on=f"{report.device} ({report.arch})", tuned_date=report.recorded or report.date)
    if tune_request.onto is not None:  # before the checks: every configuration the table runs is checked
        report.dispatch, report.kept_entries = report.dispatch.onto(tune_request.onto)
    with phases.timing("config_checks"):
        check_table_configs(report, folder, worker, evaluator, progress, parallel)
    with phases.timing("verify"):
        verify_dispatch(report, folder, worker, evaluator, tune_request.verify, progress, parallel)
    report.seconds["tune"] = round(time.perf_counter() - started, 3)
    return report


def check_table_configs(report: TuneReport, folder: suite.KernelFolder, worker, evaluator: StoredEvaluator,
                        progress: Callable[[str, Trial | None], None] | None = None,
                        parallel: int = 1) -> list[CheckRow]:
    """Every configuration the report's table can run away from its tuned shapes, checked (not
    timed) at the kernel's odd shapes in every dtype and variant it runs in (checking.table_plan):
    the search checked each only where it was timed, and pick() runs it at every shape nearest
    its entry. A failure fails the tune, as a failed verification does. A replay checks only what
    its recording holds (the rest is "unrecorded", compiled nowhere)."""
    arch, sms = worker.device["arch"], worker.device.get("multiprocessors") or suite.DEFAULT_SMS
    # checked, not timed, in the run's regime as every request of the run
    rows = checking.table_plan(folder, report.dispatch, sms=sms, arch=arch, check=True, time=False,
                               stream_timing=False, l2=report.l2)
    answers = getattr(worker, "answers", None) if worker.device.get("replay") else None
    for row, req in rows:
        if req is not None:
            if answers is not None and not answers(req):
                row.status, row.message = "unrecorded", "the recording has no check of this configuration here"
    todo = [(row, req) for row, req in rows if req is not None and row.status == "pending"]
    if progress and todo:
        progress(f"checking {len(checking.table_configs(report.dispatch))} configurations of the table at "
                 f"{len(checking.check_shapes(folder))} shapes in every dtype and variant", None)
    checking.precompile(todo, arch)
    shapes = {folder.spec.label(s): s for s in checking.check_shapes(folder)}

    def check(item) -> None:
        row, req = item
        result, _ = evaluator(req, kernel=row.kernel, which="check", config=row.config, shape=shapes[row.shape],
                              dtype=row.dtype, variant=row.variant)
        row.status, row.message = result.status, result.message[:600]

    map_in_threads(check, todo, parallel)
    report.config_checks = [row for row, _ in rows]
    return report.config_checks


def start_configs(table: DispatchTable | None, folder: suite.KernelFolder, shape: dict[str, int], *,
                  sms: int, arch: str) -> list[dict[str, int]]:
    """The template configuration `table` would run at `shape`, as one of `folder`'s template now: a
    parameter the template no longer has dropped, one it has gained at its default (the last table
    was tuned before it existed, so its picks ran as the default). Its baseline entries and sources
    of its own are left out, so where it runs the baseline this is its nearest template pick (a
    search has to start somewhere); nothing from a table with no template pick at all."""
    if table is None:
        return []
    def now(config: dict[str, int] | None) -> dict[str, int] | None:
        """None where a value is one the template no longer offers."""
        return None if config is None else folder.template.point(config)

    entries = [e.model_copy(update={"config": now(e.config)}) for e in table.entries if e.source == "template"]
    current = table.model_copy(update={"general": now(table.general), "sources": {},
                                       "entries": [e for e in entries if e.config is not None]})
    if not (current.general or current.entries):
        return []
    try:
        pick = current.pick(shape, sms=sms, arch=arch)
    except AstraError:
        return []
    return [pick.config] if pick.source == "template" and pick.config else []


def with_starts(sample: list[dict[str, int]], starts: list[dict[str, int]]) -> list[dict[str, int]]:
    """A sample of the space with the configurations measured first added where it lacks them: a
    sample of 512 rarely holds the last table's pick (on 2026-11-28's four H200s it lacked it at 34
    of silu_and_mul's 65 shapes, and `--start shipped` measured nothing there)."""
    return sample + [c for i, c in enumerate(starts) if c not in sample and c not in starts[:i]]


def seed_configs(folder: suite.KernelFolder, env: dict[str, int]) -> list[dict[str, int]]:
    """The spec's seeds (schema.Seed) as points of `folder`'s template in the environment `env` (a
    shape, its dtype and the GPU: suite.environment), the parameters a seed leaves out at the
    template's defaults. A seed that names a parameter the template does not have (a model's
    template of the same kernel: the suite checks its own templates when it loads them), or whose
    value here is not a whole number the template offers (a width that does not split into such
    threads), is no point of this space here and is left out."""
    template = folder.template
    configs = []
    for seed in folder.spec.seeds:
        if not set(seed.config) <= set(template.names):
            continue
        try:
            given = {name: Expression(text)(env) for name, text in seed.config.items()}
        except AstraError:  # a symbol this environment lacks, a division by zero: no point here
            continue
        if all(float(v).is_integer() for v in given.values()):
            point = template.point({name: int(v) for name, v in given.items()})
            if point is not None:
                configs.append(point)
    return configs


def _prefetch_general(plan: CrossPlan, request, evaluator, labels, deadline, parallel: int) -> None:
    """The plan's measurements through the store, `parallel` at a time: _general then finds them
    stored, and picks exactly as it would have measuring them one by one."""
    pairs = []
    for config, _, at in plan.measurements:
        for s in at:
            req = request("template", s.shape, config)
            if not isinstance(req, Exclusion):
                pairs.append((req, labels("template", s.shape)(config)))

    def measure(pair) -> None:
        if deadline is None or _clock() <= deadline:
            evaluator(pair[0], **pair[1])

    map_in_threads(measure, pairs, parallel)


@dataclass
class CrossPlan:
    """Which shapes' winners _general measures at which shapes: `measurements` holds each distinct
    winner (its config, the shape whose winner it is, the shapes to measure it at); `bound` says why
    not every winner at every shape, when that is so."""

    measurements: list[tuple[dict, str, list[ShapeResult]]]
    bound: str | None = None


def cross_plan(winners: dict[str, dict], shapes: list[ShapeResult], symbols: list[str], per_shape: int | None,
               runs_at: Callable[[dict, ShapeResult], bool] = lambda config, shape: True) -> CrossPlan:
    """Every winner at every shape (winners x shapes evaluations), or, under an evaluation budget
    (`per_shape`, --budget), at each shape up to `per_shape` other winners, those of the shapes
    nearest it (distance as the dispatch table's: the sum of |log a - log b| over the shape's
    symbols; a configuration several shapes won is as near as the nearest of them), and at every
    shape the most central winner that runs at every shape (`runs_at`), the general
    configuration's one candidate. So the cross-measurement costs each shape no more than its own
    search did: every winner everywhere was 289 evaluations for rmsnorm's 17 shapes (budget 8: 153
    searched), and at 16384 tokens each is a large shape's evaluation. A winner from far away rarely
    wins (a shape's best is most often its own, or a neighbour's whose search went further)."""
    unique: dict[tuple, tuple[dict, str]] = {}
    won: dict[tuple, list[ShapeResult]] = {}
    by_label = {s.label: s for s in shapes}
    for label, config in winners.items():
        key = tuple(sorted(config.items()))
        unique.setdefault(key, (config, label))
        won.setdefault(key, []).append(by_label[label])
    if per_shape is None or per_shape >= len(unique) - 1:
        return CrossPlan(measurements=[(c, owner, list(shapes)) for c, owner in unique.values()])

    def distance(key: tuple, shape: ShapeResult) -> float:
        return min(sum(abs(math.log(o.shape[k]) - math.log(shape.shape[k])) for k in symbols) for o in won[key])

    everywhere = [k for k, (config, _) in unique.items() if all(runs_at(config, s) for s in shapes)]
    central = min(everywhere or list(unique), key=lambda k: (sum(distance(k, s) for s in shapes), unique[k][1]))
    at: dict[tuple, list[ShapeResult]] = {key: [] for key in unique}
    for shape in shapes:
        own = tuple(sorted(winners[shape.label].items())) if shape.label in winners else None
        others = [k for k in sorted(unique, key=lambda k: (distance(k, shape), unique[k][1]))
                  if k not in (own, central)]
        for key in [central, *others[:per_shape], *([own] if own else [])]:  # its own: stored by its search
            if shape not in at[key]:
                at[key].append(shape)
    return CrossPlan(
        measurements=[(config, owner, at[key]) for key, (config, owner) in unique.items() if at[key]],
        bound=(f"each shape measured up to {per_shape} other shapes' winners, those of the shapes nearest it "
               f"(--budget {per_shape}), and at every shape {unique[central][1]}'s winner, the general "
               f"configuration's candidate, rather than all {len(unique)} winners at every shape"))


class _Requests:
    """Evaluation requests and results-store labels for one kernel, dtype and variant on one GPU."""

    def __init__(self, folder: suite.KernelFolder, dtype: str, variant: str, limits, l2: str = "cold"):
        self.folder, self.dtype, self.variant, self.limits, self.l2 = folder, dtype, variant, limits, l2

    def labels(self, which: str, shape: dict[str, int]):
        return lambda config: dict(kernel=self.folder.spec.name, which=which, config=config, shape=shape,
                                   dtype=self.dtype, variant=self.variant)

    def request(self, which: str, shape: dict[str, int], config: dict[str, int] | None = None,
                source: Template | None = None):
        # stream_timing off: the search ranks by graph replay; a Python loop adds ~13 us a launch
        return suite.request(self.folder, which, shape, self.dtype, self.variant, config,
                             sms=self.limits.multiprocessors, arch=self.limits.arch, source=source,
                             stream_timing=False, l2=self.l2)


def draw_ahead(worker, requests: Iterable) -> None:
    """Have a local evaluation worker draw the inputs and float64 references `requests` will be
    checked on, in their order, on its host's other cores ahead of their evaluations
    (tools/measuring/draws.py): drawn one after another as each shape came, the draws took 276 of
    a silu_and_mul sweep's 476 s on an H200 while the GPU idled. A replay draws nothing; a
    cluster's workers share the problems out, each drawn ahead by one (WorkerPool.prefetch)."""
    cluster = getattr(worker, "prefetch", None)  # a cluster's workers of one kind (tools/cluster/pool.py)
    if cluster is not None and worker.device.get("replay"):  # a replay's workers draw nothing
        return
    if isinstance(worker, EvaluationWorker) or cluster is not None:
        items = {draws.case_key(*item): item for r in requests for item in request_draws(r)}  # each once, in order
        if items:
            try:
                if cluster is not None:  # each problem drawn ahead by one worker, which its evaluations go to
                    cluster(list(items.values()))
                else:
                    worker.call(draws.prefetch, list(items.values()))
            except WorkerError:  # drawing ahead only saves time: a worker that could not draws as it goes
                pass


def verify_dispatch(report: TuneReport, folder: suite.KernelFolder, worker, evaluator: StoredEvaluator,
                    shapes: list[dict[str, int]],
                    progress: Callable[[str, Trial | None], None] | None = None,
                    parallel: int = 1) -> list[VerifiedShape]:
    """Run the dispatch table's pick at each shape through the correctness checks and time it
    beside the baseline; the results replace those of the same shapes in `report.verified`."""
    limits = limits_for(worker.device["arch"], worker.device.get("multiprocessors"),
                        worker.device.get("max_shared_per_block_optin"))
    requests = _Requests(folder, report.dtype, report.variant, limits, report.l2)

    def verify(shape) -> VerifiedShape:
        if progress:
            progress(f"verifying {folder.spec.label(shape)}", None)
        return _verify(report.dispatch, shape, folder.spec, requests, evaluator)

    found = map_in_threads(verify, shapes, parallel)
    labels = {v.label for v in found}
    report.verified = [v for v in report.verified if v.label not in labels] + found
    return found


def _verify(dispatch: DispatchTable, shape, spec, requests: _Requests, evaluator) -> VerifiedShape:
    """What the generated launcher would run at `shape`: correct, and how fast beside the baseline."""
    label = spec.label(shape)
    try:
        config, picked_by, source = dispatch.pick(shape, requests.limits.multiprocessors, requests.limits.arch)
    except suite.AstraError as exc:
        return VerifiedShape(shape=shape, label=label, config={}, picked_by="", status="excluded", message=str(exc))
    result, _ = evaluator(requests.request(source, shape, config or None, dispatch.source_of(source)),
                          **requests.labels(source, shape)(config))
    baseline, _ = evaluator(requests.request("baseline", shape), **requests.labels("baseline", shape)({}))
    return VerifiedShape(
        shape=shape, label=label, config=config, picked_by=picked_by, status=result.status,
        median_us=result.timing.median_us if result.status == "ok" and result.timing else None,
        baseline_us=baseline.timing.median_us if baseline.status == "ok" and baseline.timing else None,
        message=result.message[:300],
    )


AUTO_EXHAUSTIVE = 64  # "auto" measures every candidate of a space at most this large


def pick_strategy(strategy: str, candidates: int, budget: Budget | None) -> str:
    """`auto` is exhaustive when every candidate fits the evaluation budget (or the space is
    small), else the model-based search; any other name is taken as given."""
    if strategy != "auto":
        return strategy
    limit = budget.evaluations if budget and budget.evaluations else AUTO_EXHAUSTIVE
    return "exhaustive" if candidates <= limit else "tpe"


def _general(plan: CrossPlan, shapes, request, evaluator, labels, deadline: float | None = None):
    """The plan's winners measured at the plan's shapes (cross_plan: every winner at every shape
    it runs at, unless an evaluation budget bounds it). Returns the one with the best geometric
    mean over all the shapes (the general configuration, if one was measured and runs everywhere),
    its times, per shape label the (time, config, whose winner) of every winner measured there, and
    why not every winner was measured at every shape, if so.

    Under a time budget this phase gets as long as the searches had in all (`deadline`): with
    many shapes it is winners x shapes evaluations, and at the largest shapes each takes seconds
    (silu_and_mul's 15 serving and Astra shapes on the H200 ran past 5 minutes). Stored results
    cost nothing, so a resumed run gets further.
    """
    best, best_times, best_score = None, {}, math.inf
    measured: dict[str, list[tuple[float, dict, str]]] = {}
    done = 0
    for config, owner, at in plan.measurements:
        times = {}
        for s in at:
            if deadline is not None and _clock() > deadline:
                cut = (f"the winners' cross-measurement ran out of time: {done} of {len(plan.measurements)} winners "
                       "measured at every shape planned (the general configuration is the best of those)")
                return best, best_times, measured, cut
            req = request("template", s.shape, config)
            if isinstance(req, Exclusion):
                continue
            result, _ = evaluator(req, **labels("template", s.shape)(config))
            if result.status == "ok" and result.timing is not None:
                times[s.label] = result.timing.median_us
                measured.setdefault(s.label, []).append((result.timing.median_us, config, owner))
        done += 1
        if len(times) == len(shapes):
            score = sum(math.log(t) for t in times.values()) / len(times)
            if score < best_score:
                best, best_times, best_score = config, times, score
    return best, best_times, measured, plan.bound


def _entry(shape: ShapeResult, measured: list[tuple[float, dict, str]]) -> DispatchEntry:
    """The fastest thing measured at this shape, recorded on `shape` too: its own search's best,
    another shape's winner, or the baseline when none of them beat it by defaults.TIMING_NOISE."""
    options = list(measured)
    if shape.search.best_config and shape.search.best_us:
        options.append((shape.search.best_us, shape.search.best_config, shape.label))
    fastest = min(options, key=lambda o: o[0]) if options else None
    if shape.baseline_us and (fastest is None or fastest[0] >= shape.baseline_us * (1 - TIMING_NOISE)):
        shape.dispatch_us, shape.dispatch_from = shape.baseline_us, "baseline"
        return DispatchEntry(shape=shape.shape, config={}, median_us=shape.baseline_us, source="baseline")
    if fastest is None:
        # Asked for but nothing measured (a replay lacking it, a run cut short): the baseline, which
        # is correct and the reference speed, rather than a guess from the nearest tuned shape.
        shape.dispatch_from = "baseline (nothing measured here)"
        return DispatchEntry(shape=shape.shape, config={}, source="baseline")
    us, config, owner = fastest
    shape.dispatch_us = us
    shape.dispatch_from = "search" if owner == shape.label and config == shape.search.best_config else f"the winner at {owner}"
    return DispatchEntry(shape=shape.shape, config=config, median_us=us)
