"""`astra check`: the baseline and a sample of template configurations, compiled and tested.

Requests are built first and compiled in parallel across the CPU cores (filling the compile
cache), so the evaluation worker, which runs one request at a time, finds every binary ready.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from pydantic import BaseModel

from astra_kernels.tools.toolchain.compiler import compile_many
from astra_kernels.tools.measuring.evaluation import EvaluationRequest
from astra_kernels.tools.templating.template import Exclusion
from astra_kernels.tools.measuring.worker import EvaluationWorker

from astra_kernels.kernels_sglang import suite


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
         arch: str | None = None) -> list[tuple[CheckRow, EvaluationRequest | None]]:
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
                for which, config in jobs:
                    req = suite.request(folder, which, shape, dtype, variant, config or None, sms=sms, arch=arch)
                    if isinstance(req, Exclusion):
                        rows.append((CheckRow(**base, which=which, config=config, status="excluded",
                                              message=req.reason), None))
                    else:
                        rows.append((CheckRow(**base, which=which, config=config, status="pending"), req))
    return rows


def precompile(rows: list[tuple[CheckRow, EvaluationRequest | None]], arch: str) -> None:
    """Compile every distinct binary the rows need, in parallel; the worker then reads the cache."""
    unique = {}
    for _, req in rows:
        if req is not None:
            req.options = req.options.model_copy(update={"arch": req.options.arch or arch})
            unique.setdefault((req.source, req.options.model_dump_json()), (req.source, req.options))
    compile_many(unique.values())


def run(rows: list[tuple[CheckRow, EvaluationRequest | None]], worker: EvaluationWorker, *,
        time: bool = False, progress: Callable[[CheckRow], None] | None = None) -> list[CheckRow]:
    """Precompile every distinct binary in parallel, then evaluate row by row in the worker."""
    precompile(rows, worker.device["arch"])
    for _, req in rows:
        if req is not None:
            req.time = time
            req.stream_timing = False
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
