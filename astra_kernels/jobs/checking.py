"""`astra check`: the baseline and a sample of template configurations, compiled and tested;
with a dispatch table, every configuration the table can run (table_plan).

Requests are built first and compiled in parallel across the CPU cores (filling the compile
cache), so the evaluation worker, which runs one request at a time, finds every binary ready.

Why a table's configurations are checked apart from its tuned shapes: a table runs each entry's
configuration at every shape nearest that entry (DispatchTable.pick), and the tuner checked it only
at the shape it was tuned at, in the table's dtype and variant. A configuration correct there may
be wrong where no tuning looked (a width that is not a multiple of its vector, a single token), or
in a dtype or variant the kernel also serves; an optimiser that special-cases the timed shapes
looks exactly like that (docs/reliability.md, issue 39). The kernel's `odd` shape set is where
such shapes are named.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable

from pydantic import BaseModel

from astra_kernels.tools.toolchain.compiler import compile_many
from astra_kernels.tools.measuring.evaluation import EvaluationRequest
from astra_kernels.tools.templating.template import Exclusion
from astra_kernels.tools.measuring.worker import EvaluationWorker

from astra_kernels import suite
from astra_kernels.runtime.dispatch import DispatchTable


# What a check measures unless its caller says otherwise (`astra check --time`): correctness only,
# no timing; timed, it is by graph replay alone.
CHECK_ONLY = dict(time=False, stream_timing=False)


class CheckRow(BaseModel):
    kernel: str
    which: str
    config: dict[str, int]
    shape: str
    dtype: str
    variant: str
    status: str  # an EvaluationResult status, or "excluded"
    message: str = ""
    median_us: float | None = None
    fraction_of_copy_bandwidth: float | None = None
    registers: int | None = None


def plan(folder: suite.KernelFolder, *, shapes: Iterable[dict] | None = None,
         dtypes: Iterable[str] | None = None, variants: Iterable[str] | None = None,
         samples: int = 4, seed: int = 0, sms: int = suite.DEFAULT_SMS,
         arch: str | None = None, **measuring) -> list[tuple[CheckRow, EvaluationRequest | None]]:
    """Rows to fill in: per shape, dtype and variant, the baseline, the default configuration and
    up to `samples` - 1 other sampled configurations that the constraints allow at that shape."""
    spec = folder.spec
    template = folder.template
    # The whole space in a seeded order, default first: each shape takes the first `samples`
    # configurations its constraints allow, so a shape that admits few still gets some.
    order = [c for c in template.sample_configs(template.size(), seed) if c != template.default]
    random.Random(seed).shuffle(order)
    candidates = [template.default] + order
    rows = []
    for shape in shapes or spec.all_shapes():
        for dtype in dtypes or spec.dtypes:
            for variant in variants or spec.variants:
                base = dict(kernel=spec.name, shape=spec.label(shape), dtype=dtype, variant=variant)
                jobs = [("baseline", {})]
                taken = 0
                for config in candidates:
                    if taken >= samples:
                        break
                    if isinstance(suite.request(folder, "template", shape, dtype, variant, config, sms=sms), Exclusion):
                        continue
                    jobs.append(("template", config))
                    taken += 1
                rows += [_row(base, which, config, suite.request(folder, which, shape, dtype, variant,
                                                                 config or None, sms=sms, arch=arch,
                                                                 **{**CHECK_ONLY, **measuring}))
                         for which, config in jobs]
    return rows


def _row(base: dict, which: str, config: dict[str, int],
         req: EvaluationRequest | Exclusion) -> tuple[CheckRow, EvaluationRequest | None]:
    """A row to fill in with its request, or already "excluded" with the constraint's reason."""
    if isinstance(req, Exclusion):
        return CheckRow(**base, which=which, config=config, status="excluded", message=req.reason), None
    return CheckRow(**base, which=which, config=config, status="pending"), req


def table_configs(table: DispatchTable) -> list[tuple[str, dict[str, int]]]:
    """The (source, configuration) pairs the table names: its entries' and its general one, each
    once, in table order. The baseline is left out: it is the production kernel, checked with every
    sample of `astra check`. pick() can launch others away from the tuned shapes (the closest
    runnable configuration, a configuration moved one value at an untuned width): table_plan adds
    the pick at each check shape, and every benchmark time is a checked evaluation."""
    found: list[tuple[str, dict[str, int]]] = []
    pairs = [(e.source, e.config) for e in table.entries if e.source != "baseline"]
    for pair in pairs + ([("template", table.general)] if table.general else []):
        if pair not in found:
            found.append(pair)
    return found


