"""Every kernel of the suite on a real GPU: the baseline at every shape, dtype and variant, and a
sample of template configurations at every shape, all through the full correctness protocol."""

from __future__ import annotations

import pytest

from astra_kernels.kernels_sglang import checking, suite
from astra_kernels.tools import EvaluationWorker

pytestmark = pytest.mark.gpu

# Shapes whose buffers pass LARGE bytes get the main dtype and variant only, and past HUGE only the
# baseline and the default configuration: their float64 references take seconds to a minute each,
# and the per-element code paths are those of the smaller shapes at the same width.
LARGE = 1 << 26
HUGE = 1 << 30


@pytest.fixture(scope="module")
def worker():
    with EvaluationWorker(timeout_s=600) as w:
        yield w


def _size(folder, shape) -> int:
    req = suite.request(folder, "baseline", shape, folder.spec.dtypes[0])
    return sum(p.nbytes for p in req.problem.buffers)


@pytest.mark.parametrize("name", suite.names())
def test_baseline_and_template_sample_are_correct_everywhere(worker, name):
    folder = suite.load(name)
    spec = folder.spec
    main_dtype = "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]
    rows = []
    for shape in spec.all_shapes():
        size = _size(folder, shape)
        large = size > LARGE
        rows += checking.plan(folder, shapes=[shape], dtypes=[main_dtype], variants=["default"],
                              samples=1 if size > HUGE else 4)
        if not large:
            others = [(d, v) for d in spec.dtypes for v in spec.variants if (d, v) != (main_dtype, "default")]
            for dtype, variant in others:
                rows += checking.plan(folder, shapes=[shape], dtypes=[dtype], variants=[variant], samples=1)
    results = checking.run(rows, worker)
    failed = [r for r in results if r.status not in ("ok", "excluded")]
    summary = "\n".join(f"{r.shape} {r.dtype} {r.variant} {r.which} {r.config}: {r.status}: {r.message[:300]}"
                        for r in failed[:10])
    assert not failed, f"{len(failed)} of {len(results)} rows failed:\n{summary}"
    assert sum(r.status == "ok" and r.which == "baseline" for r in results) >= len(spec.all_shapes())
