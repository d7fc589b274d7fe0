"""Every kernel of the suite on a real GPU: the baseline at every shape, dtype and variant, and a
sample of template configurations at every shape, all through the full correctness protocol."""

from __future__ import annotations

import pytest

from astra_kernels.jobs import checking
from astra_kernels import suite
from astra_kernels.tools.measuring.worker import EvaluationWorker

pytestmark = pytest.mark.gpu

# Shapes whose buffers pass LARGE bytes get the main dtype and variant only, and past HUGE only the
# baseline and the default configuration: their float64 references take seconds to a minute each,
# and the per-element code paths are those of the smaller shapes at the same width.
LARGE = 1 << 26
HUGE = 1 << 30

CASES = [(name, shape) for name in suite.names() for shape in suite.load(name).spec.all_shapes()]


def _size(folder, shape) -> int:
    req = suite.request(folder, "baseline", shape, folder.spec.dtypes[0])
    return sum(p.nbytes for p in req.problem.buffers)


def _rows(name: str, shape: dict):
    folder = suite.load(name)
    spec = folder.spec
    main_dtype = "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]
    size = _size(folder, shape)
    rows = checking.plan(folder, shapes=[shape], dtypes=[main_dtype], variants=["default"],
                         samples=1 if size > HUGE else 4)
    if size <= LARGE:
        for dtype in spec.dtypes:
            for variant in spec.variants:
                if (dtype, variant) != (main_dtype, "default"):
                    rows += checking.plan(folder, shapes=[shape], dtypes=[dtype], variants=[variant], samples=1)
    return rows


@pytest.fixture(scope="module")
def worker():
    with EvaluationWorker(timeout_s=600) as w:
        yield w


_PRECOMPILED: set[str] = set()


@pytest.mark.parametrize("name,shape", CASES, ids=[f"{n}-{suite.load(n).spec.label(s)}" for n, s in CASES])
def test_baseline_and_template_sample_are_correct(worker, name, shape):
    if name not in _PRECOMPILED:  # one parallel compile per kernel instead of one pool per test
        checking.precompile([row for n, s in CASES if n == name for row in _rows(n, s)], worker.device["arch"])
        _PRECOMPILED.add(name)
    results = checking.run(_rows(name, shape), worker)
    failed = [r for r in results if r.status not in ("ok", "excluded")]
    summary = "\n".join(f"{r.dtype} {r.variant} {r.which} {r.config}: {r.status}: {r.message[:400]}"
                        for r in failed[:8])
    if failed:
        print(f"\n{name} {suite.load(name).spec.label(shape)}: {len(failed)} of {len(results)} failed:\n{summary}")
    assert not failed, f"{len(failed)} of {len(results)} rows failed:\n{summary}"
    assert any(r.which == "baseline" and r.status == "ok" for r in results)
    assert any(r.which == "template" and r.status == "ok" for r in results)