def check_shapes(folder: suite.KernelFolder, shapes: Iterable[dict] | None = None) -> list[dict[str, int]]:
    """Where a table's configurations are checked: `shapes` when given, else the kernel's `odd` set
    (the shapes no tuning times and a server still meets), else every shape of its sets."""
    return list(shapes or folder.spec.shapes.get("odd") or folder.spec.all_shapes())


def table_plan(folder: suite.KernelFolder, table: DispatchTable, *, shapes: Iterable[dict] | None = None,
               dtypes: Iterable[str] | None = None, variants: Iterable[str] | None = None,
               sms: int = suite.DEFAULT_SMS, arch: str | None = None,
               **measuring) -> list[tuple[CheckRow, EvaluationRequest | None]]:
    """Rows to fill in: every configuration the table can run (table_configs) at every shape of
    check_shapes, and what pick() runs there when it is none of those (the runnable configuration
    closest to a tuned one, where a table's configurations have the shape compiled in), in every
    dtype and variant of the kernel unless narrowed. A configuration its source's constraints
    refuse at a shape is "excluded" there: pick() passes it over."""
    spec = folder.spec
    rows = []
    for shape in check_shapes(folder, shapes):
        runs = table_configs(table)
        try:
            picked = table.pick(shape, sms, arch)
        except suite.AstraError:  # nothing runs there; the rows below say why for each
            picked = None
        if picked is not None and picked.source != "baseline" and (picked.source, picked.config) not in runs:
            runs = [*runs, (picked.source, picked.config)]
        for dtype in dtypes or spec.dtypes:
            for variant in variants or spec.variants:
                base = dict(kernel=spec.name, shape=spec.label(shape), dtype=dtype, variant=variant)
                rows += [_row(base, source, config, suite.request(folder, source, shape, dtype, variant, config,
                                                                  sms=sms, arch=arch, source=table.source_of(source),
                                                                  **{**CHECK_ONLY, **measuring}))
                         for source, config in runs]
    return rows


def _smallest_runs(folder: suite.KernelFolder, dtypes: Iterable[str] | None, variants: Iterable[str] | None):
    """(set name, its smallest shape, dtype, variant) for every shape set in every dtype and variant
    asked: where the CPU runs of a folder's own Python (reference, peer) take place."""
    spec = folder.spec
    for set_name, shapes in spec.shapes.items():
        if shapes:
            shape = min(shapes, key=lambda s: math.prod(s.values()))
            for dtype in dtypes or spec.dtypes:
                for variant in variants or spec.variants:
                    yield set_name, shape, dtype, variant


def _raised(where: str, exc: Exception) -> str:
    """What the folder's own code raised, as one line."""
    return f"{where}: {type(exc).__name__}: {(' '.join(str(exc).split()) or type(exc).__name__)[:300]}"


def reference_problems(folder: suite.KernelFolder, *, dtypes: Iterable[str] | None = None,
                       variants: Iterable[str] | None = None, seed: int = 1) -> list[str]:
    """reference.py run here, on the CPU (it is NumPy), at the smallest shape of each shape set in
    every dtype and variant asked: its inputs and expected outputs drawn and held to the signature
    (every input, every output by its name, at the spec's sizes), each problem one line. Why: a
    NameError or a misspelt output key would otherwise pass `astra check` on a machine without a
    GPU and surface only on the GPU, after the compiles."""
    problems = []
    for set_name, shape, dtype, variant in _smallest_runs(folder, dtypes, variants):
        try:
            problem = suite.problem(folder, shape, dtype, variant)
            problem.validate_case(problem.make_case(seed))
        except Exception as exc:  # the folder's own code: whatever it raises is the answer
            problems.append(_raised(f"reference.py at {folder.spec.label(shape)} ({set_name} set, {dtype}, "
                                    f"{variant})", exc))
    return problems


def peer_problems(folder: suite.KernelFolder, *, dtypes: Iterable[str] | None = None,
                  variants: Iterable[str] | None = None, seed: int = 1) -> list[str] | None:
    """peer.py run on the CPU beside the reference, at the same smallest shape of each set in every
    dtype and variant asked, its outputs held to the reference with the kernel's tolerances (the
    peer is the bar the tuned kernel is timed against, so a wrong one misleads every benchmark).
    None where there is nothing to run: no peer.py, or no PyTorch here."""
    import importlib.util

    from astra_kernels.tools.measuring.correctness import compare

    from . import torch_tensors

    if not (folder.path / "peer.py").is_file() or importlib.util.find_spec("torch") is None:
        return None
    problems = []
    for set_name, shape, dtype, variant in _smallest_runs(folder, dtypes, variants):
        where = f"peer.py at {folder.spec.label(shape)} ({set_name} set, {dtype}, {variant})"
        try:
            problem = suite.problem(folder, shape, dtype, variant)
            case = problem.make_case(seed)
            got = torch_tensors.run_peer(folder.spec.name, case.inputs, shape, dtype, variant)
            checks = [compare(p.name, got[p.name], case.expected[p.name], problem.tolerance(p.dtype))
                      for p in problem.buffers if p.role != "in"]
        except Exception as exc:  # the folder's own code: whatever it raises is the answer
            problems.append(_raised(where, exc))
            continue
        problems += [f"{where}: {c.name}: {c.detail}" for c in checks if not c.passed]
    return problems


_FIRST_ERROR = re.compile(r"error|failed", re.IGNORECASE)
_ERROR_COUNT = re.compile(r"errors? detected", re.IGNORECASE)  # the compiler's closing count, not an error


def compile_failures(compiled: Iterable[tuple[CheckRow, str | None]], context: int = 6) -> list[str]:
    """Failed compiles, once per distinct error: which file, at which configuration, dtype, variant
    and shape, how many other binaries failed the same way (a template's mistake fails every
    configuration alike; a page of identical logs hides where), then the compiler's text from its
    first error on (`context` lines: the line and the source it quotes)."""
    by_error: dict[str, tuple[list[str], list[CheckRow]]] = {}
    for row, error in compiled:
        if error is not None:
            lines = [line.rstrip() for line in error.splitlines() if line.strip()] or ["failed"]
            start = next((i for i, line in enumerate(lines) if _FIRST_ERROR.search(line)
                          and not _ERROR_COUNT.search(line)), 0)
            by_error.setdefault(lines[start].strip(), (lines[start:start + context], []))[1].append(row)
    out = []
    for text, rows in by_error.values():
        row = rows[0]
        config = " ".join(f"{k}={v}" for k, v in row.config.items()) or "(no parameters)"
        more = f" and {len(rows) - 1} more binaries" if len(rows) > 1 else ""
        out.append(f"{row.which}.cu at {config}, {row.dtype} {row.variant}, {row.shape}{more}:\n"
                   + "\n".join(f"  {line}" for line in text))
    return out


def failures(rows: Iterable[CheckRow]) -> list[CheckRow]:
    """The rows whose configuration failed its checks: not ok, not excluded by its own constraints,
    and not left unanswered (a replay without the row, a lost worker: no verdict)."""
    return [r for r in rows if r.status not in ("ok", "excluded", "unrecorded", "lost", "pending")]


def describe(row: CheckRow) -> str:
    """One failed row as a line: where, which configuration, and the first line of why."""
    config = " ".join(f"{k}={v}" for k, v in row.config.items()) or "(no parameters)"
    first = row.message.splitlines()[0][:200] if row.message else ""
    return f"{row.which} {config} at {row.shape} ({row.dtype}, {row.variant}): {row.status}: {first}"


def precompile(rows: list[tuple[CheckRow, EvaluationRequest | None]], arch: str) -> None:
    """Compile every distinct binary the rows need, in parallel; the worker then reads the cache."""
    unique = {}
    for _, req in rows:
        if req is not None:
            req.options = req.options.model_copy(update={"arch": req.options.arch or arch})
            unique.setdefault((req.source, req.options.model_dump_json()), (req.source, req.options))
    compile_many(unique.values())


def run(rows: list[tuple[CheckRow, EvaluationRequest | None]], worker: EvaluationWorker, *,
        progress: Callable[[CheckRow], None] | None = None) -> list[CheckRow]:
    """Precompile every distinct binary in parallel, then evaluate row by row in the worker (each
    request measuring as its plan asked: plan(..., time=..., stream_timing=False))."""
    precompile(rows, worker.device["arch"])
    done = []
    for row, req in rows:
        if req is not None:
            result = worker.evaluate(req)
            row.status, row.message = result.status, result.message
            row.registers = result.kernel_info.resources.registers if result.kernel_info else None
            if result.timing:
                row.median_us = result.timing.median_us
                row.fraction_of_copy_bandwidth = result.fraction_of_copy_bandwidth
        done.append(row)
        if progress:
            progress(row)
    return done
